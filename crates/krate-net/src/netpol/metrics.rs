//! The enforcer's Prometheus metrics, in the default registry (so `krate`'s /metrics
//! shows them).

use std::sync::LazyLock;

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntGauge, IntGaugeVec, Opts};

fn register<C: prometheus::core::Collector + Clone + 'static>(collector: C) -> C {
    prometheus::default_registry().register(Box::new(collector.clone())).expect("metric registers once");
    collector
}

fn gauge(name: &str, help: &str) -> IntGauge {
    register(IntGauge::new(name, help).expect("valid metric"))
}

/// Every sync (resolve, render, diff and `nft -f`), by mode.
pub static SYNC_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    // 1 ms doubling to about 16 s, as the proxy's.
    let buckets = prometheus::exponential_buckets(0.001, 2.0, 15).expect("valid buckets");
    let opts = HistogramOpts::new("krate_netpol_sync_duration_seconds", "Time taken by a NetworkPolicy rules sync.")
        .buckets(buckets);
    register(HistogramVec::new(opts, &["mode"]).expect("valid metric"))
});
/// Syncs `nft` refused or that could not run.
pub static SYNC_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new("krate_netpol_sync_failures_total", "Failed NetworkPolicy nftables syncs.")
            .expect("valid metric"),
    )
});
/// When the last successful sync ended.
pub static LAST_SYNC: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge("krate_netpol_last_sync_timestamp_seconds", "When the last successful NetworkPolicy sync ended (Unix time).")
});
/// Policies selecting pods on this node.
pub static POLICIES: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_netpol_policies", "NetworkPolicies selecting pods on this node."));
/// Rules in the table.
pub static RULES: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_netpol_nftables_rules", "Rules in the NetworkPolicy table."));
/// Sets in the table.
pub static SETS: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_netpol_nftables_sets", "Sets in the NetworkPolicy table."));
/// Elements in those sets.
pub static ELEMENTS: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_netpol_nftables_set_elements", "Elements in the NetworkPolicy table's sets."));
/// Isolated local pod addresses, by direction.
pub static ISOLATED: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    let opts = Opts::new("krate_netpol_isolated_pods", "Local pod addresses isolated by NetworkPolicies.");
    register(IntGaugeVec::new(opts, &["direction"]).expect("valid metric"))
});
