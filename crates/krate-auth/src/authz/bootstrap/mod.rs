//! Creates and reconciles the bootstrap RBAC policy at start, as upstream's
//! rbac/bootstrap-roles post-start hook: missing objects are created; existing ones
//! annotated `rbac.authorization.kubernetes.io/autoupdate: "true"` get missing rules,
//! subjects, labels and annotations added (what users added stays); `"false"` leaves
//! them alone.

pub mod policy;

use std::sync::Arc;

use krate_api::admission::Admission;
use krate_api::registry::{Context, Scope};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};
use serde_json::{Value, json};

use super::rbac::GROUP;
use super::rbac::rule::{PolicyRule, covers};

pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
pub const BOOTSTRAPPING: &str = "kubernetes.io/bootstrapping";

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{resource} is not served")]
    NotServed { resource: &'static str },
    #[error("reconciling {kind} {name:?}: {source}")]
    Write { kind: &'static str, name: String, source: ApiError },
}

/// The identity the API server's own writes act as (upstream's loopback client).
pub fn apiserver_user() -> UserInfo {
    UserInfo {
        name: "system:apiserver".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
        ..Default::default()
    }
}

fn metadata(name: &str, namespace: &str, labels: &[(&str, &str)]) -> Value {
    let mut l = serde_json::Map::new();
    l.insert(BOOTSTRAPPING.into(), json!("rbac-defaults"));
    for (k, v) in labels {
        l.insert(k.to_string(), json!(v));
    }
    let mut meta = json!({"name": name, "labels": l, "annotations": {AUTOUPDATE: "true"}});
    if !namespace.is_empty() {
        meta["namespace"] = json!(namespace);
    }
    meta
}

pub fn role_object(role: &policy::Role) -> Value {
    let kind = if role.namespace.is_empty() { "ClusterRole" } else { "Role" };
    let mut obj = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(role.name, role.namespace, &role.labels),
        "rules": role.rules.iter().map(PolicyRule::to_json).collect::<Vec<_>>(),
    });
    if let Some(key) = role.aggregate_from {
        obj["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {key: "true"}}]});
    }
    obj
}

pub fn binding_object(b: &policy::Binding) -> Value {
    let kind = if b.namespace.is_empty() { "ClusterRoleBinding" } else { "RoleBinding" };
    let subjects: Vec<Value> = b
        .subjects
        .iter()
        .map(|(kind, name, ns)| match *kind {
            "ServiceAccount" => json!({"kind": kind, "name": name, "namespace": ns}),
            _ => json!({"kind": kind, "name": name, "apiGroup": GROUP}),
        })
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(b.name, b.namespace, &[]),
        "roleRef": {"apiGroup": GROUP, "kind": b.role_kind, "name": b.role_name},
        "subjects": subjects,
    })
}

/// Adds `desired`'s labels and annotations that `existing` lacks; true if it changed.
fn merge_metadata(existing: &mut Value, desired: &Value) -> bool {
    let mut changed = false;
    for field in ["labels", "annotations"] {
        let Some(want) = desired["metadata"][field].as_object() else { continue };
        let meta = krate_api::object::meta_mut(existing);
        let have = meta.entry(field).or_insert_with(|| json!({}));
        if !have.is_object() {
            *have = json!({});
        }
        let have = have.as_object_mut().expect("made an object above");
        for (k, v) in want {
            if !have.contains_key(k) {
                have.insert(k.clone(), v.clone());
                changed = true;
            }
        }
    }
    changed
}

/// The reconciled form of an existing role, or None when nothing needs to change.
pub fn reconcile_role(existing: &Value, desired: &Value) -> Option<Value> {
    let mut out = existing.clone();
    let mut changed = merge_metadata(&mut out, desired);
    if let Some(want) = desired.get("aggregationRule") {
        // The aggregation loop owns aggregated roles' rules; only selectors are added.
        let have =
            out.pointer("/aggregationRule/clusterRoleSelectors").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut selectors = have.clone();
        for s in want["clusterRoleSelectors"].as_array().into_iter().flatten() {
            if !selectors.contains(s) {
                selectors.push(s.clone());
            }
        }
        if selectors != have {
            out["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
            changed = true;
        }
    } else {
        let (ok, missing) = covers(&PolicyRule::list_from(existing), &PolicyRule::list_from(desired));
        if !ok {
            let rules = out["rules"].as_array().cloned().unwrap_or_default();
            let mut rules = rules;
            rules.extend(missing.iter().map(PolicyRule::to_json));
            out["rules"] = Value::Array(rules);
            changed = true;
        }
    }
    changed.then_some(out)
}

/// The reconciled form of an existing binding (subjects added), or None.
pub fn reconcile_binding(existing: &Value, desired: &Value) -> Option<Value> {
    let mut out = existing.clone();
    let mut changed = merge_metadata(&mut out, desired);
    let mut subjects = out["subjects"].as_array().cloned().unwrap_or_default();
    let same = |a: &Value, b: &Value| ["kind", "name", "namespace"].iter().all(|f| a.get(*f) == b.get(*f));
    for s in desired["subjects"].as_array().into_iter().flatten() {
        if !subjects.iter().any(|h| same(h, s)) {
            subjects.push(s.clone());
            changed = true;
        }
    }
    out["subjects"] = Value::Array(subjects);
    changed.then_some(out)
}

fn autoupdate_off(obj: &Value) -> bool {
    obj.pointer("/metadata/annotations").and_then(|a| a.get(AUTOUPDATE)).and_then(Value::as_str) == Some("false")
}

async fn ensure(
    registry: &Arc<Registry>,
    ctx: &Context<'_>,
    plural: &'static str,
    desired: Value,
    reconcile: fn(&Value, &Value) -> Option<Value>,
) -> Result<(), BootstrapError> {
    let resource = registry.table.lookup(GROUP, "v1", plural).ok_or(BootstrapError::NotServed { resource: plural })?;
    let namespace = krate_api::object::meta_str(&desired, "namespace").map(String::from);
    let name = krate_api::object::name(&desired).to_string();
    let scope = Scope { resource, namespace };
    let kind = plural;
    let err = |source| BootstrapError::Write { kind, name: name.clone(), source };
    match registry.get(&scope, &name).await {
        Ok(existing) => {
            if autoupdate_off(&existing) {
                return Ok(());
            }
            // A binding to another role is replaced, as upstream does.
            if existing.get("roleRef").is_some() && existing.get("roleRef") != desired.get("roleRef") {
                registry.delete(&scope, &name, &Default::default(), ctx).await.map_err(err)?;
                registry.create(&scope, desired, ctx).await.map_err(err)?;
                return Ok(());
            }
            if let Some(updated) = reconcile(&existing, &desired) {
                tracing::info!(kind, name, "reconciling bootstrap RBAC object");
                registry.update(&scope, &name, updated, None, ctx).await.map_err(err)?;
            }
            Ok(())
        }
        Err(e) if e.code == 404 => match registry.create(&scope, desired, ctx).await {
            Ok(_) => Ok(()),
            // Another API server got there first.
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(err(e)),
        },
        Err(e) => Err(err(e)),
    }
}

/// Creates or reconciles every bootstrap role and binding. The namespaces kube-system and
/// kube-public must exist.
pub async fn reconcile(registry: &Arc<Registry>, admission: &dyn Admission) -> Result<(), BootstrapError> {
    let user = apiserver_user();
    let ctx = Context::internal(&user, admission);
    for role in policy::cluster_roles() {
        ensure(registry, &ctx, "clusterroles", role_object(&role), reconcile_role).await?;
    }
    for b in policy::cluster_role_bindings() {
        ensure(registry, &ctx, "clusterrolebindings", binding_object(&b), reconcile_binding).await?;
    }
    for role in policy::namespaced_roles() {
        ensure(registry, &ctx, "roles", role_object(&role), reconcile_role).await?;
    }
    for b in policy::namespaced_role_bindings() {
        ensure(registry, &ctx, "rolebindings", binding_object(&b), reconcile_binding).await?;
    }
    Ok(())
}

/// Waits (at most `timeout`) until `rbac`'s copy holds every bootstrap cluster role and
/// binding, so decisions right after start see the policy.
pub async fn wait_visible(rbac: &super::rbac::Rbac, timeout: std::time::Duration) -> bool {
    let roles: Vec<&str> = policy::cluster_roles().iter().map(|r| r.name).collect();
    let bindings: Vec<&str> = policy::cluster_role_bindings().iter().map(|b| b.name).collect();
    let visible = || {
        roles.iter().all(|n| rbac.cluster_roles.get("", n).is_some())
            && bindings.iter().all(|n| rbac.cluster_role_bindings.get("", n).is_some())
    };
    let poll = async {
        while !visible() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(timeout, poll).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciling_adds_missing_rules_and_keeps_additions() {
        let role = policy::cluster_roles().into_iter().find(|r| r.name == "system:basic-user").unwrap();
        let desired = role_object(&role);
        assert!(reconcile_role(&desired, &desired).is_none(), "an up-to-date role is left alone");
        let mut existing = desired.clone();
        existing["rules"] = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
        existing["metadata"]["labels"] = json!({"mine": "yes"});
        let updated = reconcile_role(&existing, &desired).expect("rules were missing");
        let rules = PolicyRule::list_from(&updated);
        assert_eq!(rules[0], PolicyRule::resource(&["get"], &[""], &["pods"]), "the user's rule stays");
        assert!(covers(&rules, &role.rules).0);
        assert_eq!(updated["metadata"]["labels"]["mine"], "yes");
        assert_eq!(updated["metadata"]["labels"][BOOTSTRAPPING], "rbac-defaults");
        assert_eq!(updated["metadata"]["annotations"][AUTOUPDATE], "true");
    }

    #[test]
    fn reconciling_bindings_adds_subjects() {
        let b = policy::cluster_role_bindings().into_iter().find(|b| b.name == "system:public-info-viewer").unwrap();
        let desired = binding_object(&b);
        let mut existing = desired.clone();
        existing["subjects"] = json!([{"kind": "User", "name": "extra", "apiGroup": GROUP}]);
        let updated = reconcile_binding(&existing, &desired).unwrap();
        assert_eq!(updated["subjects"].as_array().unwrap().len(), 3);
        assert!(reconcile_binding(&updated, &desired).is_none());
    }

    fn role(name: &str) -> policy::Role {
        policy::cluster_roles().into_iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no role {name}"))
    }

    fn grants(role_name: &str, verbs: &[&str], group: &str, resources: &[&str]) -> bool {
        covers(&role(role_name).rules, &[PolicyRule::resource(verbs, &[group], resources)]).0
    }

    #[test]
    fn every_upstream_controller_role_is_bound_to_its_service_account() {
        let controllers = [
            "attachdetach-controller",
            "certificate-controller",
            "clusterrole-aggregation-controller",
            "cronjob-controller",
            "daemon-set-controller",
            "deployment-controller",
            "device-taint-eviction-controller",
            "disruption-controller",
            "endpoint-controller",
            "endpointslice-controller",
            "endpointslicemirroring-controller",
            "ephemeral-volume-controller",
            "expand-controller",
            "generic-garbage-collector",
            "horizontal-pod-autoscaler",
            "job-controller",
            "legacy-service-account-token-cleaner",
            "namespace-controller",
            "node-controller",
            "persistent-volume-binder",
            "pod-garbage-collector",
            "pv-protection-controller",
            "pvc-protection-controller",
            "replicaset-controller",
            "replication-controller",
            "resource-claim-controller",
            "resourcequota-controller",
            "root-ca-cert-publisher",
            "route-controller",
            "selinux-warning-controller",
            "service-account-controller",
            "service-cidrs-controller",
            "service-controller",
            "statefulset-controller",
            "ttl-after-finished-controller",
            "ttl-controller",
            "validatingadmissionpolicy-status-controller",
            "volumeattributesclass-protection-controller",
        ];
        let bindings = policy::cluster_role_bindings();
        for c in controllers {
            let name = format!("system:controller:{c}");
            role(&name);
            let b = bindings.iter().find(|b| b.name == name).unwrap_or_else(|| panic!("no binding {name}"));
            assert_eq!(b.role_name, name);
            assert_eq!(b.subjects, vec![("ServiceAccount", c, "kube-system")]);
        }
        let defined = policy::cluster_roles().into_iter().filter(|r| r.name.starts_with("system:controller:")).count();
        assert_eq!(defined, controllers.len(), "no controller role beyond upstream's default set");
    }

    #[test]
    fn controller_roles_carry_upstreams_rules() {
        let events = |name: &str| grants(name, &["create", "patch", "update"], "events.k8s.io", &["events"]);
        for quiet in [
            "clusterrole-aggregation-controller",
            "namespace-controller",
            "pod-garbage-collector",
            "legacy-service-account-token-cleaner",
        ] {
            assert!(!events(&format!("system:controller:{quiet}")), "{quiet} records no events upstream");
        }
        for noisy in ["horizontal-pod-autoscaler", "certificate-controller", "ttl-controller", "statefulset-controller"]
        {
            assert!(events(&format!("system:controller:{noisy}")), "{noisy}");
        }
        let hpa = "system:controller:horizontal-pod-autoscaler";
        assert!(grants(hpa, &["get", "update"], "apps", &["deployments/scale"]));
        assert!(grants(hpa, &["get", "update"], "example.com", &["widgets/scale"]));
        assert!(grants(hpa, &["update"], "autoscaling", &["horizontalpodautoscalers/status"]));
        assert!(!grants(hpa, &["update"], "autoscaling", &["horizontalpodautoscalers"]));
        assert!(grants(hpa, &["list", "watch"], "metrics.k8s.io", &["pods"]));
        assert!(!grants(hpa, &["update"], "apps", &["deployments"]));

        let cert = policy::cluster_roles().into_iter().find(|r| r.name == "system:controller:certificate-controller");
        let cert = cert.unwrap().rules;
        let sign = |signer: &str| {
            covers(&cert, &[PolicyRule::resource(&["sign"], &["certificates.k8s.io"], &["signers"]).names(&[signer])]).0
        };
        assert!(sign("kubernetes.io/kubelet-serving") && sign("kubernetes.io/legacy-unknown"));
        assert!(!sign("example.com/other"));
        let approve = PolicyRule::resource(&["approve"], &["certificates.k8s.io"], &["signers"]);
        assert!(covers(&cert, &[approve.clone().names(&["kubernetes.io/kube-apiserver-client-kubelet"])]).0);
        assert!(!covers(&cert, &[approve.names(&["kubernetes.io/kube-apiserver-client"])]).0);
        assert!(grants(
            "system:controller:certificate-controller",
            &["update"],
            "certificates.k8s.io",
            &["certificatesigningrequests/approval", "certificatesigningrequests/status"]
        ));

        // Fixed differences of roles krate had before.
        assert!(grants(
            "system:controller:statefulset-controller",
            &["list", "watch"],
            "",
            &["persistentvolumeclaims"]
        ));
        assert!(grants("system:controller:statefulset-controller", &["update"], "", &["pods/finalizers"]));
        assert!(!grants("system:controller:job-controller", &["patch"], "batch", &["jobs/status"]));
        assert!(grants("system:controller:cronjob-controller", &["watch"], "", &["pods"]));
        assert!(grants("system:controller:endpoint-controller", &["watch"], "", &["endpoints"]));
        assert!(grants(
            "system:controller:endpointslice-controller",
            &["watch"],
            "discovery.k8s.io",
            &["endpointslices"]
        ));
        assert!(grants("system:controller:node-controller", &["watch"], "", &["nodes"]));
        assert!(grants("system:controller:node-controller", &["get", "watch"], "", &["pods"]));
        assert!(grants("system:controller:pod-garbage-collector", &["watch"], "", &["nodes"]));
        assert!(grants("system:controller:namespace-controller", &["watch"], "apps", &["deployments"]));
    }

    #[test]
    fn cluster_roles_follow_upstreams_differences() {
        assert!(grants(
            "system:aggregate-to-edit",
            &["get", "list", "watch", "create"],
            "coordination.k8s.io",
            &["leases"]
        ));
        assert!(grants(
            "system:aggregate-to-edit",
            &["create", "delete"],
            "resource.k8s.io",
            &["resourceclaimtemplates"]
        ));
        assert!(!grants("system:aggregate-to-view", &["get"], "coordination.k8s.io", &["leases"]));
        assert!(grants("system:aggregate-to-view", &["list"], "resource.k8s.io", &["resourceclaims/status"]));
        assert!(grants("system:node-proxier", &["list", "watch"], "networking.k8s.io", &["servicecidrs"]));
        assert!(!grants("system:kube-dns", &["list"], "discovery.k8s.io", &["endpointslices"]));
        assert!(!grants("system:persistent-volume-provisioner", &["patch"], "", &["persistentvolumeclaims"]));
        assert!(grants("system:kubelet-api-admin", &["get"], "", &["nodes/pods", "nodes/healthz", "nodes/configz"]));
        assert!(grants("system:monitoring", &["get"], "", &["nodes/metrics"]));
        assert!(grants("system:kube-scheduler", &["create", "delete"], "coordination.k8s.io", &["leasecandidates"]));
        assert!(grants("system:kube-scheduler", &["update"], "resource.k8s.io", &["resourceclaims/status"]));
        assert!(grants("system:kube-scheduler", &["watch"], "storage.k8s.io", &["volumeattachments"]));
        assert!(grants("system:node-problem-detector", &["patch"], "", &["nodes/status"]));
        assert!(grants("system:heapster", &["list"], "extensions", &["deployments"]));

        let ns_roles = policy::namespaced_roles();
        let locking = ns_roles.iter().find(|r| r.name == "system::leader-locking-kube-controller-manager").unwrap();
        let lease = PolicyRule::resource(&["create", "get", "update"], &["coordination.k8s.io"], &["leases"]);
        assert!(covers(&locking.rules, &[lease]).0);
        assert!(!covers(&locking.rules, &[PolicyRule::resource(&["watch"], &[""], &["configmaps"])]).0);
        let bindings = policy::namespaced_role_bindings();
        let b = bindings.iter().find(|b| b.name == "system::leader-locking-kube-controller-manager").unwrap();
        assert!(b.subjects.contains(&("ServiceAccount", "leader-election-controller", "kube-system")));
    }

    #[test]
    fn every_binding_names_a_bootstrap_role() {
        let roles = policy::cluster_roles();
        for b in policy::cluster_role_bindings() {
            assert!(roles.iter().any(|r| r.name == b.role_name), "{}", b.name);
        }
        let ns_roles = policy::namespaced_roles();
        for b in policy::namespaced_role_bindings() {
            assert!(ns_roles.iter().any(|r| r.name == b.role_name && r.namespace == b.namespace), "{}", b.name);
        }
    }
}
