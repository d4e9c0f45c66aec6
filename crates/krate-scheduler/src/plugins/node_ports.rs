//! NodePorts: a host port can be taken once per address and protocol on a node.

use super::{Failure, FilterResult};
use crate::node_info::{NodeInfo, PodInfo};

pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub fn filter(pod: &PodInfo, node: &NodeInfo) -> FilterResult {
    let conflict = pod.host_ports.iter().any(|want| node.used_ports.iter().any(|used| used.conflicts(want)));
    if conflict { Err(Failure::unschedulable(REASON)) } else { Ok(()) }
}
