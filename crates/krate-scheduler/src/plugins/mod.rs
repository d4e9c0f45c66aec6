//! The framework's plugins, as upstream names them. Each is a set of pure functions over
//! a prepared pod and precomputed node information, so they test without a cluster.

use std::borrow::Cow;

pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod taint_toleration;
pub mod topology_spread;

pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
pub const NODE_NAME: &str = "NodeName";
pub const TAINT_TOLERATION: &str = "TaintToleration";
pub const NODE_AFFINITY: &str = "NodeAffinity";
pub const NODE_PORTS: &str = "NodePorts";
pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
pub const BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
pub const IMAGE_LOCALITY: &str = "ImageLocality";
pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";
pub const SCHEDULING_GATES: &str = "SchedulingGates";

pub const MAX_NODE_SCORE: i64 = 100;

/// Why a node does not fit: upstream's reasons, and whether preemption could change that.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub reasons: Vec<Cow<'static, str>>,
    /// UnschedulableAndUnresolvable: removing pods from the node would not help.
    pub unresolvable: bool,
}

impl Failure {
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Failure {
        Failure { reasons: vec![reason.into()], unresolvable: false }
    }

    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Failure {
        Failure { reasons: vec![reason.into()], unresolvable: true }
    }
}

pub type FilterResult = Result<(), Failure>;

/// Upstream's DefaultNormalizeScore: scales to 0..=100 by the highest score, reversed
/// when lower raw scores are better.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}
