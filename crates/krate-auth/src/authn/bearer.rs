//! Bearer tokens (`Authorization: Bearer TOKEN`), asked of the token authenticators in
//! turn. A token nobody accepts is a 401, as upstream: presented credentials never fall
//! back to anonymous.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Authenticated, Authenticator, AuthnError, Credentials, invalid, with_authenticated_group};

#[async_trait]
pub trait TokenAuthenticator: Send + Sync {
    /// Ok(None): not a token of this kind. `audiences`: those the token must be valid
    /// for (the API server's own, or a TokenReview's).
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<Option<Authenticated>, AuthnError>;
}

/// Tokens that carry no audience (static and bootstrap tokens) are valid for the API
/// server's audiences only: a request for others must share one of them (upstream's
/// audience-agnostic wrapper).
pub fn implicit_audiences(api_audiences: &[String], requested: &[String]) -> Result<Vec<String>, AuthnError> {
    if requested.is_empty() {
        return Ok(api_audiences.to_vec());
    }
    let both: Vec<String> = api_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
    if both.is_empty() {
        return Err(invalid(format!(
            "token audiences {api_audiences:?} is invalid for the target audiences {requested:?}"
        )));
    }
    Ok(both)
}

/// The bearer token of a request, if its Authorization header holds one. Some(""): the
/// scheme is there without a token (invalid, as upstream).
pub fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim_start();
    // "Bearer a b": upstream takes the second word only when there are exactly two.
    Some(if token.contains(' ') { "" } else { token })
}

pub struct BearerTokens {
    authenticators: Vec<Arc<dyn TokenAuthenticator>>,
    api_audiences: Vec<String>,
}

impl BearerTokens {
    pub fn new(authenticators: Vec<Arc<dyn TokenAuthenticator>>, api_audiences: Vec<String>) -> Self {
        BearerTokens { authenticators, api_audiences }
    }

    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// Authenticates `token` for `audiences` (the API server's when empty).
    pub async fn review(&self, token: &str, audiences: &[String]) -> Result<Authenticated, AuthnError> {
        if token.is_empty() {
            return Err(invalid("invalid bearer token"));
        }
        let audiences = if audiences.is_empty() { &self.api_audiences[..] } else { audiences };
        let mut failure = None;
        for a in &self.authenticators {
            match a.authenticate_token(token, audiences).await {
                Ok(Some(mut found)) => {
                    found.user = with_authenticated_group(found.user);
                    return Ok(found);
                }
                Ok(None) => {}
                Err(e) => failure = Some(e),
            }
        }
        Err(failure.unwrap_or_else(|| invalid("invalid bearer token")))
    }
}

#[async_trait]
impl Authenticator for BearerTokens {
    async fn authenticate(&self, creds: &Credentials<'_>) -> Result<Option<Authenticated>, AuthnError> {
        let Some(token) = bearer_token(creds.headers) else { return Ok(None) };
        self.review(token, &[]).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, auth.parse().unwrap());
        h
    }

    #[test]
    fn bearer_token_is_read_from_authorization() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("Bearer")), Some(""));
        assert_eq!(bearer_token(&headers("Bearer a b")), Some(""));
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&http::HeaderMap::new()), None);
    }

    #[test]
    fn audience_agnostic_tokens_share_the_api_audiences() {
        let api = vec!["https://kubernetes.default.svc".to_string()];
        assert_eq!(implicit_audiences(&api, &[]).unwrap(), api);
        assert_eq!(implicit_audiences(&api, &api).unwrap(), api);
        assert!(implicit_audiences(&api, &["vault".to_string()]).is_err());
    }
}
