//! The StatefulSet controller through the real API server, on simulated nodes (pods
//! are bound by nodeName in the template until the scheduler lands; their readiness is
//! steered by sim.krate.dev/ready-after).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use krate_testkit::{TestCluster, eventually, merge_json, pod_ready};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

async fn cluster() -> (TestCluster, kube::Client, String) {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["statefulset"]);
    let node = cluster.simulated_nodes(1).await.remove(0);
    let client = cluster.admin().await;
    (cluster, client, node)
}

fn set(node: &str, ready_after: u32, spec: Value) -> StatefulSet {
    let mut v = json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "serviceName": "nginx",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"sim.krate.dev/ready-after": ready_after.to_string()}},
                "spec": {"nodeName": node, "containers": [{"name": "nginx", "image": "nginx:1"}]},
            },
        },
    });
    merge_json(&mut v["spec"], spec);
    serde_json::from_value(v).unwrap()
}

fn ready_at(p: &Pod) -> k8s_openapi::jiff::Timestamp {
    let c = p.status.as_ref().unwrap().conditions.as_ref().unwrap();
    c.iter().find(|c| c.type_ == "Ready").unwrap().last_transition_time.as_ref().unwrap().0
}

fn created(p: &Pod) -> k8s_openapi::jiff::Timestamp {
    p.metadata.creation_timestamp.as_ref().unwrap().0
}

fn revision(p: &Pod) -> String {
    p.metadata.labels.as_ref().unwrap()["controller-revision-hash"].clone()
}

/// The set's live pods by name, once `n` of them are Ready.
async fn ready_pods(pods: &Api<Pod>, n: usize) -> BTreeMap<String, Pod> {
    eventually(&format!("{n} ready pods"), WAIT, || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
        let live: BTreeMap<String, Pod> = list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        (live.len() == n && live.values().all(pod_ready)).then_some(live)
    })
    .await
}

async fn status_where(
    sets: &Api<StatefulSet>,
    what: &str,
    f: impl Fn(&k8s_openapi::api::apps::v1::StatefulSetStatus) -> bool,
) -> StatefulSet {
    eventually(what, WAIT, || async {
        let s = sets.get("web").await.unwrap();
        s.status.as_ref().is_some_and(&f).then_some(s)
    })
    .await
}

#[tokio::test]
async fn ordered_ready_creates_in_order_with_stable_identity_and_scales_down_from_the_top() {
    let (_cluster, client, node) = cluster().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    sets.create(&PostParams::default(), &set(&node, 1, json!({}))).await.unwrap();

    let live = ready_pods(&pods, 3).await;
    let (p0, p1, p2) = (&live["web-0"], &live["web-1"], &live["web-2"]);
    // Each pod is made only once its predecessor is Ready.
    assert!(created(p1) >= ready_at(p0), "web-1 made before web-0 was ready");
    assert!(created(p2) >= ready_at(p1), "web-2 made before web-1 was ready");
    let labels = p1.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "web-1");
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "1");
    let spec = p1.spec.as_ref().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("web-1"));
    assert_eq!(spec.subdomain.as_deref(), Some("nginx"));

    let s =
        status_where(&sets, "status with 3 ready", |s| s.ready_replicas == Some(3) && s.available_replicas == Some(3))
            .await;
    let st = s.status.unwrap();
    assert_eq!(st.replicas, 3);
    assert_eq!(st.current_revision, st.update_revision);
    let rev = st.update_revision.unwrap();
    assert!(rev.starts_with("web-"));
    assert_eq!(revision(p0), rev);
    let revisions: Api<ControllerRevision> = Api::default_namespaced(client.clone());
    let cr = revisions.get(&rev).await.unwrap();
    assert_eq!(cr.revision, 1);
    assert_eq!(cr.metadata.labels.as_ref().unwrap()["app"], "web");
    assert_eq!(format!("web-{}", cr.metadata.labels.as_ref().unwrap()["controller-revision-hash"]), rev);

    let events: Api<Event> = Api::default_namespaced(client.clone());
    let made = eventually("SuccessfulCreate events", WAIT, || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        let notes: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("SuccessfulCreate"))
            .filter_map(|e| e.note)
            .collect();
        (notes.len() >= 3).then_some(notes)
    })
    .await;
    assert!(made.contains(&"create Pod web-0 in StatefulSet web successful".to_string()), "{made:?}");

    sets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    let left = ready_pods(&pods, 1).await;
    assert!(left.contains_key("web-0"));
    status_where(&sets, "status with 1 replica", |s| s.replicas == 1).await;
}

#[tokio::test]
async fn parallel_creates_every_pod_at_once_from_the_start_ordinal() {
    let (_cluster, client, node) = cluster().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let spec = json!({"podManagementPolicy": "Parallel", "ordinals": {"start": 5}});
    sets.create(&PostParams::default(), &set(&node, 3, spec)).await.unwrap();
    let live = ready_pods(&pods, 3).await;
    assert_eq!(live.keys().cloned().collect::<Vec<_>>(), vec!["web-5", "web-6", "web-7"]);
    let times: Vec<_> = live.values().map(created).collect();
    let spread = *times.iter().max().unwrap() - *times.iter().min().unwrap();
    // OrderedReady would space them by the 3 s each takes to become ready.
    assert!(spread.get_seconds() < 2, "pods made {spread:?} apart");
}

#[tokio::test]
async fn rolling_update_honours_partition_then_max_unavailable() {
    let (_cluster, client, node) = cluster().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let spec =
        json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2, "maxUnavailable": 2}}});
    sets.create(&PostParams::default(), &set(&node, 2, spec)).await.unwrap();
    let before = ready_pods(&pods, 3).await;
    let old = revision(&before["web-0"]);

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}}}});
    sets.patch("web", &PatchParams::default(), &Patch::Strategic(image)).await.unwrap();
    let s =
        status_where(&sets, "web-2 updated", |s| s.updated_replicas == Some(1) && s.ready_replicas == Some(3)).await;
    let st = s.status.unwrap();
    assert_eq!(st.current_revision.as_deref(), Some(old.as_str()));
    let new = st.update_revision.unwrap();
    assert_ne!(new, old);
    let live = ready_pods(&pods, 3).await;
    assert_eq!(revision(&live["web-2"]), new);
    assert_eq!(revision(&live["web-1"]), old);
    assert_eq!(revision(&live["web-0"]), old);

    // Without the partition the rest go, two at a time at most.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}})),
    )
    .await
    .unwrap();
    let mut most_unavailable = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
        let available = list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p)).count();
        most_unavailable = most_unavailable.max(3 - available);
        let s = sets.get("web").await.unwrap().status.unwrap();
        if s.current_revision.as_deref() == Some(new.as_str())
            && s.updated_replicas == Some(3)
            && s.ready_replicas == Some(3)
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "rollout did not finish: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(most_unavailable, 2, "maxUnavailable 2 should take two pods down at once, and no more");
    let live = ready_pods(&pods, 3).await;
    assert!(live.values().all(|p| revision(p) == new));
}

#[tokio::test]
async fn min_ready_seconds_holds_the_next_pod_and_availability() {
    let (_cluster, client, node) = cluster().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    sets.create(&PostParams::default(), &set(&node, 0, json!({"replicas": 2, "minReadySeconds": 3}))).await.unwrap();
    status_where(&sets, "ready but not yet available", |s| {
        s.ready_replicas == Some(1) && s.available_replicas == Some(0)
    })
    .await;
    let live = ready_pods(&pods, 2).await;
    let gap = created(&live["web-1"]) - ready_at(&live["web-0"]);
    assert!(gap.get_seconds() >= 2, "web-1 made {gap:?} after web-0 was ready");
    status_where(&sets, "both available", |s| s.available_replicas == Some(2)).await;
}

#[tokio::test]
async fn on_delete_updates_a_pod_only_when_it_is_deleted() {
    let (_cluster, client, node) = cluster().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    sets.create(&PostParams::default(), &set(&node, 0, json!({"replicas": 2, "updateStrategy": {"type": "OnDelete"}})))
        .await
        .unwrap();
    let before = ready_pods(&pods, 2).await;
    let old = revision(&before["web-0"]);
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}}}});
    sets.patch("web", &PatchParams::default(), &Patch::Strategic(image)).await.unwrap();
    let s = status_where(&sets, "a new update revision", |s| s.update_revision.as_deref() != Some(old.as_str())).await;
    let new = s.status.unwrap().update_revision.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let live = ready_pods(&pods, 2).await;
    assert!(live.values().all(|p| revision(p) == old), "OnDelete replaced a pod by itself");

    pods.delete("web-1", &DeleteParams::default()).await.unwrap();
    let replaced = eventually("web-1 made again at the new revision", WAIT, || async {
        pods.get_opt("web-1").await.unwrap().filter(|p| revision(p) == new && pod_ready(p))
    })
    .await;
    assert_eq!(replaced.spec.unwrap().containers[0].image.as_deref(), Some("nginx:2"));
    assert_eq!(revision(&pods.get("web-0").await.unwrap()), old);
}

#[tokio::test]
async fn claims_come_from_templates_and_are_owned_per_retention_policy() {
    let (_cluster, client, node) = cluster().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let spec = json!({
        "replicas": 2,
        "volumeClaimTemplates": [{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
    });
    let created_set = sets.create(&PostParams::default(), &set(&node, 0, spec)).await.unwrap();
    let set_uid = created_set.metadata.uid.unwrap();
    let live = ready_pods(&pods, 2).await;
    let volume = live["web-1"]
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "data")
        .cloned()
        .unwrap();
    assert_eq!(volume.persistent_volume_claim.unwrap().claim_name, "data-web-1");
    for name in ["data-web-0", "data-web-1"] {
        let claim = claims.get(name).await.unwrap();
        assert_eq!(claim.metadata.labels.as_ref().unwrap()["app"], "web");
        let owners = claim.metadata.owner_references.unwrap();
        assert!(owners.iter().any(|o| o.uid == set_uid && o.kind == "StatefulSet"), "{name}: {owners:?}");
    }

    // Scaling down hands data-web-1 to its pod (whenScaled: Delete), so it goes with it.
    let pod1_uid = live["web-1"].metadata.uid.clone().unwrap();
    sets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    eventually("data-web-1 owned by web-1", WAIT, || async {
        let claim = claims.get("data-web-1").await.unwrap();
        claim
            .metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .any(|o| o.uid == pod1_uid && o.kind == "Pod")
            .then_some(())
    })
    .await;
    ready_pods(&pods, 1).await;
    let kept = claims.get("data-web-0").await.unwrap().metadata.owner_references.unwrap();
    assert!(kept.iter().all(|o| o.kind == "StatefulSet"), "{kept:?}");

    // Retain (the default) leaves claims unowned.
    let mut retained = set(
        &node,
        0,
        json!({"replicas": 1, "volumeClaimTemplates": [{"metadata": {"name": "logs"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
    );
    retained.metadata.name = Some("keep".into());
    sets.create(&PostParams::default(), &retained).await.unwrap();
    let claim = eventually("logs-keep-0", WAIT, || async { claims.get_opt("logs-keep-0").await.unwrap() }).await;
    assert!(claim.metadata.owner_references.unwrap_or_default().is_empty());
}
