//! Node lifecycle and taint eviction through the real API server: simulated nodes that
//! stop renewing their Leases go Unknown, get the unreachable taints, and their pods are
//! evicted as their tolerations say.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use krate_testkit::simulated;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn pod(name: &str, node: &str, tolerations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "tolerations": tolerations, "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap()
}

fn unreachable_for(seconds: Option<i64>) -> serde_json::Value {
    let mut t = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"});
    if let Some(s) = seconds {
        t["tolerationSeconds"] = json!(s);
    }
    json!([t])
}

fn has_taint(node: &Node, key: &str, effect: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key && t.effect == effect))
}

#[tokio::test]
async fn lost_nodes_go_unknown_get_tainted_and_their_pods_are_evicted_by_tolerations() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers_with(&["node-lifecycle", "taint-eviction-controller"], |s| {
        s.node_monitor_grace_period = Duration::from_secs(3);
        s.node_eviction_rate = 100.0;
    });
    let options = |prefix: &str, count| simulated::Options {
        count,
        prefix: prefix.into(),
        lease_renew: Duration::from_millis(500),
        ..Default::default()
    };
    let stay = cluster.simulated_nodes_with(options("stay-", 2)).await;
    let lost = cluster.simulated_nodes_with(options("lost-", 1)).await;
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());

    let pp = PostParams::default();
    pods.create(&pp, &pod("impatient", &lost[0], unreachable_for(Some(2)))).await.unwrap();
    pods.create(&pp, &pod("patient", &lost[0], unreachable_for(None))).await.unwrap();
    let defaulted = pods.create(&pp, &pod("defaulted", &lost[0], json!([]))).await.unwrap();
    pods.create(&pp, &pod("elsewhere", &stay[0], json!([]))).await.unwrap();
    // DefaultTolerationSeconds gave the plain pod five minutes on a lost node.
    let tolerations = defaulted.spec.unwrap().tolerations.unwrap();
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let t = tolerations.iter().find(|t| t.key.as_deref() == Some(key)).expect("default toleration");
        assert_eq!((t.effect.as_deref(), t.toleration_seconds), (Some("NoExecute"), Some(300)));
    }
    eventually("pods on the lost node ready", WAIT, || async {
        let p = pods.get("impatient").await.unwrap();
        let ready = p.status?.conditions?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(())
    })
    .await;

    // Healthy nodes are not tainted; an unschedulable one gets the unschedulable taint.
    nodes
        .patch(&stay[1], &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();
    eventually("unschedulable taint", WAIT, || async {
        has_taint(&nodes.get(&stay[1]).await.unwrap(), "node.kubernetes.io/unschedulable", "NoSchedule").then_some(())
    })
    .await;

    cluster.stop_simulated_nodes("lost-");
    let node = eventually("lost node Unknown and tainted", WAIT, || async {
        let node = nodes.get(&lost[0]).await.unwrap();
        has_taint(&node, "node.kubernetes.io/unreachable", "NoExecute").then_some(node)
    })
    .await;
    let ready = node.status.clone().unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "Unknown");
    assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(ready.message.as_deref(), Some("Kubelet stopped posting node status."));
    assert!(has_taint(&node, "node.kubernetes.io/unreachable", "NoSchedule"));

    // The pod tolerating 2 seconds is evicted (with DisruptionTarget), the others stay.
    let evicted = eventually("impatient pod evicted", WAIT, || async {
        let p = pods.get_opt("impatient").await.unwrap();
        match p {
            None => Some(None),
            Some(p) if p.metadata.deletion_timestamp.is_some() => Some(Some(p)),
            Some(_) => None,
        }
    })
    .await;
    if let Some(p) = evicted {
        let target = p.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "DisruptionTarget").unwrap();
        assert_eq!(target.reason.as_deref(), Some("DeletionByTaintManager"));
    }
    for name in ["patient", "defaulted"] {
        let p = pods.get(name).await.unwrap();
        assert!(p.metadata.deletion_timestamp.is_none(), "{name} must stay");
        let ready = p.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "False", "pods of an unreachable node are marked not ready");
    }
    let elsewhere = pods.get("elsewhere").await.unwrap();
    assert!(elsewhere.metadata.deletion_timestamp.is_none());
    for name in &stay {
        let node = nodes.get(name).await.unwrap();
        assert!(!has_taint(&node, "node.kubernetes.io/unreachable", "NoExecute"), "{name} is healthy");
    }
}
