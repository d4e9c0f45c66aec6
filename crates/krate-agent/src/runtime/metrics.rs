//! The runtime side's Prometheus metrics (upstream kubelet's names).

use std::sync::LazyLock;

use prometheus::{Histogram, HistogramVec, register_histogram, register_histogram_vec};

const BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

pub static POD_START: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "kubelet_pod_start_duration_seconds",
        "Time from a pod's creation until the agent first reported it Running.",
        BUCKETS.to_vec()
    )
    .expect("metric registers once")
});

pub static RUNTIME_OPERATIONS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "kubelet_runtime_operations_duration_seconds",
        "CRI call latency by operation.",
        &["operation_type"],
        BUCKETS.to_vec()
    )
    .expect("metric registers once")
});

/// Records one CRI call of `operation` that took `elapsed`.
pub fn runtime_operation(operation: &str, elapsed: std::time::Duration) {
    RUNTIME_OPERATIONS.with_label_values(&[operation]).observe(elapsed.as_secs_f64());
}
