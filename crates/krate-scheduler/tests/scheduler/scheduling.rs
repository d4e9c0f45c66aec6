//! The scheduler against a real API server with simulated nodes: binding, events,
//! conditions, resources, taints and node affinity.

use crate::common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use krate_agent::simulated;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[tokio::test]
async fn binds_pending_pods_and_reports_scheduled() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes(3).await;
    cluster.scheduler();
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, pod("web", "100m", json!({}))).await;
    let node = bound_node(&pods, "web").await;
    assert!(node.starts_with("sim-node-"));
    let message = event_message(&client, "default", "web", "Scheduled").await;
    assert_eq!(message, format!("Successfully assigned default/web to {node}"));
    // The simulated node runs it.
    eventually("web Running", WAIT, || async {
        (pods.get("web").await.ok()?.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    // Another scheduler's pods are left alone.
    create(&pods, pod("other", "100m", json!({"schedulerName": "someone-else"}))).await;
    stays_pending(&pods, "other").await;
}

#[tokio::test]
async fn insufficient_resources_and_taints_in_the_failed_scheduling_message() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes_with(simulated::Options { count: 3, cpu: "2".into(), ..Default::default() }).await;
    let client = cluster.admin().await;
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["sim-node-1", "sim-node-2"] {
        let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}});
        nodes.patch(name, &PatchParams::default(), &Patch::Merge(&taint)).await.unwrap();
    }
    cluster.scheduler();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, pod("big", "3", json!({}))).await;
    let expected = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: infra}. \
                    preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";
    assert_eq!(unschedulable(&pods, "big", "Unschedulable").await, expected);
    assert_eq!(event_message(&client, "default", "big", "FailedScheduling").await, expected);

    // A pod tolerating the taint lands on a tainted node when the untainted one is full.
    create(&pods, pod("filler", "1500m", json!({"nodeName": "sim-node-0"}))).await;
    let tolerating = pod(
        "tolerant",
        "1",
        json!({"tolerations": [{"key": "dedicated", "operator": "Equal",
        "value": "infra", "effect": "NoSchedule"}]}),
    );
    create(&pods, tolerating).await;
    let node = bound_node(&pods, "tolerant").await;
    assert_ne!(node, "sim-node-0");

    // Making room re-queues the unschedulable pod: a new big node appears.
    cluster
        .simulated_nodes_with(simulated::Options {
            count: 1,
            prefix: "big-".into(),
            cpu: "8".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(bound_node(&pods, "big").await, "big-0");
}

#[tokio::test]
async fn node_selector_and_node_affinity() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes_with(simulated::Options { count: 4, zones: 2, ..Default::default() }).await;
    cluster.scheduler();
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, pod("sel", "100m", json!({"nodeSelector": {"topology.kubernetes.io/zone": "zone-1"}}))).await;
    let node = bound_node(&pods, "sel").await;
    assert!(node == "sim-node-1" || node == "sim-node-3", "{node}");

    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["sim-node-2"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-1"]}]}}]}}});
    create(&pods, pod("aff", "100m", affinity)).await;
    assert_eq!(bound_node(&pods, "aff").await, "sim-node-2");

    let preferred = json!({"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["sim-node-3"]}]}}]}}});
    create(&pods, pod("pref", "100m", preferred)).await;
    assert_eq!(bound_node(&pods, "pref").await, "sim-node-3");

    create(&pods, pod("nowhere", "100m", json!({"nodeSelector": {"disk": "ssd"}}))).await;
    let message = unschedulable(&pods, "nowhere", "Unschedulable").await;
    assert!(
        message.starts_with("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."),
        "{message}"
    );
}
