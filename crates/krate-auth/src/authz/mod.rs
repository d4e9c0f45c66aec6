//! Authorization: may this user do this? Authorizers answer Allow, Deny or NoOpinion;
//! a union asks them in turn and the first Allow or Deny wins, as upstream's
//! `--authorization-mode` chain. A request nobody allows is refused (403).

pub mod aggregation;
pub mod bootstrap;
pub mod escalation;
pub mod informer;
pub mod metrics;
pub mod modes;
pub mod node;
pub mod rbac;
pub mod review;

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::user::UserInfo;

use self::rbac::rule::PolicyRule;

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
    /// A list's, watch's or deletecollection's raw fieldSelector ("" when none): the
    /// Node authorizer lets a node list only its own pods and ResourceSlices by it.
    pub field_selector: &'a str,
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

    /// The decision with the reason an Allow came with too (e.g. "RBAC: allowed by
    /// ClusterRoleBinding …"), for audit and access reviews.
    async fn authorize_explained(&self, attrs: &Attributes<'_>) -> (Decision, String) {
        let d = self.authorize(attrs).await;
        let reason = match &d {
            Decision::Allow => String::new(),
            Decision::Deny(r) | Decision::NoOpinion(r) => r.clone(),
        };
        (d, reason)
    }
}

/// What a user may do in a namespace, as far as an authorizer can list it (upstream's
/// RuleResolver, behind SelfSubjectRulesReview).
#[derive(Clone, Debug, Default)]
pub struct Rules {
    pub resource: Vec<PolicyRule>,
    pub non_resource: Vec<PolicyRule>,
    /// Some permissions could not be listed (the Node authorizer's graph, errors).
    pub incomplete: bool,
    pub errors: Vec<String>,
}

pub trait RuleResolver: Send + Sync {
    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules;
}

/// Upstream's privileged-group authorizer: system:masters may do anything, asked before
/// every configured mode.
pub struct Privileged;

#[async_trait]
impl Authorizer for Privileged {
    async fn authorize(&self, a: &Attributes<'_>) -> Decision {
        if a.user.in_group("system:masters") { Decision::Allow } else { Decision::NoOpinion(String::new()) }
    }
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

    async fn authorize_explained(&self, attrs: &Attributes<'_>) -> (Decision, String) {
        let mut reasons = Vec::new();
        for a in &self.0 {
            match a.authorize_explained(attrs).await {
                (Decision::NoOpinion(r), _) => {
                    if !r.is_empty() {
                        reasons.push(r)
                    }
                }
                decided => return decided,
            }
        }
        let reason = reasons.join(", ");
        (Decision::NoOpinion(reason.clone()), reason)
    }
}

/// `--authorization-mode=AlwaysDeny`, for tests.
pub struct AlwaysDeny;

#[async_trait]
impl Authorizer for AlwaysDeny {
    async fn authorize(&self, _: &Attributes<'_>) -> Decision {
        Decision::Deny(String::new())
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

impl RuleResolver for AlwaysAllow {
    fn rules_for(&self, _: &UserInfo, _: &str) -> Rules {
        Rules {
            resource: vec![PolicyRule::resource(&["*"], &["*"], &["*"])],
            non_resource: vec![PolicyRule::urls(&["*"], &["*"])],
            ..Default::default()
        }
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
