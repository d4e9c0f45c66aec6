//! Authentication: credentials in, a user out. Each authenticator looks at the
//! credentials it understands and says nothing about the rest; a union asks them in
//! turn. Presented but invalid credentials are an error (401), never "anonymous".
//!
//! - [`x509`]: client certificates, verified against the cluster CA;
//! - [`bearer`]: `Authorization: Bearer` tokens, asked of the token authenticators:
//!   [`token_file`] (`--token-auth-file`), [`bootstrap`] (kube-system Secrets),
//!   [`serviceaccount`] (signed JWTs, bound and legacy);
//! - [`token_request`], [`reviews`]: serviceaccounts/token, TokenReview and
//!   SelfSubjectReview, answered by computation;
//! - [`oidc`]: the issuer's discovery document and keys;
//! - [`legacy_tokens`]: fills Secret-based service-account tokens;
//! - [`impersonate`]: Impersonate-* headers, checked with the authorizer.

pub mod bearer;
pub mod bootstrap;
pub mod bootstrap_jws;
pub mod impersonate;
pub mod jwt;
pub mod legacy_tokens;
mod lookup;
pub mod metrics;
pub mod oidc;
pub mod reviews;
pub mod serviceaccount;
pub mod token_file;
pub mod token_request;
mod x509;

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::user::UserInfo;

pub use bearer::{BearerTokens, TokenAuthenticator};
pub use x509::{CaError, X509, user_from_cert};

/// What a request presents.
pub struct Credentials<'a> {
    /// The client's certificate chain (DER, leaf first) from the TLS handshake.
    pub client_certs: &'a [Vec<u8>],
    pub headers: &'a http::HeaderMap,
}

/// Who the request acts as, and for whom its credentials were issued.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Authenticated {
    pub user: UserInfo,
    /// Audiences the credentials are valid for (tokens); empty: the API server's own.
    pub audiences: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    /// Credentials were presented and are not valid; the message is for the log only,
    /// clients get upstream's bare 401.
    #[error("invalid credentials: {0}")]
    Invalid(String),
}

pub(crate) fn invalid(msg: impl Into<String>) -> AuthnError {
    AuthnError::Invalid(msg.into())
}

#[async_trait]
pub trait Authenticator: Send + Sync {
    /// Ok(None): this authenticator has nothing to say about these credentials.
    async fn authenticate(&self, creds: &Credentials<'_>) -> Result<Option<Authenticated>, AuthnError>;
}

/// Tries authenticators in order: the first to recognise the credentials decides.
pub struct Union(pub Vec<Arc<dyn Authenticator>>);

#[async_trait]
impl Authenticator for Union {
    async fn authenticate(&self, creds: &Credentials<'_>) -> Result<Option<Authenticated>, AuthnError> {
        let mut failure = None;
        for a in &self.0 {
            match a.authenticate(creds).await {
                Ok(Some(user)) => return Ok(Some(user)),
                Ok(None) => {}
                // Another authenticator may still accept (upstream's union does the same).
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}

/// Adds system:authenticated to an authenticated user, as upstream's group adder does.
pub(crate) fn with_authenticated_group(mut user: UserInfo) -> UserInfo {
    if !user.is_anonymous() && !user.in_group("system:authenticated") {
        user.groups.push("system:authenticated".into());
    }
    user
}
