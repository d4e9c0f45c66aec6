//! Which endpoints a service port's traffic may go to from this node, by traffic
//! policy, as upstream's CategorizeEndpoints (without topology hints): ready endpoints,
//! or if there are none, serving-and-terminating ones, chosen separately for the
//! cluster-wide and the node-local lists.

use super::snapshot::{Endpoint, ServicePort};

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Categorized {
    /// Endpoints for the Cluster policy (empty if the port never uses it).
    pub cluster: Vec<Endpoint>,
    /// This node's endpoints for the Local policy (empty if the port never uses it).
    pub local: Vec<Endpoint>,
    /// The union of both: the endpoints this node needs chains for.
    pub reachable: Vec<Endpoint>,
    /// Whether any endpoint anywhere can take traffic (even if none here can).
    pub any: bool,
}

fn usable_fallback(ep: &Endpoint) -> bool {
    ep.serving && ep.terminating
}

pub fn categorize(endpoints: &[Endpoint], port: &ServicePort) -> Categorized {
    let mut out = Categorized::default();
    if port.uses_cluster_endpoints() {
        out.cluster = endpoints.iter().filter(|ep| ep.ready).copied().collect();
        if out.cluster.is_empty() {
            // Rather than drop connections while every pod drains.
            out.cluster = endpoints.iter().filter(|ep| usable_fallback(ep)).copied().collect();
        }
        out.any = !out.cluster.is_empty();
    }
    if !port.uses_local_endpoints() {
        out.reachable = out.cluster.clone();
        return out;
    }
    out.any |= endpoints.iter().any(|ep| ep.ready || usable_fallback(ep));
    let local_ready: Vec<Endpoint> = endpoints.iter().filter(|ep| ep.local && ep.ready).copied().collect();
    out.local = if local_ready.is_empty() {
        endpoints.iter().filter(|ep| ep.local && usable_fallback(ep)).copied().collect()
    } else {
        local_ready
    };
    // The local list may hold terminating endpoints the cluster list lacks.
    out.reachable = out.cluster.clone();
    for ep in &out.local {
        if !out.reachable.iter().any(|r| (r.ip, r.port) == (ep.ip, ep.port)) {
            out.reachable.push(*ep);
        }
    }
    out.reachable.sort_by_key(|ep| (ep.ip, ep.port));
    out
}
