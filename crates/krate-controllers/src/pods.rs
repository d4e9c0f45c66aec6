//! What the workload controllers ask of pods and owner references, as upstream's
//! podutil helpers answer it.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Resource, ResourceExt};

pub fn is_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// When the pod last became Ready (its Ready condition's transition time).
fn ready_since(pod: &Pod) -> Option<Timestamp> {
    ready_condition(pod).filter(|c| c.status == "True").and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0)
}

fn ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && is_ready(pod)
}

/// Ready for at least `min_ready_seconds` (upstream's IsPodAvailable).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !is_ready(pod) {
        return false;
    }
    min_ready_seconds <= 0
        || ready_since(pod).is_some_and(|t| t + SignedDuration::from_secs(min_ready_seconds.into()) <= now)
}

/// How long until a Ready pod becomes available, if it is not yet.
pub fn until_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> Option<std::time::Duration> {
    let since = ready_since(pod)?;
    let at = since + SignedDuration::from_secs(min_ready_seconds.into());
    (at > now).then(|| at.duration_since(now).unsigned_abs())
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Succeeded or Failed: the pod will not run again.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

pub fn is_failed(pod: &Pod) -> bool {
    phase(pod) == "Failed"
}

/// The uid of the object's controller (its ownerReference with controller: true).
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true)).map(|r| r.uid.as_str())
}

/// Whether `owner` controls `meta`.
pub fn controlled_by<K: Resource>(meta: &ObjectMeta, owner: &K) -> bool {
    owner.meta().uid.as_deref().is_some_and(|uid| controller_uid(meta) == Some(uid))
}

/// The reference a controller puts on what it makes (controller, blockOwnerDeletion).
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A plain (non-controller) reference, as the StatefulSet controller puts on claims.
pub fn owner_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference { controller: None, block_owner_deletion: None, ..controller_ref(owner) }
}

/// Scales an int-or-percent against `total` (upstream's GetScaledValueFromIntOrPercent).
pub fn scaled(
    value: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    total: i32,
    round_up: bool,
    default: i32,
) -> Result<i32, String> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match value {
        None => Ok(default),
        Some(IntOrString::Int(n)) => Ok(*n),
        Some(IntOrString::String(s)) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let product = pct * i64::from(total);
            let v = if round_up { (product + 99).div_euclid(100) } else { product.div_euclid(100) };
            Ok(v as i32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn percentages_scale_with_rounding_as_upstream() {
        let p = IntOrString::String("25%".into());
        assert_eq!(scaled(Some(&p), 10, true, 0), Ok(3));
        assert_eq!(scaled(Some(&p), 10, false, 0), Ok(2));
        assert_eq!(scaled(Some(&IntOrString::Int(4)), 10, false, 0), Ok(4));
        assert_eq!(scaled(None, 10, false, 1), Ok(1));
        assert!(scaled(Some(&IntOrString::String("x".into())), 10, false, 0).is_err());
    }
}
