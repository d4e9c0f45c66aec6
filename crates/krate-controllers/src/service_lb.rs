//! The built-in service load balancer, as k3s's ServiceLB: a Service of type
//! LoadBalancer without a loadBalancerClass gets the addresses of the cluster's Ready
//! nodes (ExternalIP, else InternalIP) as its status.loadBalancer.ingress, and every
//! node's service proxy accepts traffic for them (as for externalIPs). When some nodes
//! carry `svccontroller.k3s.cattle.io/enablelb=true`, only those are published, as k3s
//! does. A Service that stops being a LoadBalancer has its ingress cleared, as
//! upstream's service controller does. It acts as upstream's service-controller (the
//! cloud provider's loop that writes load balancer status).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::{Context, Error};

const CONTROLLER: &str = "service-lb";
/// Nodes opted in to carrying load balancer traffic (k3s's label).
pub const ENABLE_LB_LABEL: &str = "svccontroller.k3s.cattle.io/enablelb";
/// Changes arriving together are handled in one pass.
const SETTLE: Duration = Duration::from_millis(100);
const RETRY: Duration = Duration::from_secs(5);

fn ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

fn address(node: &Node) -> Option<String> {
    let addresses = node.status.as_ref()?.addresses.as_deref()?;
    let of = |kind: &str| addresses.iter().find(|a| a.type_ == kind).map(|a| a.address.clone());
    of("ExternalIP").or_else(|| of("InternalIP"))
}

/// The addresses LoadBalancer Services are published at, sorted.
pub fn ingress_addresses(nodes: &[&Node]) -> Vec<String> {
    let opted_in = |n: &&&Node| n.labels().get(ENABLE_LB_LABEL).is_some_and(|v| v == "true");
    let any_opted_in = nodes.iter().any(|n| opted_in(&n));
    let set: BTreeSet<String> = nodes
        .iter()
        .filter(|n| ready(n) && !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
        .filter(|n| !any_opted_in || opted_in(n))
        .filter_map(|n| address(n))
        .collect();
    set.into_iter().collect()
}

/// What `service`'s load balancer ingress should be: Some(list) to write, None to leave
/// alone (another implementation's class).
pub fn desired_ingress(service: &Service, addresses: &[String]) -> Option<Vec<String>> {
    let spec = service.spec.as_ref()?;
    if spec.load_balancer_class.is_some() {
        return None;
    }
    if spec.type_.as_deref() == Some("LoadBalancer") { Some(addresses.to_vec()) } else { Some(vec![]) }
}

fn current_ingress(service: &Service) -> Vec<String> {
    let ingress = service.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|l| l.ingress.as_deref());
    ingress.unwrap_or_default().iter().filter_map(|i| i.ip.clone()).collect()
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("service-controller");
    let services = ctx.informers.get::<Service>();
    let nodes = ctx.informers.get::<Node>();
    let mut changes = futures::stream::select(services.subscribe().map(|_| ()), nodes.subscribe().map(|_| ())).boxed();
    loop {
        if changes.next().await.is_none() {
            return;
        }
        tokio::time::sleep(SETTLE).await;
        // Everything that arrived meanwhile is covered by this pass.
        while futures::FutureExt::now_or_never(changes.next()).flatten().is_some() {}
        let node_list = nodes.store().state();
        let node_refs: Vec<&Node> = node_list.iter().map(|n| n.as_ref()).collect();
        let addresses = ingress_addresses(&node_refs);
        let mut failed = false;
        for service in services.store().state() {
            let result = sync(&clients.write, &service, &addresses).await;
            crate::metrics::record(CONTROLLER, result.is_ok());
            if let Err(error) = result {
                tracing::warn!(controller = CONTROLLER, service = %service.name_any(), %error, "updating load balancer status");
                failed = true;
            }
        }
        if failed {
            tokio::time::sleep(RETRY).await;
        }
    }
}

async fn sync(client: &kube::Client, service: &Service, addresses: &[String]) -> Result<(), Error> {
    let Some(want) = desired_ingress(service, addresses) else { return Ok(()) };
    if current_ingress(service) == want {
        return Ok(());
    }
    let ingress: Vec<_> = want.iter().map(|ip| json!({"ip": ip, "ipMode": "VIP"})).collect();
    let api: Api<Service> = Api::namespaced(client.clone(), &service.namespace().unwrap_or_default());
    let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    match api.patch_status(&service.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::info!(controller = CONTROLLER, service = %service.name_any(), ingress = ?want, "load balancer status");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool, addresses: &[(&str, &str)], labels: serde_json::Value) -> Node {
        let addresses: Vec<_> = addresses.iter().map(|(t, a)| json!({"type": t, "address": a})).collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"addresses": addresses,
                       "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    #[test]
    fn ready_nodes_are_published_external_address_first() {
        let a = node("a", true, &[("InternalIP", "10.0.0.2")], json!({}));
        let b = node("b", true, &[("InternalIP", "10.0.0.3"), ("ExternalIP", "203.0.113.3")], json!({}));
        let c = node("c", false, &[("InternalIP", "10.0.0.4")], json!({}));
        assert_eq!(ingress_addresses(&[&a, &b, &c]), ["10.0.0.2", "203.0.113.3"]);
        // Opted-in nodes only, once any node opts in.
        let d = node("d", true, &[("InternalIP", "10.0.0.5")], json!({ENABLE_LB_LABEL: "true"}));
        assert_eq!(ingress_addresses(&[&a, &b, &d]), ["10.0.0.5"]);
    }

    #[test]
    fn only_classless_load_balancers_are_ours() {
        let svc = |spec: serde_json::Value| -> Service { serde_json::from_value(json!({"spec": spec})).unwrap() };
        let addrs = vec!["10.0.0.2".to_string()];
        assert_eq!(desired_ingress(&svc(json!({"type": "LoadBalancer"})), &addrs), Some(addrs.clone()));
        assert_eq!(desired_ingress(&svc(json!({"type": "ClusterIP"})), &addrs), Some(vec![]));
        let classed = svc(json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"}));
        assert_eq!(desired_ingress(&classed, &addrs), None);
    }
}
