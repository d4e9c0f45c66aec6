//! A 1000-replica Deployment from create to all Ready on simulated nodes (ignored by
//! default: a measurement, run with `--ignored --nocapture`; the figure for RESULTS.md
//! wants a release build).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn thousand_replicas_to_ready() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["deployment", "replicaset"]);
    let node = cluster.simulated_nodes(1).await.remove(0);
    let client = cluster.admin().await;
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "spec": {"replicas": 1000, "selector": {"matchLabels": {"app": "big"}}, "template": {
            "metadata": {"labels": {"app": "big"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        }},
    }))
    .unwrap();
    let started = Instant::now();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    eventually("1000 ready", Duration::from_secs(600), || async {
        let s = deployments.get("big").await.unwrap().status?;
        (s.ready_replicas == Some(1000)).then_some(())
    })
    .await;
    println!("1000-replica Deployment: create to all Ready in {:?}", started.elapsed());
}
