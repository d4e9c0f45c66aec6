//! Bootstrap tokens (`ID.SECRET`, 6 and 16 characters of [a-z0-9]): kube-system Secrets
//! named `bootstrap-token-ID` of type bootstrap.kubernetes.io/token authenticate nodes
//! joining the cluster as `system:bootstrap:ID` in system:bootstrappers. `krate server`
//! makes one such token, its join token, on first start.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use krate_api::admission::NoAdmission;
use krate_api::registry::{Context, Scope};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};
use rand::Rng;
use serde_json::{Value, json};

use super::bearer::implicit_audiences;
use super::{Authenticated, AuthnError, TokenAuthenticator, invalid};

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const SECRET_PREFIX: &str = "bootstrap-token-";
const NAMESPACE: &str = "kube-system";
/// The group every bootstrap token's user is in; extra groups must start with it.
pub const GROUP: &str = "system:bootstrappers";
/// The extra group of the join token, as kubeadm's default node token.
pub const JOIN_GROUP: &str = "system:bootstrappers:krate:default-node-token";

/// (id, secret) of a well-formed token.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

fn data(secret: &Value, key: &str) -> Option<String> {
    let b64 = secret.get("data")?.get(key)?.as_str()?;
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).ok()?;
    String::from_utf8(bytes).ok()
}

/// The user a bootstrap token Secret grants to `token_secret`, or why it does not.
pub fn check(secret: &Value, id: &str, token_secret: &str, now: jiff::Timestamp) -> Result<UserInfo, AuthnError> {
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) {
        return Err(invalid(format!("secret {SECRET_PREFIX}{id} is not of type {SECRET_TYPE}")));
    }
    if krate_api::object::is_deleting(secret) {
        return Err(invalid(format!("bootstrap token {id} is being deleted")));
    }
    if data(secret, "token-id").as_deref() != Some(id) {
        return Err(invalid(format!("bootstrap token {id}: token-id does not match the secret's name")));
    }
    let stored = data(secret, "token-secret").unwrap_or_default();
    if !super::lookup::same_secret(stored.as_bytes(), token_secret.as_bytes()) {
        return Err(invalid(format!("bootstrap token {id}: wrong secret")));
    }
    if let Some(exp) = data(secret, "expiration") {
        match exp.parse::<jiff::Timestamp>() {
            Ok(t) if t > now => {}
            Ok(_) => return Err(invalid(format!("bootstrap token {id} has expired"))),
            Err(_) => return Err(invalid(format!("bootstrap token {id}: unparseable expiration {exp:?}"))),
        }
    }
    if data(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err(invalid(format!("bootstrap token {id} is not usable for authentication")));
    }
    let mut groups = vec![GROUP.to_string()];
    for g in data(secret, "auth-extra-groups").unwrap_or_default().split(',').map(str::trim).filter(|g| !g.is_empty()) {
        if !g.starts_with("system:bootstrappers:") {
            return Err(invalid(format!("bootstrap token {id}: extra group {g:?} is not under system:bootstrappers:")));
        }
        groups.push(g.to_string());
    }
    Ok(UserInfo { name: format!("system:bootstrap:{id}"), groups, ..Default::default() })
}

pub struct BootstrapTokens {
    registry: Arc<Registry>,
    api_audiences: Vec<String>,
}

impl BootstrapTokens {
    pub fn new(registry: Arc<Registry>, api_audiences: Vec<String>) -> Self {
        BootstrapTokens { registry, api_audiences }
    }
}

#[async_trait]
impl TokenAuthenticator for BootstrapTokens {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<Option<Authenticated>, AuthnError> {
        let Some((id, token_secret)) = parse(token) else { return Ok(None) };
        let name = format!("{SECRET_PREFIX}{id}");
        let secret = super::lookup::core(&self.registry, "secrets", Some(NAMESPACE), &name)
            .await
            .map_err(|e| invalid(format!("reading bootstrap token {id}: {}", e.message)))?;
        // A well-formed token without its Secret may still be a static token.
        let Some(secret) = secret else { return Ok(None) };
        let user = check(&secret, id, token_secret, jiff::Timestamp::now())?;
        Ok(Some(Authenticated { user, audiences: implicit_audiences(&self.api_audiences, audiences)? }))
    }
}

fn random(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// The Secret holding bootstrap token `id.secret`.
pub fn token_secret(id: &str, secret: &str, description: &str, extra_groups: &str) -> Value {
    let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("{SECRET_PREFIX}{id}"), "namespace": NAMESPACE},
        "type": SECRET_TYPE,
        "data": {
            "description": b64(description),
            "token-id": b64(id),
            "token-secret": b64(secret),
            "usage-bootstrap-authentication": b64("true"),
            "usage-bootstrap-signing": b64("true"),
            "auth-extra-groups": b64(extra_groups),
        },
    })
}

#[derive(Debug, thiserror::Error)]
pub enum JoinTokenError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("storing the join token: {0}")]
    Api(String),
}

/// The cluster's join token: read from `path` (made on first start, mode 0600) and
/// kept as a bootstrap token Secret, re-created if someone deleted it.
pub async fn ensure_join_token(registry: &Registry, path: &Path) -> Result<String, JoinTokenError> {
    let io = |source| JoinTokenError::Io { path: path.display().to_string(), source };
    let token = match tokio::fs::read_to_string(path).await {
        Ok(t) if parse(t.trim()).is_some() => t.trim().to_string(),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "the join token file is not a bootstrap token; making a new one");
            String::new()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(e)),
    };
    let token = if token.is_empty() {
        let t = format!("{}.{}", random(6), random(16));
        let (p, contents) = (path.to_path_buf(), format!("{t}\n"));
        tokio::task::spawn_blocking(move || super::jwt::write_private(&p, &contents))
            .await
            .map_err(|e| io(std::io::Error::other(e)))?
            .map_err(io)?;
        t
    } else {
        token
    };
    let (id, secret) = parse(&token).expect("checked above");
    let resource =
        registry.table.lookup("", "v1", "secrets").ok_or_else(|| JoinTokenError::Api("no secrets".into()))?;
    let scope = Scope { resource, namespace: Some(NAMESPACE.into()) };
    let user =
        UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() };
    let ctx = Context::internal(&user, &NoAdmission);
    let obj = token_secret(id, secret, "The join token of this krate cluster.", JOIN_GROUP);
    match registry.create(&scope, obj, &ctx).await {
        Ok(_) => tracing::info!(id, "stored the join token"),
        Err(ApiError { code: 409, .. }) => {}
        Err(e) => return Err(JoinTokenError::Api(e.message)),
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_tokens_parse() {
        assert_eq!(parse("abcdef.0123456789abcdef"), Some(("abcdef", "0123456789abcdef")));
        assert_eq!(parse("ABCDEF.0123456789abcdef"), None);
        assert_eq!(parse("abcde.0123456789abcdef"), None);
        assert_eq!(parse("abcdef0123456789abcdef"), None);
        assert_eq!(parse("abcdef.0123456789abcdef.x"), None);
    }

    #[test]
    fn a_valid_secret_grants_the_bootstrap_user() {
        let now = jiff::Timestamp::now();
        let s = token_secret("abcdef", "0123456789abcdef", "d", "system:bootstrappers:nodes");
        let user = check(&s, "abcdef", "0123456789abcdef", now).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(user.groups, ["system:bootstrappers", "system:bootstrappers:nodes"]);
        assert!(check(&s, "abcdef", "0123456789abcdeX", now).is_err());
    }

    #[test]
    fn expired_unusable_or_badly_grouped_secrets_are_refused() {
        let now = jiff::Timestamp::now();
        let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
        let mut s = token_secret("abcdef", "0123456789abcdef", "d", "");
        s["data"]["expiration"] = json!(b64("2020-01-01T00:00:00Z"));
        assert!(check(&s, "abcdef", "0123456789abcdef", now).unwrap_err().to_string().contains("expired"));
        s["data"]["expiration"] = json!(b64("2999-01-01T00:00:00Z"));
        assert!(check(&s, "abcdef", "0123456789abcdef", now).is_ok());
        s["data"]["usage-bootstrap-authentication"] = json!(b64("false"));
        assert!(check(&s, "abcdef", "0123456789abcdef", now).is_err());
        let mut s = token_secret("abcdef", "0123456789abcdef", "d", "system:masters");
        assert!(check(&s, "abcdef", "0123456789abcdef", now).is_err());
        s["type"] = json!("Opaque");
        assert!(check(&s, "abcdef", "0123456789abcdef", now).is_err());
    }
}
