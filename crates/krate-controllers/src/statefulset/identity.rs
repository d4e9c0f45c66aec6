//! A StatefulSet pod's stable identity and storage, as upstream's stateful_set_utils:
//! name `<set>-<ordinal>`, hostname and subdomain (serviceName), the pod-name and
//! pod-index labels, the revision label, and one claim per volumeClaimTemplate named
//! `<template>-<set>-<ordinal>`, with ownerReferences per the retention policy.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use crate::history::REVISION_LABEL;
use crate::pods;

pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", set.name_any())
}

pub fn claim_name(template: &PersistentVolumeClaim, set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{}", template.name_any(), pod_name(set, ordinal))
}

fn claim_templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec.as_ref().and_then(|s| s.volume_claim_templates.as_deref()).unwrap_or(&[])
}

/// The pod at `ordinal` from `template` (the template of the revision it gets).
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ordinal: i32) -> Pod {
    let name = pod_name(set, ordinal);
    let mut pod =
        Pod { metadata: template.metadata.clone().unwrap_or_default(), spec: template.spec.clone(), status: None };
    pod.metadata.name = Some(name.clone());
    pod.metadata.generate_name = None;
    pod.metadata.namespace = set.namespace();
    pod.metadata.owner_references = Some(vec![pods::controller_ref(set)]);
    let labels = pod.metadata.labels.get_or_insert_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    let spec = pod.spec.get_or_insert_default();
    spec.hostname = Some(name);
    spec.subdomain = set.spec.as_ref().and_then(|s| s.service_name.clone()).filter(|s| !s.is_empty());
    // Each claim template replaces any template volume of its name.
    let volumes = spec.volumes.get_or_insert_default();
    for t in claim_templates(set) {
        volumes.retain(|v| v.name != t.name_any());
        volumes.push(Volume {
            name: t.name_any(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(t, set, ordinal),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    pod
}

/// whenDeleted and whenScaled of the retention policy (Retain by default).
fn retention(set: &StatefulSet) -> (bool, bool) {
    let p = set.spec.as_ref().and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let delete = |v: Option<&String>| v.map(String::as_str) == Some("Delete");
    (delete(p.and_then(|p| p.when_deleted.as_ref())), delete(p.and_then(|p| p.when_scaled.as_ref())))
}

/// The owners a claim should have: the set when whenDeleted is Delete; the pod when
/// whenScaled is Delete and the pod is condemned (so the claim goes with it).
pub fn claim_owners(set: &StatefulSet, condemned_pod: Option<&Pod>) -> Vec<OwnerReference> {
    let (when_deleted, when_scaled) = retention(set);
    let mut owners = Vec::new();
    if when_deleted {
        owners.push(pods::owner_ref(set));
    }
    if let (true, Some(pod)) = (when_scaled, condemned_pod) {
        owners.push(pods::owner_ref(pod));
    }
    owners
}

/// Sets the claim's owner references to set/pod ones in `owners`, keeping owners that
/// are neither; Some(claim) when that changed it.
pub fn with_owners(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: Option<&Pod>,
    owners: &[OwnerReference],
) -> Option<PersistentVolumeClaim> {
    let ours = |r: &OwnerReference| {
        Some(&r.uid) == set.metadata.uid.as_ref() || pod.is_some_and(|p| Some(&r.uid) == p.metadata.uid.as_ref())
    };
    let current = claim.metadata.owner_references.clone().unwrap_or_default();
    let mut wanted: Vec<OwnerReference> = current.iter().filter(|r| !ours(r)).cloned().collect();
    wanted.extend(owners.iter().cloned());
    let same = wanted.len() == current.len() && wanted.iter().all(|w| current.iter().any(|c| c.uid == w.uid));
    if same {
        return None;
    }
    let mut updated = claim.clone();
    updated.metadata.owner_references = Some(wanted);
    Some(updated)
}

/// The claims the pod at `ordinal` needs.
pub fn claims(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let selector_labels: BTreeMap<String, String> =
        set.spec.as_ref().and_then(|s| s.selector.match_labels.clone()).unwrap_or_default();
    claim_templates(set)
        .iter()
        .map(|t| {
            let mut claim = PersistentVolumeClaim { spec: t.spec.clone(), ..Default::default() };
            claim.metadata.name = Some(claim_name(t, set, ordinal));
            claim.metadata.namespace = set.namespace();
            claim.metadata.annotations = t.metadata.annotations.clone();
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(selector_labels.clone());
            claim.metadata.labels = Some(labels);
            let owners = claim_owners(set, None);
            if !owners.is_empty() {
                claim.metadata.owner_references = Some(owners);
            }
            claim
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set() -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {"serviceName": "nginx", "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"}},
        }))
        .unwrap()
    }

    #[test]
    fn pods_get_their_stable_identity_and_claims() {
        let s = set();
        let template = s.spec.as_ref().unwrap().template.clone();
        let pod = new_pod(&s, &template, "web-abc", 2);
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("web-2"));
        assert_eq!(labels[POD_NAME_LABEL], "web-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        assert_eq!(labels[REVISION_LABEL], "web-abc");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("nginx"));
        let volume = &spec.volumes.unwrap()[0];
        assert_eq!(volume.persistent_volume_claim.as_ref().unwrap().claim_name, "data-web-2");
        let claim = &claims(&s, 2)[0];
        assert_eq!(claim.metadata.name.as_deref(), Some("data-web-2"));
        assert_eq!(claim.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(claim.metadata.owner_references.as_ref().unwrap()[0].uid, "set-uid");
    }
}
