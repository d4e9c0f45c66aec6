//! Authorization: may this user do this? Authorizers answer Allow, Deny or NoOpinion;
//! a union asks them in turn and the first Allow or Deny wins, as upstream's
//! `--authorization-mode` chain. A request nobody allows is refused (403).

mod interim;

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::user::UserInfo;

pub use interim::Interim;

/// What a request asks to do, as authorizers see it (upstream's authorizer.Attributes).
#[derive(Clone, Debug)]
pub struct Attributes<'a> {
    pub user: &'a UserInfo,
    /// get, list, watch, create, update, patch, delete, deletecollection; for
    /// non-resource requests the lowercased HTTP method's verb (get, post, put…).
    pub verb: &'a str,
    pub resource_request: bool,
    /// The request path (what non-resource rules match).
    pub path: &'a str,
    pub namespace: &'a str,
    pub api_group: &'a str,
    pub api_version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Refused outright: later authorizers are not asked.
    Deny(String),
    /// Neither: the next authorizer decides. The reason joins the 403's message.
    NoOpinion(String),
}

#[async_trait]
pub trait Authorizer: Send + Sync {
    async fn authorize(&self, attrs: &Attributes<'_>) -> Decision;
}

/// Asks authorizers in order; the first Allow or Deny wins.
pub struct Union(pub Vec<Arc<dyn Authorizer>>);

#[async_trait]
impl Authorizer for Union {
    async fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        let mut reasons = Vec::new();
        for a in &self.0 {
            match a.authorize(attrs).await {
                Decision::NoOpinion(r) => {
                    if !r.is_empty() {
                        reasons.push(r)
                    }
                }
                decided => return decided,
            }
        }
        Decision::NoOpinion(reasons.join(", "))
    }
}

/// `--authorization-mode=AlwaysAllow`, for development.
pub struct AlwaysAllow;

#[async_trait]
impl Authorizer for AlwaysAllow {
    async fn authorize(&self, _: &Attributes<'_>) -> Decision {
        Decision::Allow
    }
}

/// Upstream's 403 message for a refused request, e.g.
/// `pods "web" is forbidden: User "jane" cannot get resource "pods" in API group "" in
/// the namespace "default"`, with the authorizers' reason appended when there is one.
pub fn forbidden_message(attrs: &Attributes<'_>, reason: &str) -> String {
    let user = &attrs.user.name;
    let mut msg = if !attrs.resource_request {
        format!("forbidden: User \"{user}\" cannot {} path \"{}\"", attrs.verb, attrs.path)
    } else {
        let resource = match attrs.subresource {
            "" => attrs.resource.to_string(),
            s => format!("{}/{s}", attrs.resource),
        };
        let qualified = match attrs.api_group {
            "" => attrs.resource.to_string(),
            g => format!("{}.{g}", attrs.resource),
        };
        let subject = match attrs.name {
            "" => format!("{qualified} is forbidden"),
            n => format!("{qualified} \"{n}\" is forbidden"),
        };
        let scope = match attrs.namespace {
            "" => " at the cluster scope".to_string(),
            ns => format!(" in the namespace \"{ns}\""),
        };
        format!(
            "{subject}: User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\"{scope}",
            attrs.verb, attrs.api_group
        )
    };
    if !reason.is_empty() {
        msg.push_str(": ");
        msg.push_str(reason);
    }
    msg
}
