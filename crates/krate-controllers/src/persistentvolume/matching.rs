//! Which PersistentVolume a claim binds to (upstream's findBestMatchForClaim): a volume
//! pre-bound to the claim first, else the smallest available one of the claim's class
//! and volume mode with every requested access mode, enough capacity and labels its
//! selector picks.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use krate_api::kinds::quantity::Quantity;
use kube::ResourceExt;

pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// The claim's class ("" for none).
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    claim.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

pub fn volume_class(pv: &PersistentVolume) -> &str {
    pv.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

/// The default StorageClass: of those marked default, the newest (then by name), as upstream.
pub fn default_class(classes: &[Arc<StorageClass>]) -> Option<Arc<StorageClass>> {
    let mut defaults: Vec<&Arc<StorageClass>> = classes
        .iter()
        .filter(|c| c.annotations().get(DEFAULT_CLASS_ANNOTATION).map(String::as_str) == Some("true"))
        .collect();
    defaults.sort_by(|a, b| {
        let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(b).cmp(&created(a)).then_with(|| a.name_any().cmp(&b.name_any()))
    });
    defaults.first().map(|c| (*c).clone())
}

fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let have = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

fn capacity(pv: &PersistentVolume) -> Option<Quantity> {
    let q = pv.spec.as_ref()?.capacity.as_ref()?.get("storage")?;
    Quantity::parse(&q.0).ok()
}

fn request(claim: &PersistentVolumeClaim) -> Quantity {
    let q = claim.spec.as_ref().and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage").cloned());
    q.and_then(|q| Quantity::parse(&q.0).ok()).unwrap_or_else(Quantity::zero)
}

/// Whether the volume is pre-bound to this claim (claimRef by name, uid unset or equal).
pub fn prebound_to(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else { return false };
    r.name.as_deref() == Some(claim.name_any().as_str())
        && r.namespace == claim.namespace()
        && r.uid.as_deref().is_none_or(|u| u.is_empty() || Some(u) == claim.metadata.uid.as_deref())
}

/// Whether the volume could serve the claim (ignoring who it is bound to).
pub fn fits(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let (Some(spec), Some(cspec)) = (pv.spec.as_ref(), claim.spec.as_ref()) else { return false };
    if pv.metadata.deletion_timestamp.is_some() || volume_class(pv) != claim_class(claim) {
        return false;
    }
    let mode = |m: Option<&String>| m.map_or("Filesystem", |s| s.as_str()).to_string();
    if mode(spec.volume_mode.as_ref()) != mode(cspec.volume_mode.as_ref()) {
        return false;
    }
    let have = spec.access_modes.clone().unwrap_or_default();
    if !cspec.access_modes.iter().flatten().all(|m| have.contains(m)) {
        return false;
    }
    if let Some(selector) = &cspec.selector
        && !selector_matches(selector, pv.labels())
    {
        return false;
    }
    capacity(pv).is_some_and(|c| c.cmp_q(&request(claim)) != std::cmp::Ordering::Less)
}

/// The volume to bind the claim to, if any.
pub fn best_match(volumes: &[Arc<PersistentVolume>], claim: &PersistentVolumeClaim) -> Option<Arc<PersistentVolume>> {
    if let Some(pv) = volumes.iter().find(|pv| prebound_to(pv, claim) && fits(pv, claim)) {
        return Some(pv.clone());
    }
    let available = |pv: &&Arc<PersistentVolume>| {
        pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_none())
            && pv.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Available" || p == "Pending")
    };
    volumes
        .iter()
        .filter(available)
        .filter(|pv| fits(pv, claim))
        .min_by(|a, b| {
            let (ca, cb) = (capacity(a).unwrap_or_else(Quantity::zero), capacity(b).unwrap_or_else(Quantity::zero));
            ca.cmp_q(&cb).then_with(|| a.name_any().cmp(&b.name_any()))
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(name: &str, size: &str, class: &str, labels: serde_json::Value) -> Arc<PersistentVolume> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {
                "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                "hostPath": {"path": "/tmp"}}}))
            .unwrap(),
        )
    }

    fn claim(size: &str, class: &str, selector: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}},
            "storageClassName": class, "selector": selector}}))
        .unwrap()
    }

    #[test]
    fn smallest_fitting_volume_of_the_class_wins() {
        let vols = vec![
            pv("big", "10Gi", "", json!({})),
            pv("small", "1Gi", "", json!({})),
            pv("tiny", "100Mi", "", json!({})),
            pv("fast", "1Gi", "fast", json!({})),
        ];
        assert_eq!(best_match(&vols, &claim("500Mi", "", json!(null))).unwrap().name_any(), "small");
        assert_eq!(best_match(&vols, &claim("500Mi", "fast", json!(null))).unwrap().name_any(), "fast");
        assert!(best_match(&vols, &claim("20Gi", "", json!(null))).is_none());
    }

    #[test]
    fn selectors_and_prebinding() {
        let mut vols = vec![pv("a", "1Gi", "", json!({"tier": "gold"})), pv("b", "1Gi", "", json!({}))];
        let gold = claim("1Gi", "", json!({"matchLabels": {"tier": "gold"}}));
        assert_eq!(best_match(&vols, &gold).unwrap().name_any(), "a");
        let mut reserved = (*vols[1]).clone();
        reserved.spec.as_mut().unwrap().claim_ref = Some(k8s_openapi::api::core::v1::ObjectReference {
            name: Some("c".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        });
        vols[1] = Arc::new(reserved);
        assert_eq!(best_match(&vols, &claim("1Gi", "", json!(null))).unwrap().name_any(), "b");
    }
}
