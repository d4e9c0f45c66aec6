//! ResourceQuota (upstream's admission plugin of that name): a create that would take a
//! namespace's usage past a quota's hard limit is refused with 403 "exceeded quota: …";
//! one that passes is charged to the quotas' status.used at once, so creates racing
//! ahead of the ResourceQuota controller's recount cannot overshoot together. Pods must
//! state the compute resources a quota limits ("must specify …"). Covered: pods
//! (counts and compute resources, within the quota's scopes), services (node ports, load
//! balancers), claims (storage, per class) and count/<resource>[.<group>] of anything.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::{Value, json};

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::kinds::quantity::Quantity;
use krate_api::registry::{Context, ListOptions, Scope};
use krate_api::user::UserInfo;
use krate_api::{ApiError, ApiResult, Registry, Target, object};

const COMPUTE: [&str; 6] = ["requests.cpu", "cpu", "requests.memory", "memory", "limits.cpu", "limits.memory"];
/// Charging retries when a quota changed under us.
const ATTEMPTS: usize = 5;

pub struct ResourceQuota {
    registry: Weak<Registry>,
}

impl ResourceQuota {
    pub fn new(registry: &Arc<Registry>) -> Self {
        ResourceQuota { registry: Arc::downgrade(registry) }
    }
}

type Usage = BTreeMap<String, Quantity>;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap_or_else(|_| Quantity::zero())
}

fn put(usage: &mut Usage, key: impl Into<String>, value: Quantity) {
    let key = key.into();
    let sum = usage.get(&key).map_or(value, |have| have.add(&value));
    usage.insert(key, sum);
}

fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    let list = |k: &str| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array).into_iter().flatten();
    list("containers").chain(list("initContainers"))
}

/// Requests or limits of the pod: containers summed, the largest init container, overhead.
fn pod_amounts(pod: &Value, kind: &str) -> Usage {
    let mut sum = Usage::new();
    let of =
        |c: &Value| c.pointer(&format!("/resources/{kind}")).and_then(Value::as_object).cloned().unwrap_or_default();
    for c in pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
        for (k, v) in of(c) {
            put(&mut sum, k, q(v.as_str().unwrap_or("0")));
        }
    }
    for c in pod.pointer("/spec/initContainers").and_then(Value::as_array).into_iter().flatten() {
        for (k, v) in of(c) {
            let v = q(v.as_str().unwrap_or("0"));
            if sum.get(&k).is_none_or(|have| v.cmp_q(have).is_gt()) {
                sum.insert(k, v);
            }
        }
    }
    if kind == "requests" {
        for (k, v) in pod.pointer("/spec/overhead").and_then(Value::as_object).cloned().unwrap_or_default() {
            put(&mut sum, k, q(v.as_str().unwrap_or("0")));
        }
    }
    sum
}

/// What creating `obj` (of `plural` in `group`) adds to a namespace's usage.
pub fn usage(group: &str, plural: &str, obj: &Value) -> Usage {
    let mut u = Usage::new();
    let count = if group.is_empty() { format!("count/{plural}") } else { format!("count/{plural}.{group}") };
    u.insert(count, q("1"));
    if !group.is_empty() {
        return u;
    }
    match plural {
        "pods" => {
            u.insert("pods".into(), q("1"));
            for (r, v) in pod_amounts(obj, "requests") {
                if matches!(r.as_str(), "cpu" | "memory" | "ephemeral-storage") {
                    u.insert(r.clone(), v);
                }
                u.insert(format!("requests.{r}"), v);
            }
            for (r, v) in pod_amounts(obj, "limits") {
                if matches!(r.as_str(), "cpu" | "memory" | "ephemeral-storage") {
                    u.insert(format!("limits.{r}"), v);
                }
            }
        }
        "services" => {
            u.insert("services".into(), q("1"));
            let ports = obj.pointer("/spec/ports").and_then(Value::as_array).map_or(0, Vec::len);
            match obj.pointer("/spec/type").and_then(Value::as_str) {
                Some("NodePort") => {
                    u.insert("services.nodeports".into(), q(&ports.to_string()));
                }
                Some("LoadBalancer") => {
                    u.insert("services.nodeports".into(), q(&ports.to_string()));
                    u.insert("services.loadbalancers".into(), q("1"));
                }
                _ => {}
            }
        }
        "persistentvolumeclaims" => {
            u.insert("persistentvolumeclaims".into(), q("1"));
            let storage = obj.pointer("/spec/resources/requests/storage").and_then(Value::as_str).map(q);
            if let Some(s) = storage {
                u.insert("requests.storage".into(), s);
            }
            if let Some(class) = obj.pointer("/spec/storageClassName").and_then(Value::as_str).filter(|c| !c.is_empty())
            {
                u.insert(format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"), q("1"));
                if let Some(s) = storage {
                    u.insert(format!("{class}.storageclass.storage.k8s.io/requests.storage"), s);
                }
            }
        }
        "secrets" | "configmaps" | "replicationcontrollers" | "resourcequotas" => {
            u.insert(plural.into(), q("1"));
        }
        _ => {}
    }
    u
}

fn best_effort(pod: &Value) -> bool {
    containers(pod).all(|c| {
        ["requests", "limits"].iter().all(|k| {
            c.pointer(&format!("/resources/{k}"))
                .and_then(Value::as_object)
                .is_none_or(|m| !m.contains_key("cpu") && !m.contains_key("memory"))
        })
    })
}

/// Whether a quota's scopes cover the object (scopes only ever select pods).
pub fn in_scope(quota: &Value, plural: &str, obj: &Value) -> bool {
    let mut scopes: Vec<(String, String, Vec<String>)> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s.as_str()?.to_string(), "Exists".to_string(), Vec::new())))
        .collect();
    for e in quota.pointer("/spec/scopeSelector/matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let values = e.get("values").and_then(Value::as_array).into_iter().flatten();
        scopes.push((
            e.get("scopeName").and_then(Value::as_str).unwrap_or("").into(),
            e.get("operator").and_then(Value::as_str).unwrap_or("").into(),
            values.filter_map(|v| v.as_str().map(String::from)).collect(),
        ));
    }
    if scopes.is_empty() {
        return true;
    }
    if plural != "pods" {
        return false;
    }
    let deadline = obj.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64);
    let class = obj.pointer("/spec/priorityClassName").and_then(Value::as_str).filter(|c| !c.is_empty());
    scopes.iter().all(|(scope, op, values)| match scope.as_str() {
        "Terminating" => deadline.is_some_and(|d| d >= 0),
        "NotTerminating" => deadline.is_none_or(|d| d < 0),
        "BestEffort" => best_effort(obj),
        "NotBestEffort" => !best_effort(obj),
        "PriorityClass" => match op.as_str() {
            "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
            "NotIn" => class.is_none_or(|c| !values.iter().any(|v| v == c)),
            "Exists" => class.is_some(),
            "DoesNotExist" => class.is_none(),
            _ => false,
        },
        _ => false,
    })
}

/// Compute resources a quota limits that some container of the pod leaves unstated.
fn missing_compute(hard: &serde_json::Map<String, Value>, pod: &Value) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    for key in COMPUTE.iter().filter(|k| hard.contains_key(**k)) {
        let (kind, resource) = match key.split_once('.') {
            Some((kind, resource)) => (kind, resource),
            None => ("requests", *key),
        };
        let unstated = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c.pointer(&format!("/resources/{kind}/{resource}")).is_none());
        if unstated {
            missing.push(key.to_string());
        }
    }
    missing.sort();
    missing
}

fn pretty(items: &[(String, Quantity)]) -> String {
    items.iter().map(|(k, v)| format!("{k}={}", v.canonical())).collect::<Vec<_>>().join(",")
}

fn charged_on_update(group: &str, plural: &str) -> bool {
    group.is_empty() && matches!(plural, "services" | "persistentvolumeclaims")
}

/// What `new` uses beyond `old`, only the positive parts (upstream's
/// SubtractWithNonNegativeResult, then RemoveZeros).
fn growth(new: &Usage, old: &Usage) -> Usage {
    new.iter()
        .map(|(k, v)| (k.clone(), old.get(k).map_or(*v, |o| v.sub(o))))
        .filter(|(_, v)| !v.is_zero() && !v.is_negative())
        .collect()
}

/// Checks one quota; Ok(Some(new status.used)) when it is to be charged.
fn check(quota: &Value, delta: &Usage, plural: &str, obj: &Value) -> Result<Option<Value>, String> {
    let name = object::name(quota).to_string();
    let Some(hard) = quota.pointer("/spec/hard").and_then(Value::as_object) else { return Ok(None) };
    if !in_scope(quota, plural, obj) {
        return Ok(None);
    }
    let keys: Vec<&String> = hard.keys().filter(|k| delta.contains_key(*k)).collect();
    if plural == "pods" {
        let missing = missing_compute(hard, obj);
        if !missing.is_empty() {
            return Err(format!("failed quota: {name}: must specify {}", missing.join(",")));
        }
    }
    if keys.is_empty() {
        return Ok(None);
    }
    let status_hard = quota.pointer("/status/hard").and_then(Value::as_object);
    let unknown: Vec<&str> =
        keys.iter().filter(|k| status_hard.is_none_or(|h| !h.contains_key(**k))).map(|k| k.as_str()).collect();
    if !unknown.is_empty() {
        return Err(format!("status unknown for quota: {name}, resources: {}", unknown.join(",")));
    }
    let used = quota.pointer("/status/used").and_then(Value::as_object);
    let used_of = |k: &str| used.and_then(|u| u.get(k)).and_then(Value::as_str).map_or_else(Quantity::zero, q);
    let (mut requested, mut was, mut limited) = (Vec::new(), Vec::new(), Vec::new());
    let mut new_used = used.cloned().unwrap_or_default();
    for key in keys {
        let limit = q(hard[key].as_str().unwrap_or("0"));
        let after = used_of(key).add(&delta[key]);
        if after.cmp_q(&limit).is_gt() {
            requested.push((key.clone(), delta[key]));
            was.push((key.clone(), used_of(key)));
            limited.push((key.clone(), limit));
        }
        new_used.insert(key.clone(), json!(after.canonical()));
    }
    if !requested.is_empty() {
        return Err(format!(
            "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
            pretty(&requested),
            pretty(&was),
            pretty(&limited)
        ));
    }
    Ok(Some(Value::Object(new_used)))
}

#[async_trait]
impl Admission for ResourceQuota {
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        let (None, Some(ns), Some(obj)) = (attrs.subresource, attrs.namespace, obj) else { return Ok(()) };
        let r = attrs.resource;
        let delta = match (attrs.operation, old) {
            (Operation::Create, _) => usage(&r.group, &r.plural, obj),
            // Updates are charged for what they add, as upstream's evaluators for services
            // (a type change to NodePort or LoadBalancer) and claims (a larger request).
            (Operation::Update, Some(old)) if charged_on_update(&r.group, &r.plural) => {
                growth(&usage(&r.group, &r.plural, obj), &usage(&r.group, &r.plural, old))
            }
            _ => return Ok(()),
        };
        if delta.is_empty() {
            return Ok(());
        }
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let resource = registry.table.lookup("", "v1", "resourcequotas").expect("resourcequotas are built in");
        let scope = Scope { resource, namespace: Some(ns.to_string()) };
        let name = if attrs.name.is_empty() { object::meta_str(obj, "generateName").unwrap_or("") } else { attrs.name };
        let target = Target::new(&r.group, &r.plural, &r.kind, name);
        let apiserver = UserInfo::component("system:apiserver");
        let no_admission = krate_api::admission::NoAdmission;
        for attempt in 0..ATTEMPTS {
            let listed = registry.list(&scope, &ListOptions::default()).await?;
            let quotas: Vec<Value> = listed.items.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect();
            let mut charges = Vec::new();
            for quota in &quotas {
                match check(quota, &delta, &r.plural, obj) {
                    Ok(Some(used)) => charges.push((quota.clone(), used)),
                    Ok(None) => {}
                    Err(why) => return Err(ApiError::forbidden_on(&target, &why)),
                }
            }
            if attrs.dry_run || charges.is_empty() {
                return Ok(());
            }
            // Charge every quota; a conflict means someone else charged first: recheck.
            let mut conflicted = false;
            for (quota, used) in charges {
                let mut updated = quota.clone();
                updated["status"]["used"] = used;
                let ctx = Context::internal(&apiserver, &no_admission);
                match registry.update(&scope, object::name(&quota), updated, Some("status"), &ctx).await {
                    Ok(_) => {}
                    Err(e) if e.code == 409 => {
                        conflicted = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !conflicted {
                return Ok(());
            }
            tracing::debug!(attempt, "quota changed while charging; rechecking");
        }
        Err(ApiError::forbidden_on(&target, "unable to charge quota: too many conflicts"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(hard: Value, used: Value) -> Value {
        json!({"metadata": {"name": "compute"}, "spec": {"hard": hard}, "status": {"hard": hard, "used": used}})
    }

    #[test]
    fn updates_are_charged_for_growth_only() {
        let claim =
            |size: &str| json!({"metadata": {"name": "c"}, "spec": {"resources": {"requests": {"storage": size}}}});
        let old = usage("", "persistentvolumeclaims", &claim("1Gi"));
        let grown = growth(&usage("", "persistentvolumeclaims", &claim("3Gi")), &old);
        assert_eq!(grown.get("requests.storage").map(|q| q.canonical()), Some("2Gi".to_string()));
        assert!(!grown.contains_key("persistentvolumeclaims"), "the count did not change");
        assert!(growth(&usage("", "persistentvolumeclaims", &claim("512Mi")), &old).is_empty());
        let svc = |t: &str| json!({"metadata": {"name": "s"}, "spec": {"type": t, "ports": [{"port": 80}]}});
        let grown = growth(&usage("", "services", &svc("NodePort")), &usage("", "services", &svc("ClusterIP")));
        assert_eq!(grown.keys().collect::<Vec<_>>(), vec!["services.nodeports"]);
    }

    #[test]
    fn exceeding_names_the_quota_and_the_numbers() {
        let pod = json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}});
        let delta = usage("", "pods", &pod);
        let q = quota(json!({"pods": "2", "requests.cpu": "1"}), json!({"pods": "1", "requests.cpu": "800m"}));
        assert_eq!(
            check(&q, &delta, "pods", &pod).unwrap_err(),
            "exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=800m, limited: requests.cpu=1"
        );
        let roomy = quota(json!({"pods": "2", "requests.cpu": "2"}), json!({"pods": "1", "requests.cpu": "800m"}));
        let used = check(&roomy, &delta, "pods", &pod).unwrap().unwrap();
        assert_eq!(used, json!({"pods": "2", "requests.cpu": "1300m"}));
    }

    #[test]
    fn pods_must_state_limited_compute_resources_and_status_must_be_known() {
        let pod = json!({"spec": {"containers": [{"name": "c"}]}});
        let q = quota(json!({"limits.memory": "1Gi", "requests.cpu": "1"}), json!({}));
        assert_eq!(
            check(&q, &usage("", "pods", &pod), "pods", &pod).unwrap_err(),
            "failed quota: compute: must specify limits.memory,requests.cpu"
        );
        let fresh = json!({"metadata": {"name": "new"}, "spec": {"hard": {"configmaps": "1"}}});
        let cm = json!({});
        assert_eq!(
            check(&fresh, &usage("", "configmaps", &cm), "configmaps", &cm).unwrap_err(),
            "status unknown for quota: new, resources: configmaps"
        );
    }

    #[test]
    fn scoped_quotas_only_see_their_pods() {
        let scoped = json!({"spec": {"hard": {"pods": "1"}, "scopes": ["BestEffort"]}});
        let plain = json!({"spec": {"containers": [{"name": "c"}]}});
        assert!(in_scope(&scoped, "pods", &plain));
        assert!(!in_scope(&scoped, "services", &json!({})));
        let group = usage("apps", "deployments", &json!({}));
        assert_eq!(group.keys().collect::<Vec<_>>(), vec!["count/deployments.apps"]);
    }
}
