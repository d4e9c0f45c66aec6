//! Privilege-escalation prevention for RBAC objects, as upstream's RBAC registry: a
//! user may only create or change a Role or ClusterRole granting rules they hold
//! themselves (or with `escalate` on it), and only bind a role whose rules they hold
//! (or with `bind` on it). Runs as a validating admission plugin so every write road
//! (create, update, patch, apply) passes it.

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::admission::{Admission, Attributes as AdmissionAttributes, Operation};
use krate_api::user::UserInfo;
use krate_api::{ApiError, ApiResult, Target};
use serde_json::Value;

use super::rbac::rule::{PolicyRule, compact, covers};
use super::rbac::{BindingInfo, GROUP, Rbac};
use super::{Attributes, Authorizer, Decision};

pub struct EscalationCheck {
    rbac: Arc<Rbac>,
    authorizer: Arc<dyn Authorizer>,
}

impl EscalationCheck {
    pub fn new(rbac: Arc<Rbac>, authorizer: Arc<dyn Authorizer>) -> Self {
        EscalationCheck { rbac, authorizer }
    }

    /// Whether the authorizers allow `verb` on an RBAC object (escalate, bind).
    async fn allowed(&self, user: &UserInfo, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
        let attrs = Attributes {
            user,
            verb,
            resource_request: true,
            path: "",
            namespace,
            api_group: GROUP,
            api_version: "*",
            resource,
            subresource: "",
            name,
            field_selector: "",
        };
        self.authorizer.authorize(&attrs).await == Decision::Allow
    }

    /// Upstream's ConfirmNoEscalation: the user's own rules in `namespace` must cover `rules`.
    fn confirm_no_escalation(&self, user: &UserInfo, namespace: &str, rules: &[PolicyRule]) -> Result<(), String> {
        let owner = self.rbac.rules_for(user, namespace);
        let (ok, missing) = covers(&owner.rules, rules);
        if ok {
            return Ok(());
        }
        let mut lines: Vec<String> = compact(missing).iter().map(PolicyRule::compact_string).collect();
        lines.sort();
        lines.dedup();
        let groups = user.groups.iter().map(|g| format!("{g:?}")).collect::<Vec<_>>().join(" ");
        let mut msg = format!(
            "user {:?} (groups=[{groups}]) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            lines.join("\n")
        );
        if !owner.errors.is_empty() {
            msg.push_str(&format!("; resolution errors: [{}]", owner.errors.join(", ")));
        }
        Err(msg)
    }
}

/// Upstream's EscalationAllowed: system:masters may grant anything.
fn escalation_allowed(user: &UserInfo) -> bool {
    user.in_group("system:masters")
}

fn resource_for_kind(kind: &str) -> &str {
    match kind {
        "Role" => "roles",
        "ClusterRole" => "clusterroles",
        other => other,
    }
}

/// Everything: what using an aggregationRule requires.
fn full_authority() -> Vec<PolicyRule> {
    vec![PolicyRule::resource(&["*"], &["*"], &["*"]), PolicyRule::urls(&["*"], &["*"])]
}

#[async_trait]
impl Admission for EscalationCheck {
    async fn validate(
        &self,
        attrs: &AdmissionAttributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let r = attrs.resource;
        if r.group != GROUP || !matches!(attrs.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let Some(obj) = obj else { return Ok(()) };
        if attrs.subresource.is_some() || escalation_allowed(attrs.user) {
            return Ok(());
        }
        let name = krate_api::object::name(obj);
        let namespace = attrs.namespace.unwrap_or("");
        let target = Target::new(&r.group, &r.plural, &r.kind, name);
        match r.plural.as_str() {
            "roles" | "clusterroles" => {
                let rules = PolicyRule::list_from(obj);
                if let Some(old) = old
                    && PolicyRule::list_from(old) == rules
                    && old.get("aggregationRule") == obj.get("aggregationRule")
                {
                    return Ok(());
                }
                if self.allowed(attrs.user, "escalate", &r.plural, namespace, name).await {
                    return Ok(());
                }
                self.confirm_no_escalation(attrs.user, namespace, &rules)
                    .map_err(|m| ApiError::forbidden_on(&target, &m))?;
                if obj.get("aggregationRule").is_some_and(|a| !a.is_null())
                    && self.confirm_no_escalation(attrs.user, namespace, &full_authority()).is_err()
                {
                    return Err(ApiError::forbidden_on(
                        &target,
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
                Ok(())
            }
            "rolebindings" | "clusterrolebindings" => {
                let b = BindingInfo::parse(obj);
                if self.allowed(attrs.user, "bind", resource_for_kind(&b.role_kind), namespace, &b.role_name).await {
                    return Ok(());
                }
                let rules = self
                    .rbac
                    .role_rules(&b.role_kind, &b.role_name, namespace)
                    .map_err(|e| ApiError::forbidden_on(&target, &e))?;
                self.confirm_no_escalation(attrs.user, namespace, &rules.rules)
                    .map_err(|m| ApiError::forbidden_on(&target, &m))
            }
            _ => Ok(()),
        }
    }
}
