//! persistentVolumeClaim volumes: the claim (fetched as the node) must be bound, and
//! its PersistentVolume must be one this node can mount itself: hostPath (with its
//! type check) or local. Other volume sources need a CSI or in-tree plugin the agent
//! does not have, and say so.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::runtime::objects::{self, not_found};

/// Where a bound claim's volume lives on this node, and the hostPath type to check.
#[derive(Debug, PartialEq, Eq)]
pub struct ClaimPath {
    pub path: PathBuf,
    pub host_path_type: Option<String>,
}

/// The claim's PV name, as upstream's volume manager checks binding.
pub fn bound_volume(namespace: &str, claim: &PersistentVolumeClaim) -> Result<String, String> {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let phase = claim.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let volume = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
    if phase != "Bound" || volume.is_empty() {
        return Err(format!(
            "PVC {namespace}/{name} has non-bound phase ({phase:?}) or empty pvc.Spec.VolumeName ({volume:?})"
        ));
    }
    Ok(volume)
}

/// The node path of a PV, for the sources the agent mounts.
pub fn volume_path(pv: &PersistentVolume) -> Result<ClaimPath, String> {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    let spec = pv.spec.as_ref().ok_or_else(|| format!("persistentvolume {name:?} has no spec"))?;
    if let Some(h) = &spec.host_path {
        return Ok(ClaimPath { path: PathBuf::from(&h.path), host_path_type: h.type_.clone() });
    }
    if let Some(l) = &spec.local {
        return Ok(ClaimPath { path: PathBuf::from(&l.path), host_path_type: None });
    }
    let kind = serde_json::to_value(spec)
        .ok()
        .and_then(|v| {
            v.as_object().and_then(|o| {
                o.keys()
                    .find(|k| {
                        !matches!(
                            k.as_str(),
                            "accessModes"
                                | "capacity"
                                | "claimRef"
                                | "mountOptions"
                                | "nodeAffinity"
                                | "persistentVolumeReclaimPolicy"
                                | "storageClassName"
                                | "volumeMode"
                                | "volumeAttributesClassName"
                        )
                    })
                    .cloned()
            })
        })
        .unwrap_or_else(|| "unknown".into());
    Err(format!(
        "persistentvolume {name:?} uses the {kind} volume source, which this node cannot mount (only hostPath and local)"
    ))
}

/// Fetches the claim and its volume; the path to mount.
pub async fn resolve(client: &kube::Client, namespace: &str, claim_name: &str) -> Result<ClaimPath, String> {
    let claim = objects::claim(client, namespace, claim_name).await?.ok_or_else(|| {
        format!("error processing PVC {namespace}/{claim_name}: {}", not_found("persistentvolumeclaim", claim_name))
    })?;
    let volume = bound_volume(namespace, &claim)?;
    let pv = objects::volume(client, &volume).await?.ok_or_else(|| not_found("persistentvolume", &volume))?;
    volume_path(&pv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_claims_and_mountable_volumes() {
        let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"}, "spec": {"volumeName": "pv1"}, "status": {"phase": "Bound"}}))
        .unwrap();
        assert_eq!(bound_volume("ns", &claim).unwrap(), "pv1");
        let pending: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"}, "spec": {}, "status": {"phase": "Pending"}}))
        .unwrap();
        assert_eq!(
            bound_volume("ns", &pending),
            Err("PVC ns/c has non-bound phase (\"Pending\") or empty pvc.Spec.VolumeName (\"\")".into())
        );
        let host: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv1"}, "spec": {"hostPath": {"path": "/srv/data", "type": "DirectoryOrCreate"}}}))
        .unwrap();
        assert_eq!(
            volume_path(&host).unwrap(),
            ClaimPath { path: "/srv/data".into(), host_path_type: Some("DirectoryOrCreate".into()) }
        );
        let local: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv2"}, "spec": {"local": {"path": "/mnt/disk"}, "capacity": {"storage": "1Gi"}}}))
        .unwrap();
        assert_eq!(volume_path(&local).unwrap().path, PathBuf::from("/mnt/disk"));
        let nfs: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv3"}, "spec": {"nfs": {"server": "s", "path": "/"}, "capacity": {"storage": "1Gi"}}})).unwrap();
        assert!(volume_path(&nfs).unwrap_err().contains("uses the nfs volume source"));
    }
}
