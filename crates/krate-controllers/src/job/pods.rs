//! What the Job controller reads from its pods: phases, completion indexes, failure
//! counts per index, finish times (upstream's helpers in pkg/controller/job).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Running or pending, and not being deleted (upstream's `FilterActivePods`).
pub fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// Being deleted but not yet terminal: still holding its resources.
pub fn is_terminating(pod: &Pod) -> bool {
    !is_terminal(pod) && pod.metadata.deletion_timestamp.is_some()
}

pub fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

pub fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Only pods in phase Failed are replaced (podReplacementPolicy Failed).
pub fn only_replace_failed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed")
}

/// Upstream's `isPodFailed`: Failed, or (unless only failed pods are replaced) deleted
/// before it could succeed, so orphaned pods count as failures.
pub fn is_failed(pod: &Pod, job: &Job) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    if only_replace_failed(job) {
        return false;
    }
    pod.metadata.deletion_timestamp.is_some() && phase(pod) != "Succeeded"
}

/// The completion index annotation (or label), if valid.
pub fn completion_index(pod: &Pod) -> Option<i32> {
    let from = |m: Option<&std::collections::BTreeMap<String, String>>| m?.get(COMPLETION_INDEX)?.parse::<i32>().ok();
    from(pod.metadata.annotations.as_ref()).or_else(|| from(pod.metadata.labels.as_ref())).filter(|i| *i >= 0)
}

pub fn valid_index(pod: &Pod, completions: i32) -> Option<i32> {
    completion_index(pod).filter(|i| *i < completions)
}

fn annotation_count(pod: &Pod, key: &str) -> i32 {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(key)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

pub fn index_failure_count(pod: &Pod) -> i32 {
    annotation_count(pod, INDEX_FAILURE_COUNT)
}

pub fn index_ignored_failure_count(pod: &Pod) -> i32 {
    annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT)
}

/// When the pod finished: its last container exit, else its Ready condition's last
/// change, else its deletion, else its creation (upstream's `getFinishedTime`).
pub fn finished_time(pod: &Pod) -> Timestamp {
    let status = pod.status.as_ref();
    let exits = status.into_iter().flat_map(|s| {
        let containers = s.container_statuses.iter().flatten();
        containers.chain(s.init_container_statuses.iter().flatten())
    });
    let last_exit =
        exits.filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref().map(|t| t.0)).max();
    let ready_change = || {
        let conditions = status?.conditions.as_ref()?;
        conditions.iter().find(|c| c.type_ == "Ready").and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0)
    };
    last_exit
        .or_else(ready_change)
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
        .or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or_else(Timestamp::now)
}

/// Container restarts of a pending or running pod (restartPolicy OnFailure counts
/// these against backoffLimit).
pub fn restarts(pod: &Pod) -> i32 {
    let Some(status) = pod.status.as_ref() else { return 0 };
    let all = status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten());
    all.map(|c| c.restart_count).sum()
}
