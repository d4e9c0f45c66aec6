//! `POST pods/NAME/eviction` (policy/v1 Eviction), as upstream's EvictionREST: a pod
//! that already disrupts nothing (Pending, finished, being deleted) is deleted at once;
//! otherwise the one PodDisruptionBudget selecting it must allow a disruption, which is
//! taken (disruptionsAllowed decremented, the pod recorded in disruptedPods for the
//! disruption controller) before the pod gets the DisruptionTarget condition and is
//! deleted. A refusal is 429 TooManyRequests with a DisruptionBudget cause.

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::admission::NoAdmission;
use krate_api::computed::{ComputedRequest, ComputedResource};
use krate_api::registry::{Context, DeleteOptions, ListOptions, Scope};
use krate_api::selector::LabelSelector;
use krate_api::user::UserInfo;
use krate_api::{ApiError, ApiResult, Cause, Registry, Target, object};
use serde_json::{Value, json};

/// Upstream's bound on disruptedPods before evictions are refused.
const MAX_DISRUPTED_PODS: usize = 2000;
/// Attempts at a write that lost a race.
const RETRIES: usize = 5;
const VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

pub struct Evictions {
    pub registry: Arc<Registry>,
}

fn scope(registry: &Registry, group: &str, version: &str, plural: &str, ns: &str) -> ApiResult<Scope> {
    let resource = registry.table.lookup(group, version, plural).ok_or_else(ApiError::not_found_path)?;
    Ok(Scope { resource, namespace: Some(ns.to_string()) })
}

fn budget_cause(message: String) -> Cause {
    Cause::new("DisruptionBudget", message, "")
}

fn too_many_requests(retry_after: u64, cause: String) -> ApiError {
    let mut e = ApiError::too_many_requests(VIOLATION, retry_after);
    if let Some(d) = e.details.as_mut() {
        d.causes.push(budget_cause(cause));
    }
    e
}

fn int(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

/// Pods that no budget protects: not running yet, finished, or already going.
fn can_ignore_budget(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || object::meta_str(pod, "deletionTimestamp").is_some()
}

fn delete_options(eviction: &Value) -> DeleteOptions {
    let o = eviction.get("deleteOptions").cloned().unwrap_or(Value::Null);
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).map(String::from);
    DeleteOptions {
        grace_period_seconds: o.get("gracePeriodSeconds").and_then(Value::as_i64),
        precondition_uid: s("/preconditions/uid"),
        precondition_resource_version: s("/preconditions/resourceVersion"),
        propagation_policy: s("/propagationPolicy"),
    }
}

impl Evictions {
    /// The budgets in the pod's namespace whose selector matches it (policy/v1: an
    /// empty selector matches every pod, a missing one none).
    async fn budgets(&self, pod: &Value, ns: &str) -> ApiResult<Vec<Value>> {
        let list = self
            .registry
            .list(&scope(&self.registry, "policy", "v1", "poddisruptionbudgets", ns)?, &ListOptions::default())
            .await?;
        let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
        Ok(list
            .items
            .iter()
            .filter_map(|b| serde_json::from_slice::<Value>(b).ok())
            .filter(|b| {
                b.pointer("/spec/selector").is_some_and(|s| !s.is_null() && LabelSelector::from_json(s).matches(labels))
            })
            .collect())
    }

    /// Takes one disruption from the budget, or says why not (upstream's checkAndDecrement).
    async fn take_disruption(&self, ns: &str, pod: &str, name: &str, user: &UserInfo, dry_run: bool) -> ApiResult<()> {
        let budgets = scope(&self.registry, "policy", "v1", "poddisruptionbudgets", ns)?;
        let target = Target::new("policy", "poddisruptionbudget", "PodDisruptionBudget", name);
        for _ in 0..RETRIES {
            let mut pdb = self.registry.get(&budgets, name).await?;
            if int(&pdb, "/status/observedGeneration") < int(&pdb, "/metadata/generation") {
                return Err(too_many_requests(
                    10,
                    format!("The disruption budget {name} is still being processed by the server."),
                ));
            }
            let allowed = int(&pdb, "/status/disruptionsAllowed");
            if allowed < 0 {
                return Err(ApiError::forbidden_on(&target, "pdb disruptions allowed is negative"));
            }
            let disrupted = pdb.pointer("/status/disruptedPods").and_then(Value::as_object).map_or(0, |m| m.len());
            if disrupted > MAX_DISRUPTED_PODS {
                return Err(ApiError::forbidden_on(
                    &target,
                    "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
                ));
            }
            if allowed == 0 {
                return Err(too_many_requests(
                    0,
                    format!(
                        "The disruption budget {name} needs {} healthy pods and has {} currently",
                        int(&pdb, "/status/desiredHealthy"),
                        int(&pdb, "/status/currentHealthy")
                    ),
                ));
            }
            if dry_run {
                return Ok(());
            }
            let status = pdb["status"].as_object_mut().ok_or_else(|| ApiError::internal("budget without status"))?;
            status.insert("disruptionsAllowed".into(), json!(allowed - 1));
            if allowed - 1 == 0 {
                let generation = int(&pdb, "/metadata/generation");
                set_insufficient(&mut pdb, generation);
            }
            let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let status = pdb["status"].as_object_mut().expect("checked above");
            let disrupted = status.entry("disruptedPods").or_insert_with(|| json!({}));
            if !disrupted.is_object() {
                *disrupted = json!({});
            }
            disrupted[pod] = json!(now);
            let ctx = Context::internal(user, &NoAdmission);
            match self.registry.update(&budgets, name, pdb, Some("status"), &ctx).await {
                Ok(_) => return Ok(()),
                Err(e) if e.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::timeout(format!("couldn't update PodDisruptionBudget {name:?} due to conflicts")))
    }

    /// Marks the pod DisruptionTarget (EvictionByEvictionAPI), then deletes it. A
    /// resourceVersion precondition is checked against the pod as it was, then moved on
    /// to the pod with the condition.
    async fn condition_and_delete(
        &self,
        ns: &str,
        name: &str,
        mut opts: DeleteOptions,
        user: &UserInfo,
        dry_run: bool,
    ) -> ApiResult<()> {
        let pods = scope(&self.registry, "", "v1", "pods", ns)?;
        let ctx = Context::internal(user, &NoAdmission);
        if !dry_run {
            let mut pod = self.registry.get(&pods, name).await?;
            let rv = object::meta_str(&pod, "resourceVersion").unwrap_or("").to_string();
            let uid = object::meta_str(&pod, "uid").unwrap_or("").to_string();
            let t = scope(&self.registry, "", "v1", "pods", ns)?.target(name);
            if opts.precondition_uid.as_ref().is_some_and(|u| !u.is_empty() && *u != uid)
                || opts.precondition_resource_version.as_ref().is_some_and(|v| !v.is_empty() && *v != rv)
            {
                return Err(ApiError::conflict(
                    &t,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
            if !matches!(phase(&pod), "Succeeded" | "Failed") {
                add_disruption_target(&mut pod);
                let (updated, _) = self.registry.update(&pods, name, pod, Some("status"), &ctx).await?;
                if opts.precondition_resource_version.is_some() {
                    opts.precondition_resource_version =
                        object::meta_str(&updated, "resourceVersion").map(String::from);
                }
            }
        }
        let ctx = Context { dry_run, ..ctx };
        self.registry.delete(&pods, name, &opts, &ctx).await.map(|_| ())
    }
}

fn set_insufficient(pdb: &mut Value, generation: i64) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let conditions = pdb["status"].as_object_mut().expect("status").entry("conditions").or_insert_with(|| json!([]));
    let Some(list) = conditions.as_array_mut() else { return };
    let previous = list.iter().find(|c| c["type"] == "DisruptionAllowed").cloned();
    let since = previous.filter(|c| c["status"] == "False").map_or(json!(now), |c| c["lastTransitionTime"].clone());
    list.retain(|c| c["type"] != "DisruptionAllowed");
    list.push(json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "",
        "observedGeneration": generation, "lastTransitionTime": since}));
}

fn add_disruption_target(pod: &mut Value) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let condition = json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting", "lastTransitionTime": now});
    let status = pod.as_object_mut().expect("pod object").entry("status").or_insert_with(|| json!({}));
    let conditions = status.as_object_mut().map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    if let Some(list) = conditions.and_then(Value::as_array_mut) {
        list.retain(|c| c["type"] != "DisruptionTarget");
        list.push(condition);
    }
}

#[async_trait]
impl ComputedResource for Evictions {
    async fn create(&self, req: &ComputedRequest<'_>, body: Value) -> ApiResult<Value> {
        if !body.is_object() {
            return Err(ApiError::bad_request("not a Eviction object"));
        }
        if object::name(&body) != req.name {
            return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
        }
        let ns = req.namespace.unwrap_or("");
        let dry_run = req.dry_run
            || body
                .pointer("/deleteOptions/dryRun")
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|v| v == "All"));
        let opts = delete_options(&body);
        let pods = scope(&self.registry, "", "v1", "pods", ns)?;
        let pod = self.registry.get(&pods, req.name).await?;
        let success = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
        if can_ignore_budget(&pod) {
            self.condition_and_delete(ns, req.name, opts, req.user, dry_run).await?;
            return Ok(success);
        }
        let budgets = self.budgets(&pod, ns).await?;
        let mut opts = opts;
        if budgets.len() > 1 {
            return Err(ApiError {
                code: 500,
                reason: "",
                message:
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                        .into(),
                details: None,
                retry_after: None,
                list_continue: None,
            });
        }
        let mut pinned = false;
        if let Some(pdb) = budgets.first() {
            let name = object::name(pdb).to_string();
            let always_allow =
                pdb.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow");
            let (current, desired) = (int(pdb, "/status/currentHealthy"), int(pdb, "/status/desiredHealthy"));
            // An unready pod is not counted healthy: evicting it takes nothing from the
            // budget when the policy says so or the budget is met anyway.
            if !is_ready(&pod) && (always_allow || (current >= desired && desired > 0)) {
                pinned = true;
            } else {
                self.take_disruption(ns, req.name, &name, req.user, dry_run).await?;
            }
            if pinned && opts.precondition_resource_version.is_none() {
                // The pod must not have become ready since it was judged.
                opts.precondition_resource_version = object::meta_str(&pod, "resourceVersion").map(String::from);
            } else {
                pinned = false;
            }
            match self.condition_and_delete(ns, req.name, opts, req.user, dry_run).await {
                Ok(()) => {}
                Err(e) if e.code == 409 && pinned => {
                    return Err(too_many_requests(
                        10,
                        format!("The disruption budget {name} is still being processed by the server."),
                    ));
                }
                Err(e) => return Err(e),
            }
            return Ok(success);
        }
        self.condition_and_delete(ns, req.name, opts, req.user, dry_run).await?;
        Ok(success)
    }
}
