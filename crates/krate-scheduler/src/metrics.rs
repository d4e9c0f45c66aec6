//! The scheduler's Prometheus metrics (upstream's names, krate_ prefixed).

use std::sync::LazyLock;

use prometheus::{
    Histogram, HistogramVec, IntCounterVec, IntGauge, exponential_buckets, register_histogram, register_histogram_vec,
    register_int_counter_vec, register_int_gauge,
};
use tokio::time::Instant;

pub static ATTEMPTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "krate_scheduler_schedule_attempts_total",
        "Scheduling attempts by result (scheduled, unschedulable) and profile.",
        &["result", "profile"]
    )
    .expect("registers once")
});

static ATTEMPT_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "krate_scheduler_scheduling_attempt_duration_seconds",
        "Time of one scheduling cycle (filter and score), by result and profile.",
        &["result", "profile"],
        exponential_buckets(0.00001, 2.0, 20).expect("buckets")
    )
    .expect("registers once")
});

static E2E_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "krate_scheduler_pod_scheduling_sli_duration_seconds",
        "From a pod entering the queue to its binding.",
        exponential_buckets(0.001, 2.0, 20).expect("buckets")
    )
    .expect("registers once")
});

pub static PENDING: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("krate_scheduler_pending_pods", "Pods in the scheduling queue.").expect("registers once")
});

pub fn observe_attempt(profile: &str, result: &str, started: Instant) {
    ATTEMPTS.with_label_values(&[result, profile]).inc();
    ATTEMPT_SECONDS.with_label_values(&[result, profile]).observe(started.elapsed().as_secs_f64());
}

pub fn observe_bound(_profile: &str, enqueued: Instant, _attempts: u32) {
    E2E_SECONDS.observe(enqueued.elapsed().as_secs_f64());
}
