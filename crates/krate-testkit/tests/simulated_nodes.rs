//! Simulated nodes through the real API server: they register Ready, hold Leases, and
//! move their pods through start, readiness, exit and deletion.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use krate_testkit::{TestCluster, eventually, pod_ready};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

fn pod(name: &str, node: &str, restart: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node, "restartPolicy": restart, "containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn simulated_nodes_register_heartbeat_and_run_pods() {
    let mut cluster = TestCluster::start().await;
    let names = cluster.simulated_nodes(2).await;
    assert_eq!(names, ["sim-node-0", "sim-node-1"]);
    let client = cluster.admin().await;

    let node = Api::<Node>::all(client.clone()).get("sim-node-1").await.unwrap();
    let conditions = node.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert!(conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    assert_eq!(node.status.as_ref().unwrap().allocatable.as_ref().unwrap()["pods"].0, "110");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    eventually("node leases", WAIT, || async { leases.get_opt("sim-node-1").await.unwrap() }).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("web", "sim-node-1", "Always", json!({}))).await.unwrap();
    let web = eventually("web ready", WAIT, || async {
        let p = pods.get("web").await.unwrap();
        pod_ready(&p).then_some(p)
    })
    .await;
    let status = web.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.pod_ip.unwrap().starts_with("10.128.1."));

    let failing = json!({"sim.krate.dev/run-for": "0.3", "sim.krate.dev/exit-code": "3"});
    pods.create(&PostParams::default(), &pod("task", "sim-node-0", "Never", failing)).await.unwrap();
    let task = eventually("task failed", WAIT, || async {
        let p = pods.get("task").await.unwrap();
        (p.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(p)
    })
    .await;
    let state = task.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap();
    assert_eq!(state.terminated.unwrap().exit_code, 3);

    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("web removed", WAIT, || async { pods.get_opt("web").await.unwrap().is_none().then_some(()) }).await;
}
