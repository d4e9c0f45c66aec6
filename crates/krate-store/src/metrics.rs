//! Prometheus metrics for the store, registered in the process-wide default registry
//! that `/metrics` serves.

use std::sync::LazyLock;
use std::time::Instant;

use prometheus::{HistogramVec, IntGaugeVec, register_histogram_vec, register_int_gauge_vec};

pub static REQUEST_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "krate_store_request_duration_seconds",
        "Latency of store operations by backend and operation.",
        &["backend", "operation"],
        vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]
    )
    .expect("metric registers once")
});

pub static REVISION: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!("krate_store_revision", "Latest revision written through this process.", &["backend"])
        .expect("metric registers once")
});

pub static WATCHERS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!("krate_store_watchers", "Open store watches.", &["backend"]).expect("metric registers once")
});

/// Observes the time from creation to drop under (backend, operation).
pub struct Timer {
    backend: &'static str,
    operation: &'static str,
    start: Instant,
}

impl Timer {
    pub fn new(backend: &'static str, operation: &'static str) -> Self {
        Timer { backend, operation, start: Instant::now() }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        REQUEST_DURATION.with_label_values(&[self.backend, self.operation]).observe(self.start.elapsed().as_secs_f64());
    }
}

/// Counts an open watch for as long as it lives.
pub struct WatcherGauge(&'static str);

impl WatcherGauge {
    pub fn new(backend: &'static str) -> Self {
        WATCHERS.with_label_values(&[backend]).inc();
        WatcherGauge(backend)
    }
}

impl Drop for WatcherGauge {
    fn drop(&mut self) {
        WATCHERS.with_label_values(&[self.0]).dec();
    }
}
