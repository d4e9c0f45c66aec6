//! Admission's Prometheus metrics, with upstream's names and labels.

use std::sync::LazyLock;

use prometheus::{HistogramVec, IntCounterVec, register_histogram_vec, register_int_counter_vec};

/// Time each plugin takes, by phase ("admit" for mutation, "validate") and outcome.
pub static PLUGIN_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "apiserver_admission_controller_admission_duration_seconds",
        "Admission controller latency histogram in seconds, by name, operation, rejection and type (admit or validate).",
        &["name", "operation", "rejected", "type"],
        vec![0.005, 0.025, 0.1, 0.5, 1.0, 2.5]
    )
    .expect("metric registers once")
});

/// PodSecurity's decisions: allow or deny, per mode and policy.
pub static POD_SECURITY_EVALUATIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pod_security_evaluations_total",
        "Number of policy evaluations that occurred, not counting ignored or exempt requests.",
        &["decision", "mode", "policy_level", "policy_version", "request_operation", "resource", "subresource"]
    )
    .expect("metric registers once")
});

/// Requests PodSecurity let through because of an exemption.
pub static POD_SECURITY_EXEMPTIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pod_security_exemptions_total",
        "Number of exempt requests, not counting ignored or out of scope requests.",
        &["request_operation", "resource", "subresource"]
    )
    .expect("metric registers once")
});

pub fn operation(op: krate_api::admission::Operation) -> &'static str {
    use krate_api::admission::Operation::*;
    match op {
        Create => "create",
        Update => "update",
        Delete => "delete",
        Connect => "connect",
    }
}

/// ValidatingAdmissionPolicy checks: per policy, the action taken and whether it
/// came from a failed validation or an error (upstream's metric of this name).
pub static VALIDATING_POLICY_CHECKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "apiserver_validating_admission_policy_check_total",
        "Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken.",
        &["policy", "policy_binding", "error_type", "enforcement_action"]
    )
    .expect("metric registers once")
});
