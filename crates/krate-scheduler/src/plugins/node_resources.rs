//! NodeResourcesFit (filter and score by strategy) and NodeResourcesBalancedAllocation.

use super::{Failure, FilterResult, MAX_NODE_SCORE};
use crate::node_info::{NodeInfo, PodInfo};
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY};

pub const TOO_MANY_PODS: &str = "Too many pods";

/// Whether the node has room for the pod's requests and one more pod.
pub fn fit(pod: &PodInfo, node: &NodeInfo) -> FilterResult {
    let mut failure = Failure { reasons: Vec::new(), unresolvable: false };
    if node.pods.len() as i64 + 1 > node.allocatable.allowed_pods {
        failure.reasons.push(TOO_MANY_PODS.into());
    }
    let req = &pod.requests;
    let (alloc, used) = (&node.allocatable, &node.requested);
    let mut check = |name: &str, want: i64, have: i64, used: i64| {
        if want > 0 && want > have - used {
            failure.reasons.push(format!("Insufficient {name}").into());
            // More than the node has at all: no preemption makes room.
            failure.unresolvable |= want > have;
        }
    };
    check(CPU, req.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    check(MEMORY, req.memory, alloc.memory, used.memory);
    check(EPHEMERAL_STORAGE, req.ephemeral_storage, alloc.ephemeral_storage, used.ephemeral_storage);
    for (name, want) in &req.scalar {
        check(name, *want, alloc.get(name), used.get(name));
    }
    if failure.reasons.is_empty() { Ok(()) } else { Err(failure) }
}

/// NodeResourcesFit's scoring strategy (KubeSchedulerConfiguration's scoringStrategy).
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// Shape points (utilization 0..=100, score 0..=10), ascending by utilization.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scoring {
    pub strategy: Strategy,
    /// (resource, weight)
    pub resources: Vec<(String, i64)>,
}

impl Default for Scoring {
    fn default() -> Self {
        Scoring { strategy: Strategy::LeastAllocated, resources: vec![(CPU.into(), 1), (MEMORY.into(), 1)] }
    }
}

/// (requested with the pod, allocatable) of one resource on a node; cpu and memory
/// count the non-zero defaults as upstream's scoring does.
fn requested_and_allocatable(pod: &PodInfo, node: &NodeInfo, name: &str, non_zero: bool) -> (i64, i64) {
    let alloc = node.allocatable.get(name);
    let requested = match name {
        CPU if non_zero => node.non_zero_cpu + pod.non_zero_cpu,
        MEMORY if non_zero => node.non_zero_memory + pod.non_zero_memory,
        _ => node.requested.get(name) + pod.requests.get(name),
    };
    (requested, alloc)
}

fn broken_linear(shape: &[(i64, i64)], utilization: i64) -> i64 {
    let Some(first) = shape.first() else { return 0 };
    if utilization <= first.0 {
        return first.1 * 10;
    }
    for pair in shape.windows(2) {
        let ((u0, s0), (u1, s1)) = (pair[0], pair[1]);
        if utilization <= u1 {
            return (s0 * 10) + (s1 - s0) * 10 * (utilization - u0) / (u1 - u0).max(1);
        }
    }
    shape.last().map_or(0, |l| l.1 * 10)
}

pub fn score(scoring: &Scoring, pod: &PodInfo, node: &NodeInfo) -> i64 {
    let (mut total, mut weights) = (0i64, 0i64);
    for (name, weight) in &scoring.resources {
        let is_extended = name != CPU && name != MEMORY && name != EPHEMERAL_STORAGE;
        if is_extended && pod.requests.get(name) == 0 {
            continue;
        }
        let (requested, alloc) = requested_and_allocatable(pod, node, name, true);
        if alloc == 0 {
            continue;
        }
        let s = match &scoring.strategy {
            Strategy::LeastAllocated if requested > alloc => 0,
            Strategy::LeastAllocated => (alloc - requested) * MAX_NODE_SCORE / alloc,
            Strategy::MostAllocated => requested.min(alloc) * MAX_NODE_SCORE / alloc,
            Strategy::RequestedToCapacityRatio(shape) => {
                broken_linear(shape, requested.min(alloc) * MAX_NODE_SCORE / alloc)
            }
        };
        total += s * weight;
        weights += weight;
    }
    if weights == 0 {
        return 0;
    }
    match scoring.strategy {
        Strategy::RequestedToCapacityRatio(_) => (total as f64 / weights as f64).round() as i64,
        _ => total / weights,
    }
}

/// NodeResourcesBalancedAllocation: nodes whose cpu and memory use stay even score higher.
pub fn balanced(pod: &PodInfo, node: &NodeInfo) -> i64 {
    let mut fractions = Vec::with_capacity(2);
    for name in [CPU, MEMORY] {
        let (requested, alloc) = requested_and_allocatable(pod, node, name, false);
        if alloc > 0 {
            fractions.push((requested as f64 / alloc as f64).min(1.0));
        }
    }
    let std = match fractions.as_slice() {
        [a, b] => (a - b).abs() / 2.0,
        [] | [_] => 0.0,
        all => {
            let mean = all.iter().sum::<f64>() / all.len() as f64;
            (all.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / all.len() as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    fn node(cpu: &str, memory: &str, pods: &str) -> NodeInfo {
        let mut info = NodeInfo::empty("n");
        info.set_node(Arc::new(
            serde_json::from_value::<Node>(json!({"metadata": {"name": "n"},
                "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, "example.com/gpu": "2"}}}))
            .unwrap(),
        ));
        info
    }

    fn pod(uid: &str, requests: serde_json::Value) -> PodInfo {
        PodInfo::new(Arc::new(
            serde_json::from_value::<Pod>(json!({"metadata": {"name": uid, "uid": uid},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": requests}}]}}))
            .unwrap(),
        ))
    }

    #[test]
    fn fit_reports_every_insufficient_resource() {
        let mut n = node("2", "4Gi", "2");
        n.add_pod(Arc::new(pod("a", json!({"cpu": "1500m", "memory": "1Gi"}))));
        assert!(fit(&pod("b", json!({"cpu": "500m"})), &n).is_ok());
        let err = fit(&pod("b", json!({"cpu": "1", "memory": "4Gi", "example.com/gpu": "3"})), &n).unwrap_err();
        assert_eq!(err.reasons, ["Insufficient cpu", "Insufficient memory", "Insufficient example.com/gpu"]);
        assert!(err.unresolvable, "3 gpus exceed the node's 2");
        n.add_pod(Arc::new(pod("c", json!({}))));
        assert_eq!(fit(&pod("d", json!({})), &n).unwrap_err().reasons, [TOO_MANY_PODS]);
    }

    #[test]
    fn strategies() {
        let mut n = node("4", "8Gi", "10");
        n.add_pod(Arc::new(pod("a", json!({"cpu": "1", "memory": "2Gi"}))));
        let p = pod("b", json!({"cpu": "1", "memory": "2Gi"}));
        // Half of cpu and memory used with the pod.
        assert_eq!(score(&Scoring::default(), &p, &n), 50);
        let most = Scoring { strategy: Strategy::MostAllocated, ..Default::default() };
        assert_eq!(score(&most, &p, &n), 50);
        let ratio =
            Scoring { strategy: Strategy::RequestedToCapacityRatio(vec![(0, 0), (100, 10)]), ..Default::default() };
        assert_eq!(score(&ratio, &p, &n), 50);
        let ratio =
            Scoring { strategy: Strategy::RequestedToCapacityRatio(vec![(0, 10), (100, 0)]), ..Default::default() };
        assert_eq!(score(&ratio, &pod("c", json!({"cpu": "3", "memory": "6Gi"})), &n), 0);
        assert_eq!(balanced(&p, &n), 100);
        assert_eq!(balanced(&pod("c", json!({"cpu": "3"})), &n), 62, "cpu 100%, memory 25%: std 0.375");
    }
}
