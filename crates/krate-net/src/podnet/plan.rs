//! Route planning, pure: Nodes → the routes wanted (every other node's podCIDR via its
//! InternalIP), and those against the kernel's → what to replace and delete.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;

use super::config::PodNetConfig;
use crate::proxy::Ipv4Cidr;

/// Where one node's pods are reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTarget {
    pub gateway: Ipv4Addr,
    pub node: String,
}

/// A node that gets no route, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub node: String,
    pub reason: String,
}

/// What the Nodes ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    /// This node's own podCIDR, when it has one.
    pub own_pod_cidr: Option<Ipv4Cidr>,
    /// The other nodes' podCIDRs and where they are.
    pub routes: BTreeMap<Ipv4Cidr, RouteTarget>,
    /// Other nodes left out, by name.
    pub skipped: Vec<Skipped>,
}

/// The routes with our protocol in the kernel's main table, and the destinations
/// other routes (not ours) already take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelRoutes {
    pub ours: BTreeMap<Ipv4Cidr, Option<Ipv4Addr>>,
    pub foreign: BTreeSet<Ipv4Cidr>,
}

/// What one sync changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutePlan {
    /// New routes and routes whose gateway changed (`ip route replace`).
    pub replace: Vec<(Ipv4Cidr, RouteTarget)>,
    /// Our routes nothing asks for any more.
    pub delete: Vec<Ipv4Cidr>,
    /// Wanted routes left out because a route we do not own has that destination.
    pub conflicts: Vec<(Ipv4Cidr, RouteTarget)>,
}

impl RoutePlan {
    pub fn is_empty(&self) -> bool {
        self.replace.is_empty() && self.delete.is_empty()
    }
}

/// The node's IPv4 podCIDR: the first IPv4 one of `spec.podCIDRs`, else
/// `spec.podCIDR`. Err when one is set but none parses.
pub fn pod_cidr(node: &Node) -> Result<Option<Ipv4Cidr>, String> {
    let Some(spec) = &node.spec else { return Ok(None) };
    let all: Vec<&String> = spec.pod_cidrs.iter().flatten().chain(spec.pod_cidr.iter()).collect();
    if all.is_empty() {
        return Ok(None);
    }
    for cidr in &all {
        // IPv6 ranges of dual-stack nodes are not ours to route.
        if !cidr.contains(':')
            && let Ok(parsed) = cidr.parse::<Ipv4Cidr>()
        {
            return Ok(Some(parsed));
        }
    }
    if all.iter().all(|c| c.contains(':')) {
        return Ok(None);
    }
    Err(format!("podCIDR {:?} is not an IPv4 CIDR", all[0]))
}

/// The node's first IPv4 InternalIP.
pub fn internal_ip(node: &Node) -> Option<Ipv4Addr> {
    let addresses = node.status.as_ref()?.addresses.as_ref()?;
    addresses.iter().filter(|a| a.type_ == "InternalIP").find_map(|a| a.address.parse().ok())
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) }
}

/// Whether `outer` contains all of `inner`.
pub fn covers(outer: &Ipv4Cidr, inner: &Ipv4Cidr) -> bool {
    outer.prefix <= inner.prefix && u32::from(inner.addr) & mask(outer.prefix) == u32::from(outer.addr)
}

/// Whether the two networks share any address.
pub fn overlap(a: &Ipv4Cidr, b: &Ipv4Cidr) -> bool {
    covers(a, b) || covers(b, a)
}

/// The routes the Nodes ask for on this node. Other nodes are left out when they have
/// no podCIDR or InternalIP yet, when the podCIDR is outside the cluster CIDR (a route
/// for any network would be a hazard), overlaps this node's own, or overlaps one an
/// earlier node (by name) already has.
pub fn desired<'a>(nodes: impl IntoIterator<Item = &'a Node>, config: &PodNetConfig) -> Desired {
    let mut nodes: Vec<&Node> = nodes.into_iter().collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut out = Desired::default();
    let own = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(config.node_name.as_str()));
    if let Some(own) = own {
        match pod_cidr(own) {
            Ok(cidr) => out.own_pod_cidr = cidr,
            Err(reason) => out.skipped.push(Skipped { node: config.node_name.clone(), reason }),
        }
    }
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        if name == config.node_name {
            continue;
        }
        let mut skip = |reason: String| out.skipped.push(Skipped { node: name.clone(), reason });
        let cidr = match pod_cidr(node) {
            Ok(Some(cidr)) => cidr,
            Ok(None) => {
                skip("no IPv4 podCIDR".into());
                continue;
            }
            Err(reason) => {
                skip(reason);
                continue;
            }
        };
        let Some(gateway) = internal_ip(node) else {
            skip("no IPv4 InternalIP address".into());
            continue;
        };
        if !covers(&config.cluster_cidr, &cidr) {
            skip(format!("podCIDR {cidr} is outside the cluster CIDR {}", config.cluster_cidr));
            continue;
        }
        if let Some(own) = out.own_pod_cidr.filter(|own| overlap(own, &cidr)) {
            skip(format!("podCIDR {cidr} overlaps this node's own {own}"));
            continue;
        }
        if let Some((taken, by)) = out.routes.iter().find(|(c, _)| overlap(c, &cidr)) {
            let reason = format!("podCIDR {cidr} overlaps {taken} of node {}", by.node);
            skip(reason);
            continue;
        }
        out.routes.insert(cidr, RouteTarget { gateway, node: name });
    }
    out
}

/// What to change in the kernel to get `desired`.
pub fn plan(desired: &BTreeMap<Ipv4Cidr, RouteTarget>, kernel: &KernelRoutes) -> RoutePlan {
    let mut out = RoutePlan::default();
    for (cidr, target) in desired {
        if kernel.ours.get(cidr) == Some(&Some(target.gateway)) {
            continue;
        }
        if kernel.foreign.contains(cidr) {
            out.conflicts.push((*cidr, target.clone()));
        } else {
            out.replace.push((*cidr, target.clone()));
        }
    }
    // A conflicting route of ours (one was added beside a foreign one) goes too.
    out.delete = kernel
        .ours
        .keys()
        .filter(|c| !desired.contains_key(c) || out.conflicts.iter().any(|(x, _)| x == *c))
        .copied()
        .collect();
    out
}
