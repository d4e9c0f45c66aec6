//! Who calls the agent's HTTPS API and whether they may, as upstream's kubelet decides
//! (its webhook authentication and authorization modes, which kubeadm and k3s use):
//! a client certificate (verified against the cluster CA in the TLS handshake) names
//! the user by CN and groups by O; a bearer token is asked of the API server with a
//! TokenReview; the request is then put to the API server as a SubjectAccessReview on
//! nodes/<subresource> of this node. Answers are cached as upstream (tokens 2 min,
//! allowed 5 min, denied 30 s).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use x509_parser::prelude::{FromDer, X509Certificate};

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
const CACHE_LIMIT: usize = 10_000;

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The user a verified client certificate names (CN, O as groups).
pub fn user_of_certificate(der: &[u8]) -> Option<User> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let mut groups: Vec<String> =
        subject.iter_organization().filter_map(|o| o.as_str().ok().map(String::from)).collect();
    groups.push("system:authenticated".into());
    Some(User { name, groups, ..Default::default() })
}

/// nodes/<subresource>s a request path is checked against, in order (the first
/// allowed wins): upstream's kubelet mapping with fine-grained authorization.
pub fn subresources(path: &str) -> &'static [&'static str] {
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    if under("/stats") {
        &["stats"]
    } else if under("/metrics") {
        &["metrics"]
    } else if under("/logs") {
        &["log"]
    } else if under("/checkpoint") {
        &["checkpoint"]
    } else if under("/pods") {
        &["pods", "proxy"]
    } else if under("/healthz") {
        &["healthz", "proxy"]
    } else if under("/configz") {
        &["configz", "proxy"]
    } else {
        &["proxy"]
    }
}

/// The API verb of an HTTP method, as the kubelet maps it.
pub fn verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "get",
    }
}

#[derive(Debug, PartialEq)]
pub enum Decision {
    Allow,
    /// The kubelet's message: Forbidden (user=…, verb=…, resource=…, subresource=…).
    Deny(String),
}

type Expiring<T> = parking_lot::Mutex<HashMap<String, (T, Instant)>>;

pub struct Auth {
    client: kube::Client,
    node: String,
    tokens: Expiring<Option<User>>,
    decisions: Expiring<bool>,
}

fn cached<T: Clone>(cache: &Expiring<T>, key: &str) -> Option<T> {
    let map = cache.lock();
    map.get(key).filter(|(_, until)| Instant::now() < *until).map(|(v, _)| v.clone())
}

fn remember<T>(cache: &Expiring<T>, key: String, value: T, ttl: Duration) {
    let mut map = cache.lock();
    if map.len() >= CACHE_LIMIT {
        let now = Instant::now();
        map.retain(|_, (_, until)| *until > now);
        if map.len() >= CACHE_LIMIT {
            map.clear();
        }
    }
    map.insert(key, (value, Instant::now() + ttl));
}

impl Auth {
    pub fn new(client: kube::Client, node: &str) -> Auth {
        Auth { client, node: node.into(), tokens: Default::default(), decisions: Default::default() }
    }

    /// The caller, or None (401): a verified certificate, else a bearer token.
    pub async fn authenticate(&self, leaf_cert: Option<&[u8]>, headers: &http::HeaderMap) -> Option<User> {
        if let Some(der) = leaf_cert {
            return user_of_certificate(der);
        }
        let token = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())?;
        if let Some(user) = cached(&self.tokens, token) {
            return user;
        }
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let review =
            TokenReview { spec: TokenReviewSpec { token: token.into(), ..Default::default() }, ..Default::default() };
        let user = match reviews.create(&PostParams::default(), &review).await {
            Ok(r) => r.status.filter(|s| s.authenticated == Some(true)).and_then(|s| s.user).map(|u| User {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default().into_iter().collect(),
            }),
            Err(error) => {
                // Not cached: the API server may be back next time.
                tracing::warn!(%error, "TokenReview failed");
                return None;
            }
        };
        remember(&self.tokens, token.into(), user.clone(), TOKEN_TTL);
        user
    }

    /// Whether `user` may `method` `path` on this node.
    pub async fn authorize(&self, user: &User, method: &http::Method, path: &str) -> Decision {
        let verb = verb(method);
        let subs = subresources(path);
        for sub in subs {
            if self.allowed(user, verb, sub).await {
                return Decision::Allow;
            }
        }
        Decision::Deny(format!(
            "Forbidden (user={}, verb={verb}, resource=nodes, subresource={})",
            user.name,
            subs.last().copied().unwrap_or("proxy")
        ))
    }

    async fn allowed(&self, user: &User, verb: &str, sub: &str) -> bool {
        let key = format!("{user:?}|{verb}|{sub}");
        if let Some(allowed) = cached(&self.decisions, &key) {
            return allowed;
        }
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone().into_iter().collect()).filter(|e: &BTreeMap<_, _>| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(sub.into()),
                    name: Some(self.node.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(r) => {
                let allowed = r.status.is_some_and(|s| s.allowed);
                remember(&self.decisions, key, allowed, if allowed { ALLOWED_TTL } else { DENIED_TTL });
                allowed
            }
            Err(error) => {
                tracing::warn!(%error, "SubjectAccessReview failed");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        assert_eq!(subresources("/stats/summary"), ["stats"]);
        assert_eq!(subresources("/metrics"), ["metrics"]);
        assert_eq!(subresources("/metrics/resource"), ["metrics"]);
        assert_eq!(subresources("/logs/syslog"), ["log"]);
        assert_eq!(subresources("/pods"), ["pods", "proxy"]);
        assert_eq!(subresources("/healthz"), ["healthz", "proxy"]);
        assert_eq!(subresources("/podsX"), ["proxy"]);
        assert_eq!(subresources("/exec/ns/p/c"), ["proxy"]);
        assert_eq!(verb(&http::Method::POST), "create");
        assert_eq!(verb(&http::Method::HEAD), "get");
    }

    #[test]
    fn certificates_name_users_and_groups() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::OrganizationName, "system:masters");
        p.distinguished_name.push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        let der = p.self_signed(&key).unwrap().der().to_vec();
        let u = user_of_certificate(&der).unwrap();
        assert_eq!(u.name, "kube-apiserver-kubelet-client");
        assert_eq!(u.groups, ["system:masters", "system:authenticated"]);
    }
}
