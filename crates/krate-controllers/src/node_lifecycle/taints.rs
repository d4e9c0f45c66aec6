//! The taints a node should carry for its conditions, and how fast NoExecute taints may
//! be added in a zone (upstream's zone states and eviction rates).

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// The taint keys this controller owns; others on the node are left as they are.
const MANAGED: [&str; 7] =
    [NOT_READY, UNREACHABLE, UNSCHEDULABLE, MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE, NETWORK_UNAVAILABLE];

/// Upstream's --unhealthy-zone-threshold, --large-cluster-size-threshold and
/// --secondary-node-eviction-rate.
pub const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;
pub const LARGE_CLUSTER_SIZE: usize = 50;
pub const SECONDARY_EVICTION_RATE: f64 = 0.01;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneState {
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// Upstream's ComputeZoneState.
pub fn zone_state(ready: usize, not_ready: usize) -> ZoneState {
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / (ready + not_ready) as f64 >= UNHEALTHY_ZONE_THRESHOLD {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// NoExecute taints per second in a zone: the normal rate, a trickle (or nothing, in
/// small clusters) in a partially disrupted zone, nothing while every zone is down
/// (then the control plane is more likely cut off than every node dead).
pub fn eviction_rate(state: ZoneState, all_zones_down: bool, zone_size: usize, rate: f64) -> f64 {
    if all_zones_down {
        return 0.0;
    }
    match state {
        ZoneState::Normal | ZoneState::FullDisruption => rate,
        ZoneState::PartialDisruption if zone_size > LARGE_CLUSTER_SIZE => SECONDARY_EVICTION_RATE,
        ZoneState::PartialDisruption => 0.0,
    }
}

/// The NoExecute taint a Ready status calls for.
pub fn no_execute_key(ready: &str) -> Option<&'static str> {
    match ready {
        "False" => Some(NOT_READY),
        "True" => None,
        _ => Some(UNREACHABLE),
    }
}

pub fn has(taints: &[Taint], key: &str, effect: &str) -> bool {
    taints.iter().any(|t| t.key == key && t.effect == effect)
}

fn condition_status<'a>(node: &'a Node, type_: &str) -> Option<&'a str> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

/// The node's taints as they should be: those of others kept in place, NoSchedule taints
/// for its conditions and spec.unschedulable, and `no_execute` (the key decided by the
/// caller, which rate-limits it) — keeping timeAdded of taints already there.
pub fn desired(node: &Node, ready: &str, no_execute: Option<&str>, now: Timestamp) -> Vec<Taint> {
    let existing = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let mut out: Vec<Taint> = existing.iter().filter(|t| !MANAGED.contains(&t.key.as_str())).cloned().collect();
    let mut no_schedule: Vec<&str> = Vec::new();
    match ready {
        "True" => {}
        "False" => no_schedule.push(NOT_READY),
        _ => no_schedule.push(UNREACHABLE),
    }
    for (condition, key) in [
        ("MemoryPressure", MEMORY_PRESSURE),
        ("DiskPressure", DISK_PRESSURE),
        ("PIDPressure", PID_PRESSURE),
        ("NetworkUnavailable", NETWORK_UNAVAILABLE),
    ] {
        if condition_status(node, condition) == Some("True") {
            no_schedule.push(key);
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        no_schedule.push(UNSCHEDULABLE);
    }
    let keep_or_new = |key: &str, effect: &str, time: Option<Time>| {
        existing.iter().find(|t| t.key == key && t.effect == effect).cloned().unwrap_or(Taint {
            key: key.into(),
            effect: effect.into(),
            time_added: time,
            value: None,
        })
    };
    for key in no_schedule {
        out.push(keep_or_new(key, "NoSchedule", None));
    }
    if let Some(key) = no_execute {
        // Times are stored to the second; a finer one would never compare equal.
        let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
        out.push(keep_or_new(key, "NoExecute", Some(Time(now))));
    }
    // Keep the order stable so an unchanged node compares equal.
    let position =
        |t: &Taint| existing.iter().position(|e| e.key == t.key && e.effect == t.effect).unwrap_or(usize::MAX);
    out.sort_by_key(position);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: &str, unschedulable: bool, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"},
            "spec": {"unschedulable": unschedulable, "taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready},
                {"type": "MemoryPressure", "status": "True"}]}}))
        .unwrap()
    }

    #[test]
    fn zone_states_follow_upstream_thresholds() {
        assert_eq!(zone_state(0, 3), ZoneState::FullDisruption);
        assert_eq!(zone_state(2, 3), ZoneState::PartialDisruption);
        assert_eq!(zone_state(2, 2), ZoneState::Normal); // not more than 2 not ready
        assert_eq!(zone_state(10, 3), ZoneState::Normal);
        assert_eq!(eviction_rate(ZoneState::PartialDisruption, false, 10, 0.1), 0.0);
        assert_eq!(eviction_rate(ZoneState::PartialDisruption, false, 100, 0.1), SECONDARY_EVICTION_RATE);
        assert_eq!(eviction_rate(ZoneState::FullDisruption, false, 3, 0.1), 0.1);
        assert_eq!(eviction_rate(ZoneState::FullDisruption, true, 3, 0.1), 0.0);
    }

    #[test]
    fn taints_follow_conditions_and_keep_foreign_ones() {
        let now = Timestamp::now();
        let n = node("Unknown", true, json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]));
        let taints = desired(&n, "Unknown", no_execute_key("Unknown"), now);
        let keys: Vec<(&str, &str)> = taints.iter().map(|t| (t.key.as_str(), t.effect.as_str())).collect();
        assert!(keys.contains(&("dedicated", "NoSchedule")));
        assert!(keys.contains(&(UNREACHABLE, "NoSchedule")));
        assert!(keys.contains(&(UNREACHABLE, "NoExecute")));
        assert!(keys.contains(&(MEMORY_PRESSURE, "NoSchedule")));
        assert!(keys.contains(&(UNSCHEDULABLE, "NoSchedule")));
        assert!(taints.iter().find(|t| t.effect == "NoExecute").unwrap().time_added.is_some());

        // Healthy again: only the foreign taint and the condition ones stay.
        let back = node("True", false, serde_json::to_value(&taints).unwrap());
        let taints = desired(&back, "True", None, now);
        let keys: Vec<&str> = taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, vec!["dedicated", MEMORY_PRESSURE]);
    }

    #[test]
    fn an_unchanged_node_keeps_its_taints_as_they_are() {
        let now = Timestamp::now();
        let n = node("False", false, json!([]));
        let once = desired(&n, "False", Some(NOT_READY), now);
        let tainted = node("False", false, serde_json::to_value(&once).unwrap());
        assert_eq!(desired(&tainted, "False", Some(NOT_READY), Timestamp::now()), once);
    }
}
