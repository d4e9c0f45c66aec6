//! batch.

use serde_json::{Value, json};

use super::*;
use crate::object;

/// Upstream's Job STATUS: Complete or Failed, Terminating while deleted, then Suspended,
/// FailureTarget, else Running.
pub(super) fn job_status(o: &Value) -> &'static str {
    // hasJobCondition looks at the first condition of a type only.
    let is = |t: &str| {
        items(o, "/status/conditions")
            .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
            .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
    };
    match () {
        _ if is("Complete") => "Complete",
        _ if is("Failed") => "Failed",
        _ if object::is_deleting(o) => "Terminating",
        _ if is("Suspended") => "Suspended",
        _ if is("FailureTarget") => "FailureTarget",
        _ => "Running",
    }
}

pub(super) fn job_row(o: &Value, age: &str) -> Vec<Value> {
    let succeeded = n(o, "/status/succeeded");
    let completions = match (o.pointer("/spec/completions").and_then(Value::as_i64), n(o, "/spec/parallelism")) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, p) if p > 1 => format!("{succeeded}/1 of {p}"),
        _ => format!("{succeeded}/1"),
    };
    let start = o.pointer("/status/startTime").and_then(Value::as_str).and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let end = o
        .pointer("/status/completionTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .unwrap_or_else(jiff::Timestamp::now);
    let duration = start.map(|st| human_duration((end - st).get_seconds())).unwrap_or_default();
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(job_status(o)),
        json!(completions),
        json!(duration),
        json!(age),
        json!(names),
        json!(images),
        json!(format_selector(o.pointer("/spec/selector"))),
    ]
}

/// printBoolPtr: "True", "False", or "<unset>".
fn bool_ptr(v: Option<&Value>) -> &'static str {
    match v.and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

pub(super) fn cron_job_row(o: &Value, age: &str) -> Vec<Value> {
    let (names, images) = containers_and_images(o.pointer("/spec/jobTemplate/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/spec/schedule"))),
        json!(or(o.pointer("/spec/timeZone"), "<none>")),
        json!(bool_ptr(o.pointer("/spec/suspend"))),
        json!(len(o.pointer("/status/active"))),
        json!(age_of(o.pointer("/status/lastScheduleTime")).unwrap_or_else(|| "<none>".into())),
        json!(age),
        json!(names),
        json!(images),
        json!(format_selector(o.pointer("/spec/jobTemplate/spec/selector"))),
    ]
}

const JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Status"),
    col("Completions"),
    col("Duration"),
    AGE,
    wide("Containers"),
    wide("Images"),
    wide("Selector"),
];
const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Schedule"),
    col("Timezone"),
    boolean("Suspend"),
    int("Active"),
    col("Last Schedule"),
    AGE,
    wide("Containers"),
    wide("Images"),
    wide("Selector"),
];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    match (group, kind) {
        ("batch", "Job") => Some((JOB_COLUMNS, job_row)),
        ("batch", "CronJob") => Some((CRON_JOB_COLUMNS, cron_job_row)),
        _ => None,
    }
}
