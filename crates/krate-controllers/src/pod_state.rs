//! What workload controllers read from a pod (upstream's podutil and controller utils):
//! activity, readiness, availability after minReadySeconds, and the order in which
//! surplus pods are deleted.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Counts toward replicas: not finished and not being deleted.
pub fn is_active(pod: &Pod) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && pod.metadata.deletion_timestamp.is_none()
}

/// Being deleted but not finished (upstream's terminating replicas).
pub fn is_terminating(pod: &Pod) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && pod.metadata.deletion_timestamp.is_some()
}

/// When the pod became Ready, if it is Ready.
pub fn ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let ready = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?;
    (ready.status == "True").then(|| ready.last_transition_time.as_ref().map(|t| t.0))
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Ready for at least `min_ready_seconds` at `now` (upstream's IsPodAvailable).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => since + Duration::from_secs(min_ready_seconds as u64) < now,
    }
}

/// How long until a Ready but not yet available pod becomes available.
pub fn until_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> Option<Duration> {
    let since = ready_since(pod)??;
    let at = since + Duration::from_secs(min_ready_seconds.max(0) as u64);
    let nanos = at.as_nanosecond() - now.as_nanosecond();
    (nanos >= 0).then(|| Duration::from_nanos(nanos as u64) + Duration::from_millis(10))
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(DELETION_COST)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn max_restarts(pod: &Pod) -> i32 {
    let s = pod.status.as_ref();
    let containers = s.and_then(|s| s.container_statuses.as_ref()).into_iter().flatten();
    let init = s.and_then(|s| s.init_container_statuses.as_ref()).into_iter().flatten();
    containers.chain(init).map(|c| c.restart_count).max().unwrap_or(0)
}

/// log2 of the age bucket as upstream's LogarithmicScaleDown compares them (-1 if not past).
fn log_rank(t: Timestamp, now: Timestamp) -> i64 {
    let d = now.as_nanosecond() - t.as_nanosecond();
    if d > 0 { (d as f64).log2() as i64 } else { -1 }
}

/// Newer (or unknown) first, comparing ages on a logarithmic scale, then by uid.
fn newer_first(a: Option<Timestamp>, b: Option<Timestamp>, ua: &str, ub: &str, now: Timestamp) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) if a == b => Ordering::Equal,
        (Some(a), Some(b)) => match log_rank(a, now).cmp(&log_rank(b, now)) {
            Ordering::Equal => ua.cmp(ub),
            o => o,
        },
    }
}

/// Upstream's ActivePodsWithRanks order: the pods to delete first come first. `rank` is
/// how many related active pods share the pod's node.
pub fn deletion_order(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize, now: Timestamp) -> Ordering {
    let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let (na, nb) = (node(a), node(b));
    let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() { Ordering::Less } else { Ordering::Greater };
    }
    let cmp = phase_ordinal(a).cmp(&phase_ordinal(b));
    if cmp != Ordering::Equal {
        return cmp;
    }
    if is_ready(a) != is_ready(b) {
        return if is_ready(a) { Ordering::Greater } else { Ordering::Less };
    }
    let cmp = deletion_cost(a).cmp(&deletion_cost(b));
    if cmp != Ordering::Equal {
        return cmp;
    }
    if rank_a != rank_b {
        return rank_b.cmp(&rank_a);
    }
    if let (Some(ra), Some(rb)) = (ready_since(a), ready_since(b)) {
        let cmp = newer_first(ra, rb, &uid(a), &uid(b), now);
        if cmp != Ordering::Equal {
            return cmp;
        }
    }
    let cmp = max_restarts(b).cmp(&max_restarts(a));
    if cmp != Ordering::Equal {
        return cmp;
    }
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    newer_first(created(a), created(b), &uid(a), &uid(b), now)
}

/// The `count` pods of `pods` to delete first; `related` (active pods of the same
/// controller family) rank pods doubled up on a node.
pub fn to_delete<'a>(pods: &[&'a Pod], related: &[&Pod], count: usize, now: Timestamp) -> Vec<&'a Pod> {
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in related.iter().filter(|p| is_active(p)) {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            *on_node.entry(n).or_default() += 1;
        }
    }
    let rank = |p: &Pod| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()).and_then(|n| on_node.get(n)).copied().unwrap_or(0)
    };
    let mut ranked: Vec<(&Pod, usize)> = pods.iter().map(|p| (*p, rank(p))).collect();
    ranked.sort_by(|(a, ra), (b, rb)| deletion_order(a, *ra, b, *rb, now));
    ranked.into_iter().take(count).map(|(p, _)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, ready_at: Option<&str>, created: &str) -> Pod {
        let mut conditions = vec![];
        if let Some(at) = ready_at {
            conditions.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": at}));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn surplus_pods_are_deleted_in_upstreams_order() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let unassigned = pod("unassigned", "", "Pending", None, "2026-01-01T10:00:00Z");
        let pending = pod("pending", "n1", "Pending", None, "2026-01-01T10:00:00Z");
        let not_ready = pod("not-ready", "n1", "Running", None, "2026-01-01T10:00:00Z");
        let new_ready = pod("new-ready", "n2", "Running", Some("2026-01-01T11:59:50Z"), "2026-01-01T10:00:00Z");
        let old_ready = pod("old-ready", "n3", "Running", Some("2026-01-01T08:00:00Z"), "2026-01-01T07:00:00Z");
        let all = [&old_ready, &new_ready, &not_ready, &pending, &unassigned];
        let order: Vec<_> = to_delete(&all, &all, 5, now).iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(order, ["unassigned", "pending", "not-ready", "new-ready", "old-ready"]);
    }

    #[test]
    fn doubled_up_pods_and_low_deletion_cost_go_first() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let at = Some("2026-01-01T08:00:00Z");
        let alone = pod("alone", "n1", "Running", at, "2026-01-01T07:00:00Z");
        let doubled = pod("doubled", "n2", "Running", at, "2026-01-01T07:00:00Z");
        let neighbour = pod("neighbour", "n2", "Running", at, "2026-01-01T07:00:00Z");
        let all = [&alone, &doubled, &neighbour];
        assert_eq!(to_delete(&[&alone, &doubled], &all, 1, now)[0].metadata.name.as_deref(), Some("doubled"));
        let mut cheap = alone.clone();
        cheap.metadata.annotations = Some([(DELETION_COST.to_string(), "-10".to_string())].into());
        assert_eq!(to_delete(&[&cheap, &doubled], &all, 1, now)[0].metadata.name.as_deref(), Some("alone"));
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let p = pod("p", "n", "Running", Some("2026-01-01T11:59:55Z"), "2026-01-01T11:00:00Z");
        assert!(is_available(&p, 0, now));
        assert!(!is_available(&p, 10, now));
        assert!(is_available(&p, 4, now));
        assert!(until_available(&p, 10, now).unwrap() > Duration::from_secs(4));
    }
}
