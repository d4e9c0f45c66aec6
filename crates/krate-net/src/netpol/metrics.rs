//! The enforcer's Prometheus metrics.

use std::sync::LazyLock;

use prometheus::{HistogramVec, IntCounter, IntGauge, IntGaugeVec, Opts};

use crate::metrics_util::{counter, gauge, register, sync_duration_opts};

/// Every sync (resolve, render, diff and `nft -f`), by mode.
pub static SYNC_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    let opts = sync_duration_opts("krate_netpol_sync_duration_seconds", "Time taken by a NetworkPolicy rules sync.");
    register(HistogramVec::new(opts, &["mode"]).expect("valid metric"))
});
/// Syncs `nft` refused or that could not run.
pub static SYNC_FAILURES: LazyLock<IntCounter> =
    LazyLock::new(|| counter("krate_netpol_sync_failures_total", "Failed NetworkPolicy nftables syncs."));
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
