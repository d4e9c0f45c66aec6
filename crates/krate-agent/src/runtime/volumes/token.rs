//! Service-account tokens for projected volumes, as upstream's token manager: asked
//! for through the TokenRequest API as the node (`serviceaccounts/token`, bound to the
//! pod by name and uid), cached per pod, account, audience and lifetime, and asked for
//! again once 80% of the lifetime has passed (or after 24 hours).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;

/// Upstream's default expirationSeconds of a serviceAccountToken projection.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// A token older than this is refreshed whatever its lifetime.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    account: String,
    audience: String,
    expiration_seconds: i64,
    pod_uid: String,
}

#[derive(Clone, Debug)]
struct Cached {
    token: String,
    issued: SystemTime,
    expires: SystemTime,
}

/// Whether a token issued at `issued`, expiring at `expires`, is due for refresh at
/// `now`: past 80% of its life, or older than 24 hours.
pub fn needs_refresh(issued: SystemTime, expires: SystemTime, now: SystemTime) -> bool {
    let life = expires.duration_since(issued).unwrap_or_default();
    let age = now.duration_since(issued).unwrap_or_default();
    age >= life.mul_f64(0.8) || age >= MAX_TTL
}

pub struct TokenManager {
    client: kube::Client,
    cache: Mutex<HashMap<Key, Cached>>,
}

impl TokenManager {
    pub fn new(client: kube::Client) -> TokenManager {
        TokenManager { client, cache: Mutex::new(HashMap::new()) }
    }

    /// A token of the pod's service account for `audience` (the API server's own
    /// audiences when None), valid for about `expiration_seconds`.
    pub async fn token(&self, pod: &Pod, audience: Option<&str>, expiration_seconds: i64) -> Result<String, String> {
        let m = &pod.metadata;
        let key = Key {
            namespace: m.namespace.clone().unwrap_or_default(),
            account: pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into()),
            audience: audience.unwrap_or_default().to_string(),
            expiration_seconds,
            pod_uid: m.uid.clone().unwrap_or_default(),
        };
        if let Some(cached) = self.cache.lock().get(&key).cloned()
            && !needs_refresh(cached.issued, cached.expires, SystemTime::now())
        {
            return Ok(cached.token);
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(audience.filter(|a| !a.is_empty()).map(|a| vec![a.to_string()]).unwrap_or_default()),
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: m.name.clone(),
                    uid: m.uid.clone(),
                }),
            }),
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &key.namespace);
        let reply = api.create_token_request(&key.account, &PostParams::default(), &request).await.map_err(|e| {
            let message = match e {
                kube::Error::Api(s) => s.message,
                other => other.to_string(),
            };
            format!("failed to fetch token: {message}")
        })?;
        let status = reply.status.ok_or("failed to fetch token: the reply has no status")?;
        let token = status.token.ok_or("failed to fetch token: the reply has no token")?;
        let now = SystemTime::now();
        let lifetime = reply.spec.and_then(|s| s.expiration_seconds).unwrap_or(expiration_seconds).max(0) as u64;
        let expires = status
            .expiration_timestamp
            .map(|t| SystemTime::from(t.0))
            .unwrap_or_else(|| now + Duration::from_secs(lifetime));
        let issued = expires.checked_sub(Duration::from_secs(lifetime)).filter(|t| *t <= now).unwrap_or(now);
        tracing::debug!(pod = m.name, account = key.account, ?expires, "service account token issued");
        self.cache.lock().insert(key, Cached { token: token.clone(), issued, expires });
        Ok(token)
    }

    /// Drops the tokens of a pod that is gone.
    pub fn forget_pod(&self, uid: &str) {
        self.cache.lock().retain(|k, _| k.pod_uid != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_at_eighty_percent_of_life_or_a_day() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        let exp = t0 + hour;
        assert!(!needs_refresh(t0, exp, t0));
        assert!(!needs_refresh(t0, exp, t0 + Duration::from_secs(2879)));
        assert!(needs_refresh(t0, exp, t0 + Duration::from_secs(2880)));
        assert!(needs_refresh(t0, exp, exp + hour));
        let long = t0 + Duration::from_secs(365 * 24 * 3600);
        assert!(!needs_refresh(t0, long, t0 + Duration::from_secs(23 * 3600)));
        assert!(needs_refresh(t0, long, t0 + Duration::from_secs(24 * 3600)));
    }
}
