//! ClusterRole aggregation, as upstream's clusterrole-aggregation controller: a
//! ClusterRole with an aggregationRule gets, as its rules, the union of the rules of
//! every other ClusterRole its selectors match. Runs in the server, following the
//! ClusterRole copy of the RBAC authorizer, and writes through the registry.

use std::sync::Arc;

use krate_api::admission::Admission;
use krate_api::registry::{Context, Scope};
use krate_api::selector::LabelSelector;
use krate_api::{Registry, object};
use serde_json::Value;

use super::bootstrap::apiserver_user;
use super::rbac::rule::PolicyRule;
use super::rbac::{GROUP, Rbac, RoleInfo};

/// The rules `name` should have under `selectors`, from the other cluster roles (sorted
/// by name, each rule once).
pub fn aggregated_rules(name: &str, selectors: &[Value], roles: &[(String, Arc<RoleInfo>)]) -> Vec<PolicyRule> {
    let mut sorted: Vec<&(String, Arc<RoleInfo>)> = roles.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for sel in selectors {
        let selector = LabelSelector::from_json(sel);
        // An empty selector matches nothing here, as upstream's aggregation treats it.
        if selector.is_empty() {
            continue;
        }
        for (other, role) in &sorted {
            if other == name || !selector.matches(Some(&role.labels)) {
                continue;
            }
            for rule in &role.rules {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    rules
}

/// Whether every aggregated ClusterRole in `rbac`'s copy holds its union already.
pub fn settled(rbac: &Rbac) -> bool {
    let roles: Vec<(String, Arc<RoleInfo>)> = rbac.cluster_roles.all().into_iter().map(|((_, n), r)| (n, r)).collect();
    roles.iter().all(|(name, role)| match &role.aggregation {
        Some(selectors) => aggregated_rules(name, selectors, &roles) == role.rules,
        None => true,
    })
}

/// Waits (at most `timeout`) until aggregation has settled: start-up waits for it so
/// admin, edit and view hold their rules once the server is ready.
pub async fn wait_settled(rbac: &Rbac, timeout: std::time::Duration) -> bool {
    let poll = async {
        while !settled(rbac) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(timeout, poll).await.is_ok()
}

/// Brings every aggregated ClusterRole up to date once.
async fn sync(registry: &Arc<Registry>, rbac: &Rbac, admission: &dyn Admission) {
    let Some(resource) = registry.table.lookup(GROUP, "v1", "clusterroles") else { return };
    let scope = Scope { resource, namespace: None };
    let roles: Vec<(String, Arc<RoleInfo>)> = rbac.cluster_roles.all().into_iter().map(|((_, n), r)| (n, r)).collect();
    let user = apiserver_user();
    let ctx = Context::internal(&user, admission);
    for (name, role) in &roles {
        let Some(selectors) = &role.aggregation else { continue };
        let want = aggregated_rules(name, selectors, &roles);
        if want == role.rules {
            continue;
        }
        let result = async {
            let mut obj = registry.get(&scope, name).await?;
            obj["rules"] = Value::Array(want.iter().map(PolicyRule::to_json).collect());
            registry.update(&scope, object::name(&obj).to_string().as_str(), obj, None, &ctx).await
        }
        .await;
        match result {
            Ok(_) => tracing::debug!(role = %name, "aggregated cluster role rules"),
            // A conflict or a deletion is followed by another change event.
            Err(e) => tracing::debug!(role = %name, error = %e, "aggregating cluster role failed; will retry"),
        }
    }
}

/// Runs aggregation whenever the ClusterRoles change, until the registry is gone.
pub fn spawn(registry: &Arc<Registry>, rbac: Arc<Rbac>, admission: Arc<dyn Admission>) -> tokio::task::JoinHandle<()> {
    let registry = Arc::downgrade(registry);
    let mut changes = rbac.cluster_roles.changes();
    tokio::spawn(async move {
        loop {
            {
                let Some(reg) = registry.upgrade() else { return };
                sync(&reg, &rbac, admission.as_ref()).await;
            }
            if changes.changed().await.is_err() {
                return;
            }
            // Coalesce a burst of changes into one pass.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            changes.borrow_and_update();
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn role(labels: Value, rules: Vec<PolicyRule>) -> Arc<RoleInfo> {
        Arc::new(RoleInfo { rules, labels: labels.as_object().cloned().unwrap(), aggregation: None })
    }

    #[test]
    fn union_of_matching_roles_without_duplicates() {
        let get_pods = PolicyRule::resource(&["get"], &[""], &["pods"]);
        let list_pods = PolicyRule::resource(&["list"], &[""], &["pods"]);
        let roles = vec![
            ("b".to_string(), role(json!({"agg": "true"}), vec![get_pods.clone(), list_pods.clone()])),
            ("a".to_string(), role(json!({"agg": "true"}), vec![get_pods.clone()])),
            ("c".to_string(), role(json!({"agg": "false"}), vec![PolicyRule::resource(&["*"], &["*"], &["*"])])),
        ];
        let sel = vec![json!({"matchLabels": {"agg": "true"}})];
        assert_eq!(aggregated_rules("x", &sel, &roles), vec![get_pods.clone(), list_pods]);
        // A role never aggregates itself.
        assert_eq!(aggregated_rules("b", &sel, &roles), vec![get_pods]);
        assert!(aggregated_rules("x", &[json!({})], &roles).is_empty());
    }
}
