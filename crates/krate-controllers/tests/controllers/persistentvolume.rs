//! The PersistentVolume binder through the real API server: static binding by size,
//! class, selector and volumeName, phases and annotations, reclaim policies,
//! WaitForFirstConsumer, and the retroactive default StorageClass.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn pv(name: &str, size: &str, policy: &str, labels: serde_json::Value) -> PersistentVolume {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {
        "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": policy,
        "storageClassName": "", "hostPath": {"path": format!("/tmp/{name}")}}}))
    .unwrap()
}

fn pvc(name: &str, size: &str, extra: serde_json::Value) -> PersistentVolumeClaim {
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}});
    spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn phase_pv(pv: &PersistentVolume) -> Option<String> {
    pv.status.as_ref()?.phase.clone()
}

async fn wait_pv_phase(pvs: &Api<PersistentVolume>, name: &str, phase: &str) -> PersistentVolume {
    eventually(&format!("{name} {phase}"), WAIT, || async {
        let pv = pvs.get(name).await.unwrap();
        (phase_pv(&pv).as_deref() == Some(phase)).then_some(pv)
    })
    .await
}

async fn wait_claim_bound(claims: &Api<PersistentVolumeClaim>, name: &str) -> PersistentVolumeClaim {
    eventually(&format!("{name} Bound"), WAIT, || async {
        let c = claims.get(name).await.unwrap();
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await
}

async fn wait_event(events: &Api<Event>, object: &str, reason: &str) -> Event {
    eventually(&format!("{reason} event for {object}"), WAIT, || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        list.into_iter()
            .find(|e| e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(object))
    })
    .await
}

#[tokio::test]
async fn claims_bind_to_matching_volumes_and_volumes_are_reclaimed() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["persistentvolume-binder"]);
    let client = cluster.admin().await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::all(client.clone());
    let pp = PostParams::default();
    pvs.create(&pp, &pv("small", "1Gi", "Retain", json!({}))).await.unwrap();
    pvs.create(&pp, &pv("big", "5Gi", "Delete", json!({}))).await.unwrap();
    pvs.create(&pp, &pv("gold", "2Gi", "Retain", json!({"tier": "gold"}))).await.unwrap();
    wait_pv_phase(&pvs, "small", "Available").await;

    claims.create(&pp, &pvc("data", "500Mi", json!({"storageClassName": ""}))).await.unwrap();
    let data = wait_claim_bound(&claims, "data").await;
    assert_eq!(data.spec.as_ref().unwrap().volume_name.as_deref(), Some("small"), "the smallest fitting volume");
    let annotations = data.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["pv.kubernetes.io/bind-completed"], "yes");
    assert_eq!(annotations["pv.kubernetes.io/bound-by-controller"], "yes");
    assert_eq!(data.status.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0, "1Gi");
    let small = wait_pv_phase(&pvs, "small", "Bound").await;
    let claim_ref = small.spec.as_ref().unwrap().claim_ref.clone().unwrap();
    assert_eq!((claim_ref.name.as_deref(), claim_ref.uid.as_deref()), (Some("data"), data.metadata.uid.as_deref()));
    assert_eq!(small.metadata.annotations.unwrap()["pv.kubernetes.io/bound-by-controller"], "yes");

    claims
        .create(
            &pp,
            &pvc("gold", "1Gi", json!({"storageClassName": "", "selector": {"matchLabels": {"tier": "gold"}}})),
        )
        .await
        .unwrap();
    let gold = wait_claim_bound(&claims, "gold").await;
    assert_eq!(gold.spec.unwrap().volume_name.as_deref(), Some("gold"));

    claims.create(&pp, &pvc("named", "1Gi", json!({"storageClassName": "", "volumeName": "big"}))).await.unwrap();
    let named = wait_claim_bound(&claims, "named").await;
    assert!(!named.metadata.annotations.unwrap().contains_key("pv.kubernetes.io/bound-by-controller"));

    // Nothing left: the claim waits.
    claims.create(&pp, &pvc("none", "1Gi", json!({"storageClassName": ""}))).await.unwrap();
    let failed = wait_event(&events, "none", "FailedBinding").await;
    assert_eq!(
        failed.message.as_deref(),
        Some("no persistent volumes available for this claim and no storage class is set")
    );

    // Reclaim: Retain keeps the volume Released, Delete without a deleter fails it.
    claims.delete("data", &DeleteParams::default()).await.unwrap();
    wait_pv_phase(&pvs, "small", "Released").await;
    claims.delete("named", &DeleteParams::default()).await.unwrap();
    let big = wait_pv_phase(&pvs, "big", "Failed").await;
    assert!(big.status.unwrap().message.unwrap().contains("no deletable volume plugin matched"));
    wait_event(&events, "big", "VolumeFailedDelete").await;
}

#[tokio::test]
async fn wait_for_first_consumer_and_the_retroactive_default_class() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["persistentvolume-binder"]);
    let client = cluster.admin().await;
    let classes: Api<StorageClass> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::all(client.clone());
    let pp = PostParams::default();
    let local: StorageClass = serde_json::from_value(json!({"metadata": {"name": "local"},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}))
    .unwrap();
    classes.create(&pp, &local).await.unwrap();
    claims.create(&pp, &pvc("later", "1Gi", json!({"storageClassName": "local"}))).await.unwrap();
    let waiting = wait_event(&events, "later", "WaitForFirstConsumer").await;
    assert_eq!(waiting.message.as_deref(), Some("waiting for first consumer to be created before binding"));
    assert_eq!(claims.get("later").await.unwrap().status.unwrap().phase.as_deref(), Some("Pending"));

    // A claim created while no class is default keeps no class, until one becomes default.
    claims.create(&pp, &pvc("classless", "1Gi", json!({}))).await.unwrap();
    let standard: StorageClass = serde_json::from_value(json!({"metadata": {"name": "standard",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "example.com/csi"}))
    .unwrap();
    classes.create(&pp, &standard).await.unwrap();
    eventually("default class assigned retroactively", WAIT, || async {
        let c = claims.get("classless").await.unwrap();
        (c.spec?.storage_class_name.as_deref() == Some("standard")).then_some(())
    })
    .await;
    wait_event(&events, "classless", "ExternalProvisioning").await;

    // Once a class is default, DefaultStorageClass admission gives it to new claims at once;
    // an explicit "" stays classless.
    let fresh = claims.create(&pp, &pvc("fresh", "1Gi", json!({}))).await.unwrap();
    assert_eq!(fresh.spec.unwrap().storage_class_name.as_deref(), Some("standard"));
    let none = claims.create(&pp, &pvc("explicit-none", "1Gi", json!({"storageClassName": ""}))).await.unwrap();
    assert_eq!(none.spec.unwrap().storage_class_name.as_deref(), Some(""));
}
