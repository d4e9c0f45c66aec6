//! Node IPAM through the real API server: nodes get podCIDRs from the cluster CIDRs,
//! once, and give them back when deleted; a full range leaves a CIDRNotAvailable event.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

async fn add_node(nodes: &Api<Node>, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

async fn cidrs_of(nodes: &Api<Node>, name: &str) -> Option<Vec<String>> {
    let node = nodes.get(name).await.unwrap();
    node.spec?.pod_cidrs.filter(|c| !c.is_empty())
}

#[tokio::test]
async fn nodes_get_dual_stack_pod_cidrs_until_the_range_is_used_up() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers_with(&["node-ipam"], |s| {
        s.cluster_cidrs = vec!["10.42.0.0/23".into(), "fd00:42::/56".into()];
    });
    let client = cluster.admin().await;
    let nodes: Api<Node> = Api::all(client.clone());
    add_node(&nodes, "a").await;
    add_node(&nodes, "b").await;
    let a = eventually("a has CIDRs", WAIT, || cidrs_of(&nodes, "a")).await;
    let b = eventually("b has CIDRs", WAIT, || cidrs_of(&nodes, "b")).await;
    let mut v4 = vec![a[0].clone(), b[0].clone()];
    v4.sort();
    assert_eq!(v4, ["10.42.0.0/24", "10.42.1.0/24"]);
    assert!(a[1].starts_with("fd00:42:") && a[1].ends_with("/64"), "{a:?}");
    assert_eq!(nodes.get("a").await.unwrap().spec.unwrap().pod_cidr.as_deref(), Some(a[0].as_str()));

    // The IPv4 range holds two /24s: a third node waits, with an event saying why.
    add_node(&nodes, "c").await;
    let events: Api<Event> = Api::all(client.clone());
    eventually("CIDRNotAvailable event", WAIT, || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        list.iter()
            .find(|e| e.reason.as_deref() == Some("CIDRNotAvailable") && e.involved_object.name.as_deref() == Some("c"))
            .map(|e| assert_eq!(e.message.as_deref(), Some("Node c status is now: CIDRNotAvailable")))
    })
    .await;
    assert!(cidrs_of(&nodes, "c").await.is_none());

    // An unrelated change to a node does not move its CIDRs.
    nodes
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .unwrap();
    // Deleting a node frees its CIDRs for the waiting one.
    nodes.delete("a", &DeleteParams::default()).await.unwrap();
    let c = eventually("c gets a's CIDRs", WAIT, || cidrs_of(&nodes, "c")).await;
    assert_eq!(c, a);
    assert_eq!(cidrs_of(&nodes, "b").await.unwrap(), b);
}
