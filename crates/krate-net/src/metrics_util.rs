//! What the loops' Prometheus metrics share: all live in the default registry (so
//! `krate`'s /metrics shows them), and sync durations use kube-proxy's buckets.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge};

pub(crate) fn register<C: prometheus::core::Collector + Clone + 'static>(collector: C) -> C {
    prometheus::default_registry().register(Box::new(collector.clone())).expect("metric registers once");
    collector
}

pub(crate) fn gauge(name: &str, help: &str) -> IntGauge {
    register(IntGauge::new(name, help).expect("valid metric"))
}

pub(crate) fn counter(name: &str, help: &str) -> IntCounter {
    register(IntCounter::new(name, help).expect("valid metric"))
}

/// A sync duration histogram's options: kube-proxy's buckets, 1 ms doubling to about 16 s.
pub(crate) fn sync_duration_opts(name: &str, help: &str) -> HistogramOpts {
    let buckets = prometheus::exponential_buckets(0.001, 2.0, 15).expect("valid buckets");
    HistogramOpts::new(name, help).buckets(buckets)
}

pub(crate) fn sync_duration(name: &str, help: &str) -> Histogram {
    register(Histogram::with_opts(sync_duration_opts(name, help)).expect("valid metric"))
}

/// A count as a gauge's value.
pub(crate) fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Sets `gauge` to the current Unix time in seconds.
pub(crate) fn set_to_now(gauge: &IntGauge) {
    let unix = std::time::SystemTime::now().duration_since(std::time::SystemTime::UNIX_EPOCH).unwrap_or_default();
    gauge.set(i64::try_from(unix.as_secs()).unwrap_or(i64::MAX));
}
