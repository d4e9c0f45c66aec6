//! Controller metrics (upstream's workqueue/controller-runtime-like names).

use std::sync::LazyLock;

use prometheus::{IntCounterVec, register_int_counter_vec};

/// Reconciles by controller and result (success, error).
pub static RECONCILES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "krate_controller_reconcile_total",
        "Reconciles by controller and result.",
        &["controller", "result"]
    )
    .expect("metric registers once")
});

pub fn record(controller: &str, ok: bool) {
    RECONCILES.with_label_values(&[controller, if ok { "success" } else { "error" }]).inc();
}
