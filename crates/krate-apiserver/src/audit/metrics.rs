//! Audit metrics, upstream's names.

use std::sync::LazyLock;

use prometheus::{IntCounter, IntCounterVec, register_int_counter, register_int_counter_vec};

pub static EVENTS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "apiserver_audit_event_total",
        "Counter of audit events generated and sent to the audit backend."
    )
    .expect("metric registers once")
});

pub static ERRORS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "apiserver_audit_error_total",
        "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.",
        &["plugin"]
    )
    .expect("metric registers once")
});

pub static LEVELS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "apiserver_audit_level_total",
        "Counter of policy levels for audit events (1 per request).",
        &["level"]
    )
    .expect("metric registers once")
});
