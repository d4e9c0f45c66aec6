//! Controller references (upstream's ControllerRefManager): which objects a workload
//! controls, adopting matching orphans and releasing controlled objects its selector no
//! longer matches. Adoption and release are merge patches carrying the object's
//! resourceVersion, so a concurrent change makes them fail and the sync retry.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::core::{Selector, SelectorExt};
use serde_json::json;

/// The controller reference among `meta`'s owner references, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

/// The owner reference a controller puts on what it creates (blockOwnerDeletion as upstream).
pub fn controller_ref(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `selector` selects `labels`; an invalid selector selects nothing.
pub fn selects(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let empty = BTreeMap::new();
    match Selector::try_from(selector.clone()) {
        Ok(s) => s.matches(labels.unwrap_or(&empty)),
        Err(_) => false,
    }
}

/// What claiming decides for one candidate object.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// Controlled by the owner and selected: it is the owner's.
    Owned,
    /// Selected, controlled by nobody: adopt it.
    Adopt,
    /// Controlled by the owner but no longer selected: release it.
    Release,
    /// Not the owner's business.
    Ignore,
}

/// Upstream's ClaimObject decision for `candidate` against an owner with `owner_uid`,
/// `selector`, and whether the owner is being deleted (then it neither adopts nor releases).
pub fn claim(owner_uid: &str, owner_deleting: bool, selector: &LabelSelector, candidate: &ObjectMeta) -> Claim {
    let selected = selects(selector, candidate.labels.as_ref());
    match controller_of(candidate) {
        Some(r) if r.uid != owner_uid => Claim::Ignore,
        Some(_) if selected => Claim::Owned,
        Some(_) if owner_deleting => Claim::Ignore,
        Some(_) => Claim::Release,
        None if owner_deleting || !selected || candidate.deletion_timestamp.is_some() => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// A merge patch adding `owner` as controller of an object (optimistic on its resourceVersion).
pub fn adopt_patch(candidate: &ObjectMeta, owner: &OwnerReference) -> serde_json::Value {
    let mut refs = candidate.owner_references.clone().unwrap_or_default();
    refs.push(owner.clone());
    json!({"metadata": {"ownerReferences": refs, "resourceVersion": candidate.resource_version, "uid": candidate.uid}})
}

/// A merge patch removing the owner references with `owner_uid` from an object.
pub fn release_patch(candidate: &ObjectMeta, owner_uid: &str) -> serde_json::Value {
    let refs: Vec<&OwnerReference> =
        candidate.owner_references.iter().flatten().filter(|r| r.uid != owner_uid).collect();
    json!({"metadata": {"ownerReferences": refs, "resourceVersion": candidate.resource_version, "uid": candidate.uid}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], controller: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            owner_references: controller
                .map(|uid| vec![OwnerReference { uid: uid.into(), controller: Some(true), ..Default::default() }]),
            ..Default::default()
        }
    }

    #[test]
    fn claims_as_upstream() {
        let sel =
            LabelSelector { match_labels: Some([("app".to_string(), "a".to_string())].into()), ..Default::default() };
        assert_eq!(claim("u", false, &sel, &meta(&[("app", "a")], Some("u"))), Claim::Owned);
        assert_eq!(claim("u", false, &sel, &meta(&[("app", "a")], None)), Claim::Adopt);
        assert_eq!(claim("u", true, &sel, &meta(&[("app", "a")], None)), Claim::Ignore);
        assert_eq!(claim("u", false, &sel, &meta(&[("app", "b")], Some("u"))), Claim::Release);
        assert_eq!(claim("u", true, &sel, &meta(&[("app", "b")], Some("u"))), Claim::Ignore);
        assert_eq!(claim("u", false, &sel, &meta(&[("app", "a")], Some("other"))), Claim::Ignore);
        assert_eq!(claim("u", false, &sel, &meta(&[("app", "b")], None)), Claim::Ignore);
    }
}
