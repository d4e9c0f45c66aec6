//! Service-account tokens: JWTs signed with the server's key.
//!
//! - Bound tokens (TokenRequest): issuer `--service-account-issuer`, audiences, expiry,
//!   and the objects they are bound to (pod, secret, node). Valid while the
//!   ServiceAccount and the bound object still exist with the same uid.
//! - Legacy tokens (Secrets of type kubernetes.io/service-account-token): issuer
//!   `kubernetes/serviceaccount`, no expiry, valid while the Secret holds them.

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};
use serde_json::{Value, json};

use super::jwt::{SigningKey, peek_claims};
use super::lookup::{self, deleted_before, uid};
use super::{Authenticated, AuthnError, TokenAuthenticator, invalid};

/// Upstream's issuer of Secret-based tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Clock skew tolerated on exp and nbf (upstream's jwt leeway).
const LEEWAY_SECONDS: i64 = 60;
/// Tokens of an object being deleted stay valid this long (upstream's grace).
const DELETION_GRACE_SECONDS: i64 = 60;
pub const LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";
pub const INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";
pub const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
pub const SA_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
pub const SECRET_TYPE: &str = "kubernetes.io/service-account-token";

/// An object a token is bound to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundObject {
    pub name: String,
    pub uid: String,
}

/// What a bound token says.
#[derive(Clone, Debug, Default)]
pub struct BoundClaims {
    pub namespace: String,
    pub service_account: BoundObject,
    pub pod: Option<BoundObject>,
    pub secret: Option<BoundObject>,
    pub node: Option<BoundObject>,
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
}

pub fn username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// `system:serviceaccount:NS:NAME` → (NS, NAME).
pub fn split_username(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

fn sa_user(namespace: &str, name: &str, sa_uid: &str) -> UserInfo {
    UserInfo {
        name: username(namespace, name),
        uid: sa_uid.to_string(),
        groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}")],
        ..Default::default()
    }
}

/// Issues and checks the server's service-account tokens.
pub struct ServiceAccountTokens {
    key: Arc<SigningKey>,
    issuer: String,
    api_audiences: Vec<String>,
    registry: Arc<Registry>,
}

impl ServiceAccountTokens {
    pub fn new(key: Arc<SigningKey>, issuer: String, api_audiences: Vec<String>, registry: Arc<Registry>) -> Self {
        ServiceAccountTokens { key, issuer, api_audiences, registry }
    }

    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// A bound token and its expiry (Unix seconds).
    pub fn issue(&self, c: &BoundClaims) -> (String, i64) {
        let now = jiff::Timestamp::now().as_second();
        let exp = now + c.expiration_seconds;
        let obj = |o: &BoundObject| json!({"name": o.name, "uid": o.uid});
        let mut k8s = json!({
            "namespace": c.namespace,
            "serviceaccount": obj(&c.service_account),
        });
        if let Some(p) = &c.pod {
            k8s["pod"] = obj(p);
        }
        if let Some(s) = &c.secret {
            k8s["secret"] = obj(s);
        }
        if let Some(n) = &c.node {
            k8s["node"] = obj(n);
        }
        let claims = json!({
            "aud": c.audiences,
            "exp": exp,
            "iat": now,
            "iss": self.issuer,
            "jti": krate_api::object::new_uid(),
            "kubernetes.io": k8s,
            "nbf": now,
            "sub": username(&c.namespace, &c.service_account.name),
        });
        (self.key.sign(&claims), exp)
    }

    /// A legacy token for the Secret `secret` of the ServiceAccount `sa`.
    pub fn issue_legacy(&self, namespace: &str, sa: &BoundObject, secret: &str) -> String {
        self.key.sign(&json!({
            "iss": LEGACY_ISSUER,
            "kubernetes.io/serviceaccount/namespace": namespace,
            "kubernetes.io/serviceaccount/secret.name": secret,
            "kubernetes.io/serviceaccount/service-account.name": sa.name,
            "kubernetes.io/serviceaccount/service-account.uid": sa.uid,
            "sub": username(namespace, &sa.name),
        }))
    }

    /// The live object `plural`/`name`, which must still exist (not deleted for over a
    /// minute) and, when the claim has one, carry the same uid.
    async fn still_there(
        &self,
        plural: &str,
        namespace: Option<&str>,
        claim: &BoundObject,
    ) -> Result<Value, AuthnError> {
        let kind = plural.trim_end_matches('s');
        let obj = lookup::core(&self.registry, plural, namespace, &claim.name)
            .await
            .map_err(lookup_failed)?
            .ok_or_else(|| invalid(format!("{kind} {:?} not found", claim.name)))?;
        if !claim.uid.is_empty() && uid(&obj) != claim.uid {
            return Err(invalid(format!("{kind} UID ({}) does not match claim ({})", uid(&obj), claim.uid)));
        }
        if deleted_before(&obj, DELETION_GRACE_SECONDS) {
            return Err(invalid(format!("{kind} {:?} has been deleted", claim.name)));
        }
        Ok(obj)
    }

    async fn bound(&self, claims: &Value, audiences: &[String]) -> Result<Authenticated, AuthnError> {
        let now = jiff::Timestamp::now().as_second();
        let num = |k: &str| claims.get(k).and_then(Value::as_i64);
        match num("exp") {
            Some(exp) if now <= exp + LEEWAY_SECONDS => {}
            Some(_) => return Err(invalid("service account token has expired")),
            None => return Err(invalid("service account token has no expiry")),
        }
        if num("nbf").is_some_and(|nbf| now + LEEWAY_SECONDS < nbf) {
            return Err(invalid("service account token is not valid yet"));
        }
        let token_auds: Vec<String> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.clone()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(String::from).collect(),
            _ => vec![],
        };
        let matched: Vec<String> = token_auds.iter().filter(|a| audiences.contains(a)).cloned().collect();
        if matched.is_empty() {
            return Err(invalid(format!(
                "token audiences {token_auds:?} is invalid for the target audiences {audiences:?}"
            )));
        }
        let k8s = claims.get("kubernetes.io").ok_or_else(|| invalid("token has no kubernetes.io claims"))?;
        let object = |k: &str| {
            k8s.get(k).filter(|v| v.is_object()).map(|v| BoundObject {
                name: v.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                uid: v.get("uid").and_then(Value::as_str).unwrap_or("").to_string(),
            })
        };
        let namespace = k8s.get("namespace").and_then(Value::as_str).unwrap_or("");
        let sa = object("serviceaccount").unwrap_or_default();
        if namespace.is_empty() || sa.name.is_empty() {
            return Err(invalid("token names no service account"));
        }
        if claims.get("sub").and_then(Value::as_str) != Some(username(namespace, &sa.name).as_str()) {
            return Err(invalid("token subject does not match its service account"));
        }
        let sa_obj = self.still_there("serviceaccounts", Some(namespace), &sa).await?;
        let mut user = sa_user(namespace, &sa.name, uid(&sa_obj));
        if let Some(pod) = object("pod") {
            self.still_there("pods", Some(namespace), &pod).await?;
            user.extra.insert("authentication.kubernetes.io/pod-name".into(), vec![pod.name]);
            user.extra.insert("authentication.kubernetes.io/pod-uid".into(), vec![pod.uid]);
        }
        if let Some(secret) = object("secret") {
            self.still_there("secrets", Some(namespace), &secret).await?;
        }
        if let Some(node) = object("node") {
            // A pod's node is recorded for information; only a token bound to the node
            // itself (no pod) ends with it.
            if object("pod").is_none() {
                self.still_there("nodes", None, &node).await?;
            }
            user.extra.insert("authentication.kubernetes.io/node-name".into(), vec![node.name]);
            if !node.uid.is_empty() {
                user.extra.insert("authentication.kubernetes.io/node-uid".into(), vec![node.uid]);
            }
        }
        if let Some(jti) = claims.get("jti").and_then(Value::as_str).filter(|j| !j.is_empty()) {
            user.extra.insert("authentication.kubernetes.io/credential-id".into(), vec![format!("JTI={jti}")]);
        }
        super::metrics::VALID_TOKENS.inc();
        Ok(Authenticated { user, audiences: matched })
    }

    async fn legacy(&self, token: &str, claims: &Value, audiences: &[String]) -> Result<Authenticated, AuthnError> {
        // Legacy tokens carry no audience: they are the API server's.
        let audiences = super::bearer::implicit_audiences(&self.api_audiences, audiences)?;
        let s = |k: &str| claims.get(format!("kubernetes.io/serviceaccount/{k}")).and_then(Value::as_str).unwrap_or("");
        let (namespace, secret_name, sa_name, sa_uid) =
            (s("namespace"), s("secret.name"), s("service-account.name"), s("service-account.uid"));
        if namespace.is_empty() || secret_name.is_empty() || sa_name.is_empty() {
            return Err(invalid("legacy token without namespace, secret or service account"));
        }
        let secret = lookup::core(&self.registry, "secrets", Some(namespace), secret_name)
            .await
            .map_err(lookup_failed)?
            .ok_or_else(|| invalid(format!("secret {namespace}/{secret_name} not found")))?;
        let stored = secret.pointer("/data/token").and_then(Value::as_str).unwrap_or("");
        let stored = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, stored).unwrap_or_default();
        if !lookup::same_secret(&stored, token.as_bytes()) {
            return Err(invalid(format!("token does not match the one in secret {namespace}/{secret_name}")));
        }
        if krate_api::object::meta_str(&secret, "deletionTimestamp").is_some() {
            return Err(invalid(format!("secret {namespace}/{secret_name} is being deleted")));
        }
        // The Secret must still be this account's (upstream checks its annotations too).
        let annotation =
            |k: &str| secret.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str);
        if annotation(SA_NAME_ANNOTATION) != Some(sa_name)
            || annotation(SA_UID_ANNOTATION).is_some_and(|u| !sa_uid.is_empty() && u != sa_uid)
        {
            return Err(invalid(format!("secret {namespace}/{secret_name} is not for service account {sa_name}")));
        }
        let labels = krate_api::object::labels(&secret);
        if labels.and_then(|l| l.get(INVALID_SINCE_LABEL)).is_some() {
            return Err(invalid(format!("secret {namespace}/{secret_name} has been invalidated")));
        }
        let sa = BoundObject { name: sa_name.into(), uid: sa_uid.into() };
        let sa_obj = self.still_there("serviceaccounts", Some(namespace), &sa).await?;
        self.mark_used(namespace, secret_name, labels.and_then(|l| l.get(LAST_USED_LABEL)).and_then(Value::as_str));
        let user = sa_user(namespace, sa_name, uid(&sa_obj));
        super::metrics::LEGACY_TOKENS.inc();
        Ok(Authenticated { user, audiences })
    }

    /// Records today's date in the Secret's last-used label, at most once a day.
    fn mark_used(&self, namespace: &str, secret: &str, current: Option<&str>) {
        let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
        if current == Some(today.as_str()) {
            return;
        }
        let (registry, namespace, secret) = (self.registry.clone(), namespace.to_string(), secret.to_string());
        tokio::spawn(async move {
            let patch = json!({"metadata": {"labels": {LAST_USED_LABEL: today}}});
            if let Err(e) = super::legacy_tokens::patch_secret(&registry, &namespace, &secret, patch).await {
                tracing::debug!(namespace, secret, error = %e, "recording a legacy token's use failed");
            }
        });
    }
}

fn lookup_failed(e: ApiError) -> AuthnError {
    invalid(format!("looking up the token's objects failed: {}", e.message))
}

#[async_trait]
impl TokenAuthenticator for ServiceAccountTokens {
    async fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<Option<Authenticated>, AuthnError> {
        // Only tokens of our issuers are ours; others may be another authenticator's.
        let Some(peeked) = peek_claims(token) else { return Ok(None) };
        let issuer = peeked.get("iss").and_then(Value::as_str).unwrap_or("");
        let legacy = issuer == LEGACY_ISSUER;
        if !legacy && issuer != self.issuer {
            return Ok(None);
        }
        let claims = self.key.verify(token).map_err(|e| invalid(format!("service account token: {e}")))?;
        let found =
            if legacy { self.legacy(token, &claims, audiences).await? } else { self.bound(&claims, audiences).await? };
        Ok(Some(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_split_into_namespace_and_name() {
        assert_eq!(split_username("system:serviceaccount:ns:sa"), Some(("ns", "sa")));
        assert_eq!(split_username("system:serviceaccount:ns"), None);
        assert_eq!(split_username("system:serviceaccount::sa"), None);
        assert_eq!(split_username("jane"), None);
    }
}
