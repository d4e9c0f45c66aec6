//! ControllerRevision history shared by the StatefulSet and DaemonSet controllers, as
//! upstream's pkg/controller/history: a revision holds a patch that replaces the pod
//! template; its name is `<parent>-<hash>` where the hash covers the data and the
//! parent's collisionCount; a template that returns to an earlier revision's reuses that
//! revision with the next revision number (what `kubectl rollout undo` relies on).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::Error;

/// Upstream's label naming the revision (StatefulSet pods carry the revision's name in
/// it, DaemonSet pods and every revision its hash).
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The alphabet of upstream's rand.SafeEncodeString (no vowels, no confusable digits).
const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv1_32(data: &[u8]) -> u32 {
    data.iter().fold(0x811c9dc5u32, |h, b| h.wrapping_mul(0x0100_0193) ^ u32::from(*b))
}

/// The revision hash: FNV-1 over the data and the collision count, its decimal form
/// safe-encoded.
pub fn hash(data: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(data).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(c.to_string().as_bytes());
    }
    fnv1_32(&bytes).to_string().bytes().map(|b| SAFE[usize::from(b) % SAFE.len()] as char).collect()
}

pub fn name(parent: &str, hash: &str) -> String {
    format!("{parent}-{hash}")
}

/// The revision data for a pod template: a patch that replaces the whole template.
pub fn template_patch(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(m) = t.as_object_mut() {
        m.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// The pod template a revision records.
pub fn template_of(revision: &ControllerRevision) -> Option<Value> {
    let mut t = revision.data.as_ref()?.0.pointer("/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    Some(t)
}

/// A parent of revisions (a StatefulSet or DaemonSet), as the history needs it.
pub struct Parent<'a, K> {
    pub object: &'a K,
    pub template: Value,
    /// The template's labels, which the revision carries too (so `kubectl rollout
    /// history` finds it by the parent's selector).
    pub labels: BTreeMap<String, String>,
    pub collision_count: Option<i32>,
}

/// The revision for the parent's current template, made or reused; with the collision
/// count it was found under (higher than before when names collided).
pub async fn update_revision<K: Resource<DynamicType = ()>>(
    api: &Api<ControllerRevision>,
    parent: &Parent<'_, K>,
    revisions: &[ControllerRevision],
) -> Result<(ControllerRevision, Option<i32>), Error> {
    let data = template_patch(&parent.template);
    let max = revisions.iter().map(|r| r.revision).max().unwrap_or(0);
    if let Some(equal) =
        revisions.iter().filter(|r| r.data.as_ref().map(|d| &d.0) == Some(&data)).max_by_key(|r| r.revision)
    {
        if equal.revision == max {
            return Ok((equal.clone(), parent.collision_count));
        }
        // Back to an earlier template: that revision becomes the newest.
        let mut bumped = equal.clone();
        bumped.revision = max + 1;
        let updated = api.replace(&equal.name_any(), &PostParams::default(), &bumped).await?;
        return Ok((updated, parent.collision_count));
    }
    let mut collision_count = parent.collision_count;
    loop {
        let h = hash(&data, collision_count);
        let mut labels = parent.labels.clone();
        labels.insert(REVISION_LABEL.into(), h.clone());
        let mut revision =
            ControllerRevision { data: Some(RawExtension(data.clone())), revision: max + 1, ..Default::default() };
        revision.metadata.name = Some(name(&parent.object.name_any(), &h));
        revision.metadata.namespace = parent.object.namespace();
        revision.metadata.labels = Some(labels);
        revision.metadata.owner_references = Some(vec![crate::pods::controller_ref(parent.object)]);
        match api.create(&PostParams::default(), &revision).await {
            Ok(created) => return Ok((created, collision_count)),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = api.get(&revision.name_any()).await?;
                let ours = crate::pods::controlled_by(&existing.metadata, parent.object);
                if ours && existing.data.as_ref().map(|d| &d.0) == Some(&data) {
                    return Ok((existing, collision_count));
                }
                // A different revision under this name: hash again with the next count.
                collision_count = Some(collision_count.unwrap_or(0) + 1);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Deletes the oldest revisions beyond `limit`, never one named in `live` (the current
/// and update revisions, and those pods still run).
pub async fn truncate(
    api: &Api<ControllerRevision>,
    revisions: &[ControllerRevision],
    live: &[String],
    limit: i32,
) -> Result<(), Error> {
    let mut old: Vec<&ControllerRevision> = revisions.iter().filter(|r| !live.contains(&r.name_any())).collect();
    let excess = old.len().saturating_sub(limit.max(0) as usize);
    old.sort_by_key(|r| r.revision);
    for r in old.into_iter().take(excess) {
        match api.delete(&r.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_safe_encoded_and_depend_on_the_collision_count() {
        let data = template_patch(&json!({"metadata": {"labels": {"app": "a"}}}));
        let h = hash(&data, None);
        assert!(!h.is_empty() && h.bytes().all(|b| SAFE.contains(&b)));
        assert_eq!(h, hash(&data, None));
        assert_ne!(h, hash(&data, Some(1)));
        assert_eq!(name("web", &h), format!("web-{h}"));
    }

    #[test]
    fn fnv1_matches_the_reference_vectors() {
        assert_eq!(fnv1_32(b""), 0x811c9dc5);
        assert_eq!(fnv1_32(b"a"), 0x050c5d7e);
    }

    #[test]
    fn the_template_round_trips_through_a_revision() {
        let template = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": []}});
        let revision = ControllerRevision { data: Some(RawExtension(template_patch(&template))), ..Default::default() };
        assert_eq!(revision.data.as_ref().unwrap().0["spec"]["template"]["$patch"], "replace");
        assert_eq!(template_of(&revision), Some(template));
    }
}
