//! Pure Deployment arithmetic (upstream's deployment/util): surge and unavailability
//! from int-or-percent values, the pod-template-hash, revisions, replica annotations,
//! proportional shares and the rollout's completion and progress tests.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";

pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";
pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// An int-or-percent scaled against `total`, percentages rounded up or down (upstream's
/// GetScaledValueFromIntOrPercent). Malformed percentages count as 0.
pub fn scaled(value: &IntOrString, total: i32, round_up: bool) -> i32 {
    match value {
        IntOrString::Int(i) => *i,
        IntOrString::String(s) => {
            let Some(p) = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else { return 0 };
            let product = p * total as i64;
            (if round_up { (product + 99).div_euclid(100) } else { product.div_euclid(100) }) as i32
        }
    }
}

pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn is_rolling(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref()).unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// (maxSurge, maxUnavailable) resolved against `desired`; both zero means one unavailable.
pub fn fenceposts(d: &Deployment, desired: i32) -> (i32, i32) {
    let rolling = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
    let default = IntOrString::String("25%".into());
    let surge = rolling.and_then(|r| r.max_surge.as_ref()).unwrap_or(&default);
    let unavailable = rolling.and_then(|r| r.max_unavailable.as_ref()).unwrap_or(&default);
    let surge = scaled(surge, desired, true);
    let unavailable = scaled(unavailable, desired, false);
    if surge == 0 && unavailable == 0 { (0, 1) } else { (surge, unavailable) }
}

pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) { 0 } else { fenceposts(d, replicas(d)).0 }
}

pub fn max_unavailable(d: &Deployment) -> i32 {
    let n = replicas(d);
    if !is_rolling(d) || n == 0 { 0 } else { fenceposts(d, n).1.min(n) }
}

/// The new ReplicaSet's size for this step of a rollout (upstream's NewRSNewReplicas).
pub fn new_rs_new_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> i32 {
    if !is_rolling(d) {
        return replicas(d);
    }
    let current: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let max_total = replicas(d) + max_surge(d);
    if current >= max_total {
        return rs_replicas(new_rs);
    }
    let up = (max_total - current).min(replicas(d) - rs_replicas(new_rs));
    rs_replicas(new_rs) + up
}

/// fnv-1a (32-bit): upstream hashes pod templates with it.
fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c9dc5u32, |h, b| (h ^ *b as u32).wrapping_mul(0x01000193))
}

/// The pod-template-hash of a template and collision count, in upstream's alphabet.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&(c as u32).to_le_bytes());
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    fnv32a(&bytes).to_string().bytes().map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char).collect()
}

/// Templates equal once the pod-template-hash label is set aside (upstream's EqualIgnoreHash).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(HASH_LABEL);
            if labels.is_empty() {
                t.metadata.as_mut().unwrap().labels = None;
            }
        }
        serde_json::to_value(t).unwrap_or_default()
    };
    strip(a) == strip(b)
}

pub fn revision(annotations: Option<&BTreeMap<String, String>>) -> i64 {
    annotations.and_then(|a| a.get(REVISION)).and_then(|r| r.parse().ok()).unwrap_or(0)
}

pub fn annotation_i32(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// Copies the Deployment's own annotations onto a ReplicaSet (upstream skips these).
fn skip_copy(key: &str) -> bool {
    [LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, ROLLBACK_TO].contains(&key)
}

/// Upstream's SetNewReplicaSetAnnotations: copy the Deployment's annotations, raise the
/// revision to `new_revision`, set desired and max replicas. Returns whether anything changed.
pub fn set_new_rs_annotations(d: &Deployment, rs: &mut ReplicaSet, new_revision: i64, exists: bool) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_default();
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy(k) || annotations.get(k) == Some(v) {
            continue;
        }
        annotations.insert(k.clone(), v.clone());
        changed = true;
    }
    let old: i64 = annotations.get(REVISION).and_then(|r| r.parse().ok()).unwrap_or(0);
    if old < new_revision {
        annotations.insert(REVISION.into(), new_revision.to_string());
        changed = true;
    }
    if !exists && set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    annotation_i32(rs, DESIRED_REPLICAS) != Some(desired) || annotation_i32(rs, MAX_REPLICAS) != Some(max)
}

pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    if !replicas_annotations_need_update(rs, desired, max) {
        return false;
    }
    let a = rs.metadata.annotations.get_or_insert_default();
    a.insert(DESIRED_REPLICAS.into(), desired.to_string());
    a.insert(MAX_REPLICAS.into(), max.to_string());
    true
}

/// How many replicas `rs` gains (or loses) of the `to_add` being spread over all
/// ReplicaSets, by its share of the max-replicas it was sized for (upstream's GetProportion).
pub fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 { fraction.min(allowed) } else { fraction.max(allowed) }
}

fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    if replicas(d) == 0 {
        return -rs_replicas(rs);
    }
    let deployment_replicas = replicas(d) + max_surge(d);
    let annotated =
        annotation_i32(rs, MAX_REPLICAS).unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated == 0 {
        return 0;
    }
    let size = (rs_replicas(rs) as f64 * deployment_replicas as f64) / annotated as f64;
    size.round() as i32 - rs_replicas(rs)
}

/// The new ReplicaSet at the Deployment's size with all of it available.
pub fn is_saturated(d: &Deployment, rs: &ReplicaSet) -> bool {
    let want = replicas(d);
    annotation_i32(rs, DESIRED_REPLICAS) == Some(want)
        && rs_replicas(rs) == want
        && rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0) == want
}

/// How the active ReplicaSets of a Deployment scaled mid-rollout are resized: by their
/// share of what they were sized for, larger (then newer, when growing; older, when
/// shrinking) first, the rounding leftover to the first. Returns the indices of `active`
/// in that order, their new sizes, and "up" or "down".
pub fn proportional_sizes(d: &Deployment, active: &[&ReplicaSet]) -> (Vec<usize>, Vec<i32>, &'static str) {
    let total: i32 = active.iter().map(|rs| rs_replicas(rs)).sum();
    let allowed = if replicas(d) > 0 { replicas(d) + max_surge(d) } else { 0 };
    let to_add = allowed - total;
    let mut order: Vec<usize> = (0..active.len()).collect();
    let created = |i: usize| active[i].metadata.creation_timestamp.as_ref().map(|t| t.0);
    order.sort_by(|&a, &b| {
        let by_size = rs_replicas(active[b]).cmp(&rs_replicas(active[a]));
        let by_age = if to_add > 0 { created(b).cmp(&created(a)) } else { created(a).cmp(&created(b)) };
        by_size.then(by_age).then_with(|| active[a].metadata.name.cmp(&active[b].metadata.name))
    });
    let mut added = 0;
    let mut sizes: Vec<i32> = order
        .iter()
        .map(|&i| {
            let share = proportion(active[i], d, to_add, added);
            added += share;
            rs_replicas(active[i]) + share
        })
        .collect();
    if to_add != 0 && !sizes.is_empty() {
        sizes[0] = (sizes[0] + to_add - added).max(0);
    }
    (order, sizes, if to_add < 0 { "down" } else { "up" })
}

pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).is_some_and(|s| s != i32::MAX)
}

pub fn condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == type_)
}

pub fn new_condition(type_: &str, status: &str, reason: &str, message: String) -> DeploymentCondition {
    let now = Time(Timestamp::now());
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// Upstream's SetDeploymentCondition: same status and reason changes nothing; same status
/// keeps the transition time.
pub fn set_condition(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(cur) = condition(status, &c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(status, &c.type_);
    status.conditions.get_or_insert_default().push(c);
}

pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = status.conditions.as_mut() {
        cs.retain(|c| c.type_ != type_);
    }
}

/// Every replica updated and available, and the status is of this generation.
pub fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let n = replicas(d);
    s.updated_replicas.unwrap_or(0) == n
        && s.replicas.unwrap_or(0) == n
        && s.available_replicas.unwrap_or(0) == n
        && s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// Some step forward since the last status (upstream's DeploymentProgressing).
pub fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// The Progressing condition is older than the deadline (upstream's DeploymentTimedOut).
pub fn timed_out(d: &Deployment, s: &DeploymentStatus, now: Timestamp) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(c) = condition(s, "Progressing") else { return false };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => {
            let deadline = d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).unwrap_or(600).max(0);
            c.last_update_time.as_ref().is_some_and(|t| t.0 + std::time::Duration::from_secs(deadline as u64) < now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i32, surge: serde_json::Value, unavailable: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {"replicas": replicas, "selector": {}, "template": {},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}},
        }))
        .unwrap()
    }

    #[test]
    fn percentages_round_as_upstream() {
        // Surge rounds up, unavailability down.
        assert_eq!(fenceposts(&deployment(10, json!("25%"), json!("25%")), 10), (3, 2));
        assert_eq!(fenceposts(&deployment(3, json!("10%"), json!("10%")), 3), (1, 0));
        assert_eq!(fenceposts(&deployment(3, json!(0), json!(0)), 3), (0, 1));
        assert_eq!(fenceposts(&deployment(4, json!(2), json!("50%")), 4), (2, 2));
        assert_eq!(max_unavailable(&deployment(2, json!(0), json!(5))), 2, "capped at replicas");
        assert_eq!(max_unavailable(&deployment(0, json!(1), json!(1))), 0);
    }

    #[test]
    fn new_replica_set_grows_within_surge() {
        let d = deployment(10, json!(3), json!(0));
        let rs = |n: i32| -> ReplicaSet {
            serde_json::from_value(json!({"spec": {"replicas": n, "selector": {}}})).unwrap()
        };
        let (old, new) = (rs(10), rs(0));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 3);
        let (old, new) = (rs(8), rs(5));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 5, "13 pods already: no room");
        let (old, new) = (rs(1), rs(9));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 10, "never past replicas");
    }

    #[test]
    fn proportional_shares_follow_max_replicas() {
        let d = deployment(20, json!(3), json!(0));
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"annotations": {MAX_REPLICAS: "13"}}, "spec": {"replicas": 5, "selector": {}}
        }))
        .unwrap();
        // 5 of 13 → round(5 * 23 / 13) = 9: four more.
        assert_eq!(proportion(&rs, &d, 10, 0), 4);
        assert_eq!(proportion(&rs, &d, 3, 0), 3, "no more than is left to add");
    }

    #[test]
    fn scaling_mid_rollout_spreads_by_share() {
        // 10 replicas, surge 3: old 8 + new 5 = 13 = max; scaled to 20 → max 23.
        let d = deployment(20, json!(3), json!(0));
        let rs = |name: &str, n: i32, at: &str| -> ReplicaSet {
            serde_json::from_value(json!({
                "metadata": {"name": name, "creationTimestamp": at, "annotations": {MAX_REPLICAS: "13"}},
                "spec": {"replicas": n, "selector": {}}
            }))
            .unwrap()
        };
        let (old, new) = (rs("old", 8, "2026-01-01T00:00:00Z"), rs("new", 5, "2026-01-01T00:01:00Z"));
        let (order, sizes, op) = proportional_sizes(&d, &[&old, &new]);
        assert_eq!(op, "up");
        assert_eq!(order, [0, 1], "larger first");
        // old: round(8*23/13)=14, new: round(5*23/13)=9 → 23.
        assert_eq!(sizes, [14, 9]);
        let d = deployment(5, json!(3), json!(0));
        let (_, sizes, op) = proportional_sizes(&d, &[&old, &new]);
        assert_eq!(op, "down");
        assert_eq!(sizes.iter().sum::<i32>(), 8, "5 + surge 3");
    }

    #[test]
    fn hash_is_stable_and_moves_with_collisions() {
        let t: PodTemplateSpec = serde_json::from_value(json!({"metadata": {"labels": {"app": "a"}}})).unwrap();
        let h = template_hash(&t, None);
        assert_eq!(h, template_hash(&t, None));
        assert_ne!(h, template_hash(&t, Some(1)));
        assert!(h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        let mut labelled = t.clone();
        labelled.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert(HASH_LABEL.into(), h);
        assert!(equal_ignore_hash(&t, &labelled));
    }
}
