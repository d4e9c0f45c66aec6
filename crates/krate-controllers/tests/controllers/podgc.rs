//! The pod garbage collector through the real API server: terminated pods over the
//! threshold go oldest first, pods of a node that does not exist are failed with the
//! DisruptionTarget condition and deleted, unscheduled terminating pods are failed.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

async fn cluster() -> (TestCluster, Api<Pod>) {
    let mut cluster = TestCluster::start().await;
    cluster.controllers_with(&["podgc"], |s| {
        s.terminated_pod_gc_threshold = 2;
        s.podgc.check_period = Duration::from_millis(300);
        s.podgc.orphan_quarantine = Duration::from_millis(500);
    });
    cluster.simulated_nodes(1).await;
    let client = cluster.admin().await;
    (cluster, Api::namespaced(client, "default"))
}

fn pod(name: &str, node: Option<&str>, annotations: serde_json::Value, finalizers: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations, "finalizers": finalizers},
        "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn terminated_pods_over_the_threshold_are_deleted_oldest_first() {
    let (_cluster, pods) = cluster().await;
    for i in 0..4 {
        let done = json!({"sim.krate.dev/run-for": "0"});
        pods.create(&PostParams::default(), &pod(&format!("done-{i}"), Some("sim-node-0"), done, &[])).await.unwrap();
        // Distinct creation times, so "oldest" is well defined.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    pods.create(&PostParams::default(), &pod("runner", Some("sim-node-0"), json!({}), &[])).await.unwrap();
    let left = eventually("two terminated pods left", WAIT, || async {
        let names: Vec<String> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        (names.len() == 3).then_some(names)
    })
    .await;
    assert_eq!(left, ["done-2", "done-3", "runner"]);
}

#[tokio::test]
async fn orphaned_and_unscheduled_terminating_pods_are_failed_and_deleted() {
    let (_cluster, pods) = cluster().await;
    // A finalizer keeps the pods visible after deletion, to see how they were left.
    let hold = ["example.com/hold"];
    pods.create(&PostParams::default(), &pod("orphan", Some("ghost-node"), json!({}), &hold)).await.unwrap();
    let orphan = eventually("orphan failed and deleted", WAIT, || async {
        let p = pods.get("orphan").await.unwrap();
        p.metadata.deletion_timestamp.is_some().then_some(p)
    })
    .await;
    let status = orphan.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let c = status.conditions.unwrap().into_iter().find(|c| c.type_ == "DisruptionTarget").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some("DeletionByPodGC")));
    assert_eq!(c.message.as_deref(), Some("PodGC: node no longer exists"));

    pods.create(&PostParams::default(), &pod("unscheduled", None, json!({}), &hold)).await.unwrap();
    pods.delete("unscheduled", &DeleteParams::default()).await.unwrap();
    eventually("unscheduled pod failed", WAIT, || async {
        let p = pods.get("unscheduled").await.unwrap();
        (p.status?.phase.as_deref() == Some("Failed")).then_some(())
    })
    .await;

    // A pod on a live node is left alone.
    pods.create(&PostParams::default(), &pod("fine", Some("sim-node-0"), json!({}), &[])).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(pods.get("fine").await.unwrap().metadata.deletion_timestamp.is_none());

    let release = json!({"metadata": {"finalizers": null}});
    for name in ["orphan", "unscheduled"] {
        pods.patch(name, &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    }
}
