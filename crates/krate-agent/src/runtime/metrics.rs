//! The runtime side's Prometheus metrics (upstream kubelet's names).

use std::sync::LazyLock;

use prometheus::{
    CounterVec, Histogram, HistogramVec, register_counter_vec, register_histogram, register_histogram_vec,
};

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

pub static PROBE_TOTAL: LazyLock<CounterVec> = LazyLock::new(|| {
    register_counter_vec!(
        "prober_probe_total",
        "Cumulative number of a liveness, readiness or startup probe for a container by result.",
        &["probe_type", "result", "container", "pod", "namespace", "pod_uid"]
    )
    .expect("metric registers once")
});

pub static PROBE_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "prober_probe_duration_seconds",
        "Duration in seconds for a probe response.",
        &["probe_type", "container", "pod", "namespace"],
        BUCKETS.to_vec()
    )
    .expect("metric registers once")
});

const PROBE_TYPES: [&str; 3] = ["Liveness", "Readiness", "Startup"];
const PROBE_RESULTS: [&str; 3] = ["successful", "failed", "unknown"];

/// Counts one probe run (`result`: successful, failed or unknown).
pub fn probe_result(probe_type: &str, result: &str, container: &str, pod: &str, namespace: &str, uid: &str) {
    PROBE_TOTAL.with_label_values(&[probe_type, result, container, pod, namespace, uid]).inc();
}

/// Records how long a successful probe took.
pub fn probe_duration(probe_type: &str, container: &str, pod: &str, namespace: &str, elapsed: std::time::Duration) {
    PROBE_DURATION.with_label_values(&[probe_type, container, pod, namespace]).observe(elapsed.as_secs_f64());
}

/// Drops the probe series of a pod that is gone.
pub fn forget_probes(namespace: &str, pod: &str, uid: &str) {
    use prometheus::core::Collector;
    for family in PROBE_TOTAL.collect() {
        for m in family.get_metric() {
            let label = |name: &str| {
                m.get_label().iter().find(|l| l.name() == name).map(|l| l.value().to_string()).unwrap_or_default()
            };
            if label("pod_uid") != uid {
                continue;
            }
            let container = label("container");
            for t in PROBE_TYPES {
                for r in PROBE_RESULTS {
                    let _ = PROBE_TOTAL.remove_label_values(&[t, r, &container, pod, namespace, uid]);
                }
                let _ = PROBE_DURATION.remove_label_values(&[t, &container, pod, namespace]);
            }
        }
    }
}
