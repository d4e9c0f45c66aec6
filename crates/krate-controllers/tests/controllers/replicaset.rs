//! The ReplicaSet and ReplicationController controllers through the real API server
//! with simulated nodes: replicas kept, replaced, scaled, adopted and released, with
//! upstream's status and events.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Event, Pod, ReplicationController};
use krate_testkit::{TestCluster, eventually};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn replica_set(name: &str, replicas: i32, node: &str) -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }))
    .unwrap()
}

async fn owned_pods(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap();
    list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

#[tokio::test]
async fn replica_set_keeps_replaces_scales_adopts_and_releases() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["replicaset"]);
    let nodes = cluster.simulated_nodes(1).await;
    let client = cluster.admin().await;
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    rss.create(&PostParams::default(), &replica_set("web", 3, &nodes[0])).await.unwrap();

    let rs = eventually("3 ready replicas", WAIT, || async {
        let rs = rss.get("web").await.unwrap();
        let s = rs.status.clone()?;
        (s.ready_replicas == Some(3) && s.available_replicas == Some(3)).then_some(rs)
    })
    .await;
    let s = rs.status.unwrap();
    assert_eq!((s.replicas, s.fully_labeled_replicas, s.observed_generation), (3, Some(3), rs.metadata.generation));
    let list = owned_pods(&pods, "web").await;
    assert_eq!(list.len(), 3);
    for p in &list {
        assert!(p.name_any().starts_with("web-"), "named after the ReplicaSet: {}", p.name_any());
        let owner = &p.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller, owner.block_owner_deletion),
            ("ReplicaSet", Some(true), Some(true))
        );
    }

    // A deleted pod is replaced.
    let victim = list[0].name_any();
    pods.delete(&victim, &DeleteParams::default()).await.unwrap();
    eventually("replacement pod", WAIT, || async {
        let now = owned_pods(&pods, "web").await;
        (now.len() == 3 && now.iter().all(|p| p.name_any() != victim)).then_some(())
    })
    .await;

    // Scale down to 1: two deleted, status follows.
    rss.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    eventually("scaled down to 1", WAIT, || async {
        let rs = rss.get("web").await.unwrap();
        (owned_pods(&pods, "web").await.len() == 1 && rs.status?.replicas == 1).then_some(())
    })
    .await;

    // An orphan with matching labels is adopted (and then one pod is surplus).
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stray", "labels": {"app": "web"}},
        "spec": {"nodeName": nodes[0], "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    eventually("orphan adopted or deleted as surplus", WAIT, || async {
        let now = owned_pods(&pods, "web").await;
        let controlled = now.iter().all(|p| p.owner_references().iter().any(|r| r.name == "web"));
        (now.len() == 1 && controlled).then_some(())
    })
    .await;

    // A pod relabelled out of the selector is released and replaced.
    let kept = owned_pods(&pods, "web").await.remove(0).name_any();
    pods.patch(&kept, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})))
        .await
        .unwrap();
    eventually("released and replaced", WAIT, || async {
        let released = pods.get(&kept).await.unwrap();
        let replaced = owned_pods(&pods, "web").await.len() == 1;
        (released.owner_references().is_empty() && replaced).then_some(())
    })
    .await;

    // Upstream's events.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let seen = eventually("SuccessfulCreate and SuccessfulDelete events", WAIT, || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        let reasons: Vec<String> = list.iter().filter_map(|e| e.reason.clone()).collect();
        (reasons.iter().any(|r| r == "SuccessfulCreate") && reasons.iter().any(|r| r == "SuccessfulDelete"))
            .then_some(list)
    })
    .await;
    let created = seen.iter().find(|e| e.reason.as_deref() == Some("SuccessfulCreate")).unwrap();
    assert!(created.message.as_deref().unwrap_or("").starts_with("Created pod: web-"), "{:?}", created.message);
}

#[tokio::test]
async fn replica_set_reports_min_ready_seconds_availability() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["replicaset"]);
    let nodes = cluster.simulated_nodes(1).await;
    let client = cluster.admin().await;
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let mut rs = replica_set("slow", 2, &nodes[0]);
    rs.spec.as_mut().unwrap().min_ready_seconds = Some(3);
    rss.create(&PostParams::default(), &rs).await.unwrap();
    let started = tokio::time::Instant::now();
    eventually("ready but not yet available", WAIT, || async {
        let s = rss.get("slow").await.unwrap().status?;
        (s.ready_replicas == Some(2) && s.available_replicas.unwrap_or(0) < 2).then_some(())
    })
    .await;
    eventually("available after minReadySeconds", WAIT, || async {
        let s = rss.get("slow").await.unwrap().status?;
        (s.available_replicas == Some(2)).then_some(())
    })
    .await;
    // Condition times have one-second resolution, as upstream's.
    assert!(started.elapsed() >= Duration::from_secs(2), "waited {:?}", started.elapsed());
}

#[tokio::test]
async fn replication_controller_keeps_its_replicas() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["replicationcontroller"]);
    let nodes = cluster.simulated_nodes(1).await;
    let client = cluster.admin().await;
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "legacy"},
        "spec": {
            "replicas": 2,
            "selector": {"app": "legacy"},
            "template": {
                "metadata": {"labels": {"app": "legacy"}},
                "spec": {"nodeName": nodes[0], "containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }))
    .unwrap();
    rcs.create(&PostParams::default(), &rc).await.unwrap();
    eventually("2 ready replicas", WAIT, || async {
        let s = rcs.get("legacy").await.unwrap().status?;
        (s.ready_replicas == Some(2) && s.available_replicas == Some(2)).then_some(())
    })
    .await;
    let list = owned_pods(&pods, "legacy").await;
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].owner_references()[0].kind, "ReplicationController");
    rcs.patch("legacy", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}}))).await.unwrap();
    eventually("scaled to zero", WAIT, || async {
        let s = rcs.get("legacy").await.unwrap().status?;
        (owned_pods(&pods, "legacy").await.is_empty() && s.replicas == 0).then_some(())
    })
    .await;
}
