//! The garbage collector through the real API server: Background, Foreground (with
//! blockOwnerDeletion holding the owner) and Orphan propagation over ownerReferences.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use krate_testkit::{TestCluster, eventually};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

async fn family(cms: &Api<ConfigMap>, owner: &str, children: &[&str], child_finalizers: &[&str]) -> String {
    let parent: ConfigMap = serde_json::from_value(json!({"metadata": {"name": owner}})).unwrap();
    let uid = cms.create(&PostParams::default(), &parent).await.unwrap().uid().unwrap();
    for child in children {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {
            "name": child,
            "finalizers": child_finalizers,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid, "blockOwnerDeletion": true}],
        }}))
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    uid
}

#[tokio::test]
async fn background_foreground_and_orphan_propagation() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["garbagecollector"]);
    let client = cluster.admin().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");

    // Background: the owner goes at once, its dependents after.
    family(&cms, "bg", &["bg-a", "bg-b"], &[]).await;
    cms.delete("bg", &DeleteParams::background()).await.unwrap();
    eventually("dependents collected", WAIT, || async {
        (cms.get_opt("bg-a").await.unwrap().is_none() && cms.get_opt("bg-b").await.unwrap().is_none()).then_some(())
    })
    .await;

    // Orphan: dependents stay, without their reference; the owner goes.
    family(&cms, "or", &["or-a"], &[]).await;
    cms.delete("or", &DeleteParams::orphan()).await.unwrap();
    eventually("owner gone, dependent orphaned", WAIT, || async {
        let child = cms.get_opt("or-a").await.unwrap()?;
        (cms.get_opt("or").await.unwrap().is_none() && child.owner_references().is_empty()).then_some(())
    })
    .await;

    // Foreground: the owner waits, with foregroundDeletion, for its blocking dependent.
    family(&cms, "fg", &["fg-a"], &["example.com/hold"]).await;
    cms.delete("fg", &DeleteParams::foreground()).await.unwrap();
    eventually("dependent being deleted", WAIT, || async {
        let child = cms.get_opt("fg-a").await.unwrap()?;
        child.metadata.deletion_timestamp.is_some().then_some(())
    })
    .await;
    let owner = cms.get("fg").await.expect("the owner waits for its dependent");
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert!(owner.finalizers().iter().any(|f| f == "foregroundDeletion"));
    let release = json!({"metadata": {"finalizers": null}});
    cms.patch("fg-a", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    eventually("owner gone once its dependent is", WAIT, || async {
        (cms.get_opt("fg").await.unwrap().is_none() && cms.get_opt("fg-a").await.unwrap().is_none()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_replica_set_collects_or_orphans_its_pods() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["garbagecollector", "replicaset"]);
    let node = cluster.simulated_nodes(1).await.remove(0);
    let client = cluster.admin().await;
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for name in ["collected", "orphaned"] {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            }},
        }))
        .unwrap();
        rss.create(&PostParams::default(), &rs).await.unwrap();
    }
    let count = |app: &'static str| {
        let pods = pods.clone();
        async move { pods.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap().items }
    };
    eventually("pods created", WAIT, || async {
        (count("collected").await.len() == 2 && count("orphaned").await.len() == 2).then_some(())
    })
    .await;

    rss.delete("collected", &DeleteParams::background()).await.unwrap();
    rss.delete("orphaned", &DeleteParams::orphan()).await.unwrap();
    eventually("pods of the first collected", WAIT, || async { count("collected").await.is_empty().then_some(()) })
        .await;
    eventually("pods of the second orphaned", WAIT, || async {
        let left = count("orphaned").await;
        let orphaned = left.len() == 2 && left.iter().all(|p| p.owner_references().is_empty());
        (orphaned && rss.get_opt("orphaned").await.unwrap().is_none()).then_some(())
    })
    .await;
}
