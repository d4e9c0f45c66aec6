//! What one object uses of a ResourceQuota (upstream's quota evaluators for pods,
//! services and persistent volume claims) and whether a quota's scopes cover it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Service};
use krate_api::kinds::quantity::Quantity;

pub type Usage = BTreeMap<String, Quantity>;

fn one() -> Quantity {
    Quantity::parse("1").expect("literal")
}

fn n(count: usize) -> Quantity {
    Quantity::parse(&count.to_string()).expect("integer")
}

fn add(usage: &mut Usage, key: &str, q: &Quantity) {
    let sum = usage.get(key).map_or(*q, |have| have.add(q));
    usage.insert(key.to_string(), sum);
}

/// Adds `other` into `total`.
pub fn add_all(total: &mut Usage, other: &Usage) {
    for (k, q) in other {
        add(total, k, q);
    }
}

/// Whether the pod still counts: not finished, and not past its deletion deadline.
pub fn pod_counts(pod: &Pod, now: k8s_openapi::jiff::Timestamp) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    pod.metadata.deletion_timestamp.as_ref().is_none_or(|t| t.0 > now)
}

/// The pod's effective requests or limits per resource: the larger of its containers'
/// sum and any one init container's, plus the pod overhead (upstream's PodRequests).
fn pod_amounts(pod: &Pod, limits: bool) -> BTreeMap<String, Quantity> {
    let Some(spec) = pod.spec.as_ref() else { return BTreeMap::new() };
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        let r = c.resources.as_ref();
        let m = if limits { r.and_then(|r| r.limits.clone()) } else { r.and_then(|r| r.requests.clone()) };
        m.unwrap_or_default()
    };
    let mut sum: BTreeMap<String, Quantity> = BTreeMap::new();
    for c in &spec.containers {
        for (k, v) in of(c) {
            if let Ok(q) = Quantity::parse(&v.0) {
                add(&mut sum, &k, &q);
            }
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in of(c) {
            if let Ok(q) = Quantity::parse(&v.0)
                && sum.get(&k).is_none_or(|have| q.cmp_q(have) == std::cmp::Ordering::Greater)
            {
                sum.insert(k, q);
            }
        }
    }
    for (k, v) in spec.overhead.clone().unwrap_or_default() {
        if let Ok(q) = Quantity::parse(&v.0) {
            add(&mut sum, &k, &q);
        }
    }
    sum
}

/// Upstream's pod evaluator: counts and compute resources.
pub fn pod_usage(pod: &Pod) -> Usage {
    let mut usage = Usage::new();
    usage.insert("pods".into(), one());
    usage.insert("count/pods".into(), one());
    for (resource, q) in pod_amounts(pod, false) {
        if matches!(resource.as_str(), "cpu" | "memory" | "ephemeral-storage") {
            usage.insert(resource.clone(), q);
        }
        usage.insert(format!("requests.{resource}"), q);
    }
    for (resource, q) in pod_amounts(pod, true) {
        if matches!(resource.as_str(), "cpu" | "memory" | "ephemeral-storage") {
            usage.insert(format!("limits.{resource}"), q);
        }
    }
    usage
}

pub fn service_usage(service: &Service) -> Usage {
    let mut usage = Usage::new();
    usage.insert("services".into(), one());
    usage.insert("count/services".into(), one());
    let spec = service.spec.as_ref();
    let ports = spec.and_then(|s| s.ports.as_ref()).map_or(0, Vec::len);
    match spec.and_then(|s| s.type_.as_deref()) {
        Some("NodePort") => {
            usage.insert("services.nodeports".into(), n(ports));
        }
        Some("LoadBalancer") => {
            let allocate = spec.and_then(|s| s.allocate_load_balancer_node_ports).unwrap_or(true);
            let with_node_ports = if allocate {
                ports
            } else {
                spec.and_then(|s| s.ports.as_ref())
                    .map_or(0, |p| p.iter().filter(|p| p.node_port.unwrap_or(0) != 0).count())
            };
            usage.insert("services.nodeports".into(), n(with_node_ports));
            usage.insert("services.loadbalancers".into(), one());
        }
        _ => {}
    }
    usage
}

pub fn pvc_usage(pvc: &PersistentVolumeClaim) -> Usage {
    let mut usage = Usage::new();
    usage.insert("persistentvolumeclaims".into(), one());
    usage.insert("count/persistentvolumeclaims".into(), one());
    let spec = pvc.spec.as_ref();
    let storage = spec
        .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage").cloned())
        .and_then(|q| Quantity::parse(&q.0).ok());
    if let Some(q) = storage {
        usage.insert("requests.storage".into(), q);
    }
    if let Some(class) = spec.and_then(|s| s.storage_class_name.as_deref()).filter(|c| !c.is_empty()) {
        usage.insert(format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"), one());
        if let Some(q) = storage {
            usage.insert(format!("{class}.storageclass.storage.k8s.io/requests.storage"), q);
        }
    }
    usage
}

/// A plain object count (secrets, configmaps, ...).
pub fn count_usage(plural: &str, legacy: Option<&str>) -> Usage {
    let mut usage = Usage::new();
    usage.insert(format!("count/{plural}"), one());
    if let Some(key) = legacy {
        usage.insert(key.into(), one());
    }
    usage
}

fn is_best_effort(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return true };
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).all(|c| {
        let r = c.resources.as_ref();
        let empty = |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.is_none_or(|m| !m.keys().any(|k| k == "cpu" || k == "memory"))
        };
        empty(r.and_then(|r| r.requests.as_ref())) && empty(r.and_then(|r| r.limits.as_ref()))
    })
}

fn scope_matches_pod(scope: &str, operator: &str, values: &[String], pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    match scope {
        "Terminating" => spec.and_then(|s| s.active_deadline_seconds).is_some_and(|d| d >= 0),
        "NotTerminating" => spec.and_then(|s| s.active_deadline_seconds).is_none_or(|d| d < 0),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "PriorityClass" => {
            let class = spec.and_then(|s| s.priority_class_name.as_deref()).filter(|c| !c.is_empty());
            match operator {
                "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
                "NotIn" => class.is_none_or(|c| !values.iter().any(|v| v == c)),
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                _ => false,
            }
        }
        _ => false,
    }
}

/// The quota's scopes as (scope, operator, values): spec.scopes are "Exists".
fn scopes(quota: &ResourceQuota) -> Vec<(String, String, Vec<String>)> {
    let spec = quota.spec.as_ref();
    let mut out: Vec<(String, String, Vec<String>)> = spec
        .and_then(|s| s.scopes.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s, "Exists".into(), vec![]))
        .collect();
    for e in spec.and_then(|s| s.scope_selector.as_ref()?.match_expressions.clone()).unwrap_or_default() {
        out.push((e.scope_name, e.operator, e.values.unwrap_or_default()));
    }
    out
}

pub fn has_scopes(quota: &ResourceQuota) -> bool {
    !scopes(quota).is_empty()
}

/// Whether a pod falls under every one of the quota's scopes.
pub fn pod_in_scope(quota: &ResourceQuota, pod: &Pod) -> bool {
    scopes(quota).iter().all(|(s, op, values)| scope_matches_pod(s, op, values, pod))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn pod_usage_sums_containers_and_takes_the_largest_init_container() {
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]}}));
        let u = pod_usage(&p);
        assert_eq!(u["requests.cpu"].canonical(), "2");
        assert_eq!(u["requests.memory"].canonical(), "128Mi");
        assert_eq!(u["limits.memory"].canonical(), "256Mi");
        assert_eq!(u["pods"].canonical(), "1");
        let mut total = Usage::new();
        add_all(&mut total, &u);
        add_all(&mut total, &u);
        assert_eq!(total["requests.memory"].canonical(), "256Mi");
        assert_eq!(total["count/pods"].canonical(), "2");
    }

    #[test]
    fn scopes_select_pods() {
        let quota = |v: serde_json::Value| -> ResourceQuota { serde_json::from_value(json!({"spec": v})).unwrap() };
        let best_effort = pod(json!({"spec": {"containers": [{"name": "a"}]}}));
        let burstable = pod(json!({"spec": {"activeDeadlineSeconds": 10, "priorityClassName": "high",
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}));
        let be = quota(json!({"scopes": ["BestEffort"]}));
        assert!(pod_in_scope(&be, &best_effort) && !pod_in_scope(&be, &burstable));
        let term = quota(json!({"scopes": ["Terminating", "NotBestEffort"]}));
        assert!(pod_in_scope(&term, &burstable) && !pod_in_scope(&term, &best_effort));
        let high = quota(json!({"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}));
        assert!(pod_in_scope(&high, &burstable) && !pod_in_scope(&high, &best_effort));
    }

    #[test]
    fn services_count_node_ports_and_load_balancers() {
        let svc: Service = serde_json::from_value(json!({"spec": {"type": "LoadBalancer",
            "ports": [{"port": 80}, {"port": 443}]}}))
        .unwrap();
        let u = service_usage(&svc);
        assert_eq!(u["services.nodeports"].canonical(), "2");
        assert_eq!(u["services.loadbalancers"].canonical(), "1");
    }
}
