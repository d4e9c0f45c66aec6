//! Job conditions as upstream sets them (`ensureJobConditionStatus`, `newCondition`).

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
pub const FAILURE_TARGET: &str = "FailureTarget";
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
pub const SUSPENDED: &str = "Suspended";

pub fn new(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn find<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

pub fn is_true(job: &Job, type_: &str) -> bool {
    find(job, type_).is_some_and(|c| c.status == "True")
}

/// Complete or Failed: nothing more to do for the Job.
pub fn is_finished(job: &Job) -> bool {
    is_true(job, COMPLETE) || is_true(job, FAILED)
}

/// Sets the condition's status (adding it only when it is to be True); whether it changed.
pub fn ensure(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status == status && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message) {
            return false;
        }
        if c.status != status {
            c.last_transition_time = Some(Time(now));
        }
        c.status = status.into();
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        c.last_probe_time = Some(Time(now));
        return true;
    }
    if status != "True" {
        return false;
    }
    let mut c = new(type_, reason, message, now);
    c.status = status.into();
    conditions.push(c);
    true
}
