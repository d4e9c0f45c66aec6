//! The agent's Prometheus metrics, in a registry of its own so that its /metrics
//! shows the node's figures even inside `krate server` (whose API server uses the
//! default registry).

use std::sync::LazyLock;

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    REGISTRY.register(Box::new(c.clone())).expect("registers once");
    c
}

/// Node status writes by result (success, error).
pub static STATUS_UPDATES: LazyLock<IntCounterVec> =
    LazyLock::new(|| counter("krate_agent_node_status_updates_total", "Node status writes by result.", &["result"]));
/// Lease renewals by result.
pub static LEASE_RENEWALS: LazyLock<IntCounterVec> =
    LazyLock::new(|| counter("krate_agent_lease_renewals_total", "Node Lease renewals by result.", &["result"]));
/// Requests to the agent's HTTPS API by path group and code.
pub static API_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter("kubelet_http_requests_total", "Requests to the agent's HTTPS API.", &["method", "path", "code"])
});
/// Upstream's kubelet_node_name: 1, labelled with the node's name.
pub static NODE_NAME: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    let g = IntGaugeVec::new(Opts::new("kubelet_node_name", "The node's name. The count is always 1."), &["node"])
        .expect("valid metric");
    REGISTRY.register(Box::new(g.clone())).expect("registers once");
    g
});

/// The text exposition of the agent's metrics.
pub fn render() -> String {
    let mut out = String::new();
    let encoder = prometheus::TextEncoder::new();
    let _ = encoder.encode_utf8(&REGISTRY.gather(), &mut out);
    out
}
