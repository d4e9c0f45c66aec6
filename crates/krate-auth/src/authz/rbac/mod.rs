//! The RBAC authorizer: Roles, ClusterRoles and their bindings, held in memory (fed by
//! the registry's watches), asked as upstream's RBACAuthorizer asks them — cluster role
//! bindings first, then the role bindings of the request's namespace; the first rule
//! that allows wins; otherwise no opinion, with the resolution errors as the reason.

pub mod rule;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use krate_api::Registry;
use krate_api::user::UserInfo;
use serde_json::Value;

use self::rule::PolicyRule;
use super::informer::Informer;
use super::{Attributes, Authorizer, Decision, RuleResolver, Rules};

pub const GROUP: &str = "rbac.authorization.k8s.io";

/// A Role or ClusterRole, as decisions and aggregation need it.
pub struct RoleInfo {
    pub rules: Vec<PolicyRule>,
    pub labels: serde_json::Map<String, Value>,
    /// aggregationRule.clusterRoleSelectors, when present.
    pub aggregation: Option<Vec<Value>>,
}

impl RoleInfo {
    pub fn parse(obj: &Value) -> Self {
        RoleInfo {
            rules: PolicyRule::list_from(obj),
            labels: krate_api::object::labels(obj).cloned().unwrap_or_default(),
            aggregation: obj
                .get("aggregationRule")
                .map(|a| a.get("clusterRoleSelectors").and_then(Value::as_array).cloned().unwrap_or_default()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

/// A RoleBinding or ClusterRoleBinding.
pub struct BindingInfo {
    pub name: String,
    pub namespace: String,
    pub role_kind: String,
    pub role_name: String,
    pub subjects: Vec<Subject>,
}

impl BindingInfo {
    pub fn parse(obj: &Value) -> Self {
        let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let role_ref = obj.get("roleRef").cloned().unwrap_or(Value::Null);
        BindingInfo {
            name: krate_api::object::name(obj).to_string(),
            namespace: krate_api::object::meta_str(obj, "namespace").unwrap_or("").to_string(),
            role_kind: s(&role_ref, "kind"),
            role_name: s(&role_ref, "name"),
            subjects: obj
                .get("subjects")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| Subject { kind: s(v, "kind"), name: s(v, "name"), namespace: s(v, "namespace") })
                .collect(),
        }
    }

    /// The subject of this binding that names `user`, if any.
    fn subject_for(&self, user: &UserInfo) -> Option<&Subject> {
        self.subjects.iter().find(|s| match s.kind.as_str() {
            "User" => s.name == user.name,
            "Group" => user.in_group(&s.name),
            "ServiceAccount" => {
                !s.namespace.is_empty() && user.name == format!("system:serviceaccount:{}:{}", s.namespace, s.name)
            }
            _ => false,
        })
    }

    /// Upstream's description of a binding in an allow reason.
    fn describe(&self, subject: &Subject) -> String {
        let who = match subject.kind.as_str() {
            "ServiceAccount" => {
                let ns = if subject.namespace.is_empty() { &self.namespace } else { &subject.namespace };
                format!("{} \"{}/{}\"", subject.kind, subject.name, ns)
            }
            _ => format!("{} \"{}\"", subject.kind, subject.name),
        };
        if self.namespace.is_empty() {
            format!("ClusterRoleBinding \"{}\" of {} \"{}\" to {who}", self.name, self.role_kind, self.role_name)
        } else {
            format!(
                "RoleBinding \"{}/{}\" of {} \"{}\" to {who}",
                self.name, self.namespace, self.role_kind, self.role_name
            )
        }
    }
}

/// What a user may do in a namespace: every rule granted to them, and why some could not
/// be resolved (a binding to a missing role).
#[derive(Default)]
pub struct Resolved {
    pub rules: Vec<PolicyRule>,
    pub errors: Vec<String>,
}

pub struct Rbac {
    pub roles: Arc<Informer<RoleInfo>>,
    pub cluster_roles: Arc<Informer<RoleInfo>>,
    pub role_bindings: Arc<Informer<BindingInfo>>,
    pub cluster_role_bindings: Arc<Informer<BindingInfo>>,
}

impl Rbac {
    /// Starts following the four RBAC resources in `registry`.
    pub fn start(registry: &Arc<Registry>) -> Arc<Self> {
        Arc::new(Rbac {
            roles: Informer::start(registry, GROUP, "v1", "roles", RoleInfo::parse),
            cluster_roles: Informer::start(registry, GROUP, "v1", "clusterroles", RoleInfo::parse),
            role_bindings: Informer::start(registry, GROUP, "v1", "rolebindings", BindingInfo::parse),
            cluster_role_bindings: Informer::start(registry, GROUP, "v1", "clusterrolebindings", BindingInfo::parse),
        })
    }

    /// Waits until all four copies hold their first listing.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        self.roles.wait_synced(timeout).await
            && self.cluster_roles.wait_synced(timeout).await
            && self.role_bindings.wait_synced(timeout).await
            && self.cluster_role_bindings.wait_synced(timeout).await
    }

    /// The bindings that apply in `namespace` ("": cluster-wide only), cluster first.
    fn bindings(&self, namespace: &str) -> Vec<Arc<BindingInfo>> {
        let mut out: Vec<Arc<BindingInfo>> = self.cluster_role_bindings.all().into_iter().map(|(_, b)| b).collect();
        if !namespace.is_empty() {
            out.extend(self.role_bindings.in_namespace(namespace));
        }
        out
    }

    /// The rules a binding's role grants, or why it cannot be found.
    pub fn role_rules(&self, kind: &str, name: &str, namespace: &str) -> Result<Arc<RoleInfo>, String> {
        match kind {
            "ClusterRole" => self
                .cluster_roles
                .get("", name)
                .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io \"{name}\" not found")),
            "Role" => self
                .roles
                .get(namespace, name)
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io \"{name}\" not found")),
            other => Err(format!("unsupported role reference kind: \"{other}\"")),
        }
    }

    /// Every rule `user` holds in `namespace` (upstream's RulesFor).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Resolved {
        let mut out = Resolved::default();
        for b in self.bindings(namespace) {
            if b.subject_for(user).is_none() {
                continue;
            }
            match self.role_rules(&b.role_kind, &b.role_name, &b.namespace) {
                Ok(role) => out.rules.extend(role.rules.iter().cloned()),
                Err(e) => out.errors.push(e),
            }
        }
        out
    }

    /// The decision and its reason: "RBAC: allowed by …" or the resolution errors.
    pub fn decide(&self, a: &Attributes<'_>) -> (Decision, String) {
        let mut errors = Vec::new();
        for b in self.bindings(a.namespace) {
            let Some(subject) = b.subject_for(a.user) else { continue };
            match self.role_rules(&b.role_kind, &b.role_name, &b.namespace) {
                Ok(role) => {
                    if role.rules.iter().any(|r| r.allows(a)) {
                        return (Decision::Allow, format!("RBAC: allowed by {}", b.describe(subject)));
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        let reason = match errors.len() {
            0 => String::new(),
            1 => format!("RBAC: {}", errors[0]),
            _ => format!("RBAC: [{}]", errors.join(", ")),
        };
        (Decision::NoOpinion(reason.clone()), reason)
    }
}

#[async_trait]
impl Authorizer for Rbac {
    async fn authorize(&self, a: &Attributes<'_>) -> Decision {
        self.decide(a).0
    }
    async fn authorize_explained(&self, a: &Attributes<'_>) -> (Decision, String) {
        self.decide(a)
    }
}

impl RuleResolver for Rbac {
    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        let resolved = Rbac::rules_for(self, user, namespace);
        let (non_resource, resource) = resolved.rules.into_iter().partition(|r| !r.non_resource_urls.is_empty());
        Rules { resource, non_resource, incomplete: !resolved.errors.is_empty(), errors: resolved.errors }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn subjects_name_users_groups_and_service_accounts() {
        let b = BindingInfo::parse(&json!({
            "metadata": {"name": "b", "namespace": "ns"},
            "roleRef": {"kind": "Role", "name": "r", "apiGroup": GROUP},
            "subjects": [
                {"kind": "User", "name": "jane"},
                {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"},
            ],
        }));
        let user = |name: &str, groups: &[&str]| UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        };
        assert!(b.subject_for(&user("jane", &[])).is_some());
        assert!(b.subject_for(&user("bob", &["devs"])).is_some());
        assert!(b.subject_for(&user("system:serviceaccount:ns:sa", &[])).is_some());
        assert!(b.subject_for(&user("system:serviceaccount:other:sa", &[])).is_none());
        assert!(b.subject_for(&user("bob", &["ops"])).is_none());
        let sa = &b.subjects[2];
        assert_eq!(b.describe(sa), "RoleBinding \"b/ns\" of Role \"r\" to ServiceAccount \"sa/ns\"");
    }
}
