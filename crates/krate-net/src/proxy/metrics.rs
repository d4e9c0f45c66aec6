//! The proxy's Prometheus metrics, named as kube-proxy's where it has one.

use std::sync::LazyLock;

use prometheus::{Histogram, IntCounter, IntGauge, IntGaugeVec, Opts};

use crate::metrics_util::{counter, gauge, register, sync_duration};

/// Every sync: render, diff and `nft -f`.
pub static SYNC_DURATION: LazyLock<Histogram> =
    LazyLock::new(|| sync_duration("kubeproxy_sync_proxy_rules_duration_seconds", "Time taken by a proxy rules sync."));
/// Full syncs (including a table rebuild).
pub static FULL_SYNC_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    sync_duration("kubeproxy_sync_full_proxy_rules_duration_seconds", "Time taken by a full proxy rules sync.")
});
/// Partial syncs.
pub static PARTIAL_SYNC_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    sync_duration("kubeproxy_sync_partial_proxy_rules_duration_seconds", "Time taken by a partial proxy rules sync.")
});
/// Syncs `nft` refused or that could not run.
pub static SYNC_FAILURES: LazyLock<IntCounter> =
    LazyLock::new(|| counter("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "Failed nftables syncs."));
/// When the last successful sync ended.
pub static LAST_SYNC: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "When the last successful sync ended (Unix time).")
});
/// Service and endpoint chains in the table.
pub static CHAINS: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_proxy_nftables_chains", "Service and endpoint chains in the proxy's table."));
/// Rules in those chains.
pub static RULES: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_proxy_nftables_rules", "Rules in the proxy's service and endpoint chains."));
/// Elements in the dispatch sets and maps.
pub static ELEMENTS: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("krate_proxy_nftables_elements", "Elements in the proxy's dispatch sets and maps."));
/// Service ports with a Local traffic policy and no local endpoint, by policy.
pub static NO_LOCAL_ENDPOINTS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    let opts = Opts::new(
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
        "Service ports with a Local traffic policy and no local endpoints.",
    );
    register(IntGaugeVec::new(opts, &["traffic_policy"]).expect("valid metric"))
});
