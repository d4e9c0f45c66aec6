//! The pod network's Prometheus metrics, in the default registry (so `krate`'s
//! /metrics shows them). One loop runs per node, so they describe that one.

use std::sync::LazyLock;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge};

fn register<C: prometheus::core::Collector + Clone + 'static>(collector: C) -> C {
    prometheus::default_registry().register(Box::new(collector.clone())).expect("metric registers once");
    collector
}

fn gauge(name: &str, help: &str) -> IntGauge {
    register(IntGauge::new(name, help).expect("valid metric"))
}

/// Routes to other nodes' podCIDRs in the kernel.
pub static ROUTES: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_podnet_routes", "Routes to other nodes' pod CIDRs installed on this node."));
/// Nodes whose route the kernel refused (their InternalIP not on a connected network).
pub static ROUTE_FAILURES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge("krate_podnet_route_failures", "Nodes whose pod CIDR route could not be installed at the last sync.")
});
/// Nodes left without a route (no podCIDR or InternalIP yet, overlaps, conflicts).
pub static SKIPPED_NODES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "krate_podnet_skipped_nodes",
        "Other nodes given no route at the last sync (no pod CIDR, no address, conflicts).",
    )
});
/// Syncs with any failed step.
pub static SYNC_ERRORS: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new("krate_podnet_sync_errors_total", "Pod network syncs with a failed step.")
            .expect("valid metric"),
    )
});
/// Every sync.
pub static SYNC_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    let buckets = prometheus::exponential_buckets(0.001, 2.0, 15).expect("valid buckets");
    let opts = HistogramOpts::new("krate_podnet_sync_duration_seconds", "Time taken by a pod network sync.");
    register(Histogram::with_opts(opts.buckets(buckets)).expect("valid metric"))
});
/// When the last sync without errors ended.
pub static LAST_SYNC: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "krate_podnet_last_sync_timestamp_seconds",
        "When the last pod network sync without errors ended (Unix time).",
    )
});
