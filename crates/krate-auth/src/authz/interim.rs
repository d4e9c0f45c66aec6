//! The rules that hold until RBAC serves: system:masters may do anything, everyone may
//! read health and version (upstream's system:public-info-viewer), authenticated users
//! may read discovery and OpenAPI (system:discovery), everyone may read the
//! service-account issuer's OIDC discovery documents (system:service-account-issuer-
//! discovery, which upstream binds to service accounts and clusters often open to
//! all), authenticated users may ask who they are (SelfSubjectReview, as upstream's
//! system:basic-user). Everything else: no opinion.

use async_trait::async_trait;

use super::{Attributes, Authorizer, Decision};

pub struct Interim;

fn is_public_path(path: &str) -> bool {
    let p = path.trim_end_matches('/');
    ["/healthz", "/livez", "/readyz", "/version"].iter().any(|pub_| p == *pub_ || p.starts_with(&format!("{pub_}/")))
}

fn is_discovery_path(path: &str) -> bool {
    let p = path.trim_end_matches('/');
    p == "/api" || p == "/apis" || p.starts_with("/api/") || p.starts_with("/apis/") || p.starts_with("/openapi")
}

#[async_trait]
impl Authorizer for Interim {
    async fn authorize(&self, a: &Attributes<'_>) -> Decision {
        if a.user.in_group("system:masters") {
            return Decision::Allow;
        }
        // system:basic-user: authenticated users may ask who they are.
        if a.resource_request
            && a.verb == "create"
            && a.api_group == "authentication.k8s.io"
            && a.resource == "selfsubjectreviews"
            && !a.user.is_anonymous()
        {
            return Decision::Allow;
        }
        let readable = is_public_path(a.path)
            || crate::authn::oidc::Discovery::is_discovery_path(a.path)
            || (!a.user.is_anonymous() && is_discovery_path(a.path));
        if !a.resource_request && a.verb == "get" && readable {
            return Decision::Allow;
        }
        Decision::NoOpinion(String::new())
    }
}
