//! The pod network's Prometheus metrics. One loop runs per node, so they describe that
//! one.

use std::sync::LazyLock;

use prometheus::{Histogram, IntCounter, IntGauge};

use crate::metrics_util::{counter, gauge, sync_duration};

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
pub static SYNC_ERRORS: LazyLock<IntCounter> =
    LazyLock::new(|| counter("krate_podnet_sync_errors_total", "Pod network syncs with a failed step."));
/// Every sync.
pub static SYNC_DURATION: LazyLock<Histogram> =
    LazyLock::new(|| sync_duration("krate_podnet_sync_duration_seconds", "Time taken by a pod network sync."));
/// When the last sync without errors ended.
pub static LAST_SYNC: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "krate_podnet_last_sync_timestamp_seconds",
        "When the last pod network sync without errors ended (Unix time).",
    )
});
