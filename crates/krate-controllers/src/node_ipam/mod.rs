//! Node IPAM (upstream's node-ipam-controller with the RangeAllocator, acting as
//! node-controller as upstream's does): every node gets a podCIDR from each cluster CIDR
//! (one per IP family when dual-stack), set once in spec.podCIDR/podCIDRs, and given
//! back when the node is deleted. When a cluster CIDR is used up the node gets a
//! CIDRNotAvailable event.

pub mod cidr_set;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::{Context, Settings};
use cidr_set::{Cidr, CidrError, CidrSet};

const NAME: &str = "node-ipam";

/// One CidrSet per configured cluster CIDR, each with its family's node mask size, the
/// service CIDRs kept out.
pub fn cidr_sets(settings: &Settings) -> Result<Vec<CidrSet>, CidrError> {
    let services = settings
        .service_cidrs
        .iter()
        .filter(|c| !c.trim().is_empty())
        .map(|c| Cidr::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    settings
        .cluster_cidrs
        .iter()
        .filter(|c| !c.trim().is_empty())
        .map(|c| {
            let cidr = Cidr::parse(c)?;
            let size =
                if cidr.is_ipv6() { settings.node_cidr_mask_size_ipv6 } else { settings.node_cidr_mask_size_ipv4 };
            let mut set = CidrSet::new(cidr, size)?;
            for service in &services {
                set.reserve(service);
            }
            Ok(set)
        })
        .collect()
}

pub fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let list: Vec<String> = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
    if !list.is_empty() {
        return list;
    }
    spec.and_then(|s| s.pod_cidr.clone()).filter(|c| !c.is_empty()).into_iter().collect()
}

struct Allocator {
    sets: Vec<CidrSet>,
    /// What each node holds (allocated by us or found on it).
    held: HashMap<String, Vec<Cidr>>,
}

impl Allocator {
    fn occupy(&mut self, node: &str, cidrs: &[String]) {
        let mut held = Vec::new();
        for c in cidrs {
            let Ok(cidr) = Cidr::parse(c) else { continue };
            // A CIDR outside every cluster CIDR (set by hand) is the node's business.
            if self.sets.iter_mut().any(|s| s.occupy(&cidr).is_ok()) {
                held.push(cidr);
            }
        }
        self.held.insert(node.to_string(), held);
    }

    fn release(&mut self, node: &str) {
        for cidr in self.held.remove(node).unwrap_or_default() {
            for set in &mut self.sets {
                let _ = set.release(&cidr);
            }
        }
    }

    /// One node CIDR from every cluster CIDR, or None (with nothing taken) if any is full.
    fn allocate(&mut self, node: &str) -> Option<Vec<Cidr>> {
        let mut got = Vec::new();
        for i in 0..self.sets.len() {
            match self.sets[i].allocate() {
                Some(c) => got.push(c),
                None => {
                    for (set, c) in self.sets.iter_mut().zip(&got) {
                        let _ = set.release(c);
                    }
                    return None;
                }
            }
        }
        self.held.insert(node.to_string(), got.clone());
        Some(got)
    }
}

pub async fn run(ctx: Context) {
    let sets = match cidr_sets(&ctx.settings) {
        Ok(sets) if !sets.is_empty() => sets,
        Ok(_) => return tracing::info!(controller = NAME, "no --cluster-cidr; not allocating node CIDRs"),
        Err(error) => {
            return tracing::error!(controller = NAME, %error, "bad --cluster-cidr; not allocating node CIDRs");
        }
    };
    let clients = (ctx.client_for)("node-controller");
    let nodes = ctx.informers.get::<Node>();
    nodes.ready().await;
    let store = nodes.store();
    let api: Api<Node> = Api::all(clients.write.clone());
    let recorder = Recorder::new(clients.write, Reporter { controller: "node-controller".into(), instance: None });
    let mut allocator = Allocator { sets, held: HashMap::new() };
    // Everything nodes hold already is taken before anything is handed out.
    for node in store.state() {
        allocator.occupy(&node.name_any(), &pod_cidrs(&node));
    }
    let mut changes = nodes.subscribe();
    while let Some(node) = changes.next().await {
        let name = node.name_any();
        let current = store.get(&ObjectRef::new(&name));
        let Some(current) = current.filter(|c| c.metadata.uid == node.metadata.uid) else {
            // Deleted (or replaced by a new node of the same name, which comes next).
            if store.get(&ObjectRef::new(&name)).is_none() {
                allocator.release(&name);
                // Nodes left waiting for a free CIDR may have one now.
                for waiting in store.state() {
                    let wname = waiting.name_any();
                    if pod_cidrs(&waiting).is_empty() && allocator.held.get(&wname).is_none_or(|h| h.is_empty()) {
                        let result = assign(&api, &recorder, &mut allocator, &waiting).await;
                        crate::metrics::record(NAME, result);
                    }
                }
            }
            continue;
        };
        let existing = pod_cidrs(&current);
        if !existing.is_empty() {
            allocator.occupy(&name, &existing);
            continue;
        }
        if allocator.held.get(&name).is_some_and(|h| !h.is_empty()) {
            continue; // Ours, on its way into the informer.
        }
        let result = assign(&api, &recorder, &mut allocator, &current).await;
        crate::metrics::record(NAME, result);
    }
}

/// Gives the node its CIDRs; false if none were free or the write failed (retried on
/// the node's next change or by a later pass).
async fn assign(api: &Api<Node>, recorder: &Recorder, allocator: &mut Allocator, node: &Arc<Node>) -> bool {
    let name = node.name_any();
    let Some(cidrs) = allocator.allocate(&name) else {
        tracing::warn!(controller = NAME, node = %name, "no pod CIDR available");
        let event = Event {
            type_: EventType::Normal,
            reason: "CIDRNotAvailable".into(),
            note: Some(format!("Node {name} status is now: CIDRNotAvailable")),
            action: "CIDRAssignmentFailed".into(),
            secondary: None,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.clone()),
            uid: Some(name.clone()),
            ..Default::default()
        };
        let _ = recorder.publish(&event, &reference).await;
        return false;
    };
    let strings: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
    let patch = json!({"spec": {"podCIDR": strings[0], "podCIDRs": strings}});
    for attempt in 0..3 {
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::info!(controller = NAME, node = %name, cidrs = ?strings, "assigned pod CIDRs");
                return true;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => break,
            Err(error) => {
                tracing::warn!(controller = NAME, node = %name, %error, attempt, "setting pod CIDRs failed");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    allocator.release(&name);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dual_stack_nodes_get_one_cidr_per_family_and_give_them_back() {
        let settings =
            Settings { cluster_cidrs: vec!["10.42.0.0/23".into(), "fd00:42::/56".into()], ..Default::default() };
        let mut a = Allocator { sets: cidr_sets(&settings).unwrap(), held: HashMap::new() };
        let one = a.allocate("a").unwrap();
        assert_eq!(one.iter().map(ToString::to_string).collect::<Vec<_>>(), ["10.42.0.0/24", "fd00:42::/64"]);
        a.occupy("b", &["10.42.1.0/24".into(), "fd00:42:0:1::/64".into()]);
        assert!(a.allocate("c").is_none(), "the IPv4 range is used up");
        a.release("a");
        assert_eq!(a.allocate("c").unwrap()[0].to_string(), "10.42.0.0/24");
    }
}
