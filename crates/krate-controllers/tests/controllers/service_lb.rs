//! The built-in service load balancer through the real API server: a LoadBalancer
//! Service gets the Ready nodes' addresses as its ingress, follows nodes going NotReady,
//! is cleared when it stops being a LoadBalancer, and one with a loadBalancerClass is
//! left to its implementation.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

async fn add_node(nodes: &Api<Node>, name: &str, ip: &str, ready: bool) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    set_ready(nodes, name, ip, ready).await;
}

async fn set_ready(nodes: &Api<Node>, name: &str, ip: &str, ready: bool) {
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "Test"}],
    }});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

async fn ingress(services: &Api<Service>, name: &str) -> Vec<String> {
    let svc = services.get(name).await.unwrap();
    let ingress = svc.status.and_then(|s| s.load_balancer).and_then(|l| l.ingress).unwrap_or_default();
    ingress.into_iter().filter_map(|i| i.ip).collect()
}

#[tokio::test]
async fn load_balancers_get_the_ready_nodes_addresses() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["service-lb"]);
    let client = cluster.admin().await;
    let nodes: Api<Node> = Api::all(client.clone());
    add_node(&nodes, "lb-a", "10.0.0.2", true).await;
    add_node(&nodes, "lb-b", "10.0.0.3", true).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let create = |name: &str, spec: serde_json::Value| {
        serde_json::from_value::<Service>(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let ports = json!([{"port": 80}]);
    services
        .create(&PostParams::default(), &create("web", json!({"type": "LoadBalancer", "ports": ports})))
        .await
        .unwrap();
    let classed =
        create("other", json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb", "ports": ports}));
    services.create(&PostParams::default(), &classed).await.unwrap();

    let want = |ips: &'static [&'static str]| {
        let services = services.clone();
        move || {
            let services = services.clone();
            async move { (ingress(&services, "web").await == ips).then_some(()) }
        }
    };
    eventually("both nodes published", WAIT, want(&["10.0.0.2", "10.0.0.3"])).await;
    set_ready(&nodes, "lb-b", "10.0.0.3", false).await;
    eventually("the NotReady node withdrawn", WAIT, want(&["10.0.0.2"])).await;
    // Another class's Service is never touched.
    assert!(ingress(&services, "other").await.is_empty());

    let to_cluster_ip = json!({"spec": {"type": "ClusterIP", "allocateLoadBalancerNodePorts": null}});
    services.patch("web", &PatchParams::default(), &Patch::Merge(&to_cluster_ip)).await.unwrap();
    eventually("cleared once not a LoadBalancer", WAIT, want(&[])).await;
}
