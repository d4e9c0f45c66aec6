//! The fixed skeleton of the table, as kube-proxy's nftables mode lays it out: base
//! chains on the netfilter hooks jumping to dispatch chains, which look the packet's
//! destination up in the maps `render` fills.
//!
//! - nat prerouting/output → `services`: DNAT by `service-ips` / `service-nodeports`.
//! - nat postrouting → `masquerading`: SNAT what `mark-for-masquerade` marked.
//! - filter input/forward/output (before DNAT) → `service-endpoints-check` and
//!   `nodeport-endpoints-check`: reject or drop traffic to services without usable
//!   endpoints (reject is not allowed in prerouting on older kernels).
//! - filter prerouting/output (before DNAT) → `firewall-check`: loadBalancerSourceRanges.
//! - filter forward/output (after DNAT) → `cluster-ips-check`: what is still addressed
//!   to a ClusterIP matched no port: reject it (drop for unallocated ServiceCIDR IPs).

use super::config::ProxyConfig;
use super::render::{Container, MARK_MASQ_CHAIN, REJECT_CHAIN};
use super::script::Script;

// nft 1.0.6 knows `dstnat`/`srcnat` only on their own hooks: numbers work everywhere.
const DSTNAT: i32 = -100;
const SRCNAT: i32 = 100;

const BASE_CHAINS: [(&str, &str, &str, i32); 8] = [
    ("filter-prerouting", "filter", "prerouting", DSTNAT - 10),
    ("filter-input", "filter", "input", DSTNAT - 10),
    ("filter-forward", "filter", "forward", DSTNAT - 10),
    ("filter-output", "filter", "output", DSTNAT - 10),
    ("filter-output-post-dnat", "filter", "output", DSTNAT + 10),
    ("nat-prerouting", "nat", "prerouting", DSTNAT),
    ("nat-output", "nat", "output", DSTNAT),
    ("nat-postrouting", "nat", "postrouting", SRCNAT),
];

const SERVICES: &str = "services";
const MASQUERADING: &str = "masquerading";
const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
const FIREWALL_CHECK: &str = "firewall-check";
const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
const NODEPORT_IPS: &str = "nodeport-ips";

/// The skeleton's chains on no hook: the base chains jump to them.
const REGULAR_CHAINS: [&str; 8] = [
    SERVICES,
    MASQUERADING,
    SERVICE_ENDPOINTS_CHECK,
    NODEPORT_ENDPOINTS_CHECK,
    FIREWALL_CHECK,
    CLUSTER_IPS_CHECK,
    MARK_MASQ_CHAIN,
    REJECT_CHAIN,
];

/// (from, extra match, to): the jumps from base chains to the dispatch chains.
const JUMPS: [(&str, &str, &str); 11] = [
    ("filter-input", "ct state new ", NODEPORT_ENDPOINTS_CHECK),
    ("filter-input", "ct state new ", SERVICE_ENDPOINTS_CHECK),
    ("filter-forward", "ct state new ", SERVICE_ENDPOINTS_CHECK),
    ("filter-output", "ct state new ", SERVICE_ENDPOINTS_CHECK),
    ("filter-prerouting", "ct state new ", FIREWALL_CHECK),
    ("filter-output", "ct state new ", FIREWALL_CHECK),
    ("nat-output", "", SERVICES),
    ("nat-prerouting", "", SERVICES),
    ("nat-postrouting", "", MASQUERADING),
    ("filter-forward", "ct state new ", CLUSTER_IPS_CHECK),
    ("filter-output-post-dnat", "ct state new ", CLUSTER_IPS_CHECK),
];

/// The names of the fixed chains, so stale-chain bookkeeping never touches them.
pub fn is_fixed_chain(name: &str) -> bool {
    BASE_CHAINS.iter().any(|(n, ..)| *n == name) || REGULAR_CHAINS.contains(&name)
}

/// Creates (or, if present, empties and refills) the skeleton. Emptying the maps is
/// the caller's choice: a full sync refills them, so it flushes.
pub fn write(script: &mut Script, config: &ProxyConfig, flush_containers: bool) {
    script.add_table();
    for (name, kind, hook, priority) in BASE_CHAINS {
        script.add_base_chain(name, kind, hook, priority);
        script.flush_chain(name);
    }
    for name in REGULAR_CHAINS {
        script.add_chain(name);
        script.flush_chain(name);
    }
    for container in Container::ALL {
        script.add_container(container);
        if flush_containers {
            script.flush_container(container);
        }
    }
    for (from, extra, to) in JUMPS {
        script.add_rule(from, &format!("{extra}jump {to}"));
    }

    let mark = config.masquerade_mark();
    script.add_rule(MARK_MASQ_CHAIN, &format!("mark set mark or {mark}"));
    script.add_rule(MASQUERADING, &format!("mark and {mark} == 0 return"));
    script.add_rule(MASQUERADING, &format!("mark set mark xor {mark}"));
    script.add_rule(MASQUERADING, "masquerade fully-random");
    script.add_rule(REJECT_CHAIN, "reject");

    script.add_rule(
        CLUSTER_IPS_CHECK,
        &format!(
            "ip daddr @{} reject comment \"reject traffic to invalid ports of ClusterIPs\"",
            Container::ClusterIps.name()
        ),
    );
    if !config.service_cidrs.is_empty() {
        let cidrs: Vec<String> = config.service_cidrs.iter().map(ToString::to_string).collect();
        script.add_rule(
            CLUSTER_IPS_CHECK,
            &format!("ip daddr {{ {} }} drop comment \"drop traffic to unallocated ClusterIPs\"", cidrs.join(", ")),
        );
    }

    let ip_tuple = "ip daddr . meta l4proto . th dport";
    script.add_rule(SERVICE_ENDPOINTS_CHECK, &format!("{ip_tuple} vmap @{}", Container::NoEndpointServices.name()));
    script.add_rule(FIREWALL_CHECK, &format!("{ip_tuple} vmap @{}", Container::FirewallIps.name()));
    script.add_rule(SERVICES, &format!("{ip_tuple} vmap @{}", Container::ServiceIps.name()));

    // Which destinations take node ports: every local address but loopback (as
    // upstream, localhost NodePorts are not supported), or the configured ones.
    let (nodeport_input_match, nodeport_match) = if config.nodeport_addresses.is_empty() {
        ("ip daddr != 127.0.0.0/8".to_string(), "fib daddr type local ip daddr != 127.0.0.0/8".to_string())
    } else {
        script.raw(&format!(
            "add set ip {} {NODEPORT_IPS} {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}",
            config.table
        ));
        script.raw(&format!("flush set ip {} {NODEPORT_IPS}", config.table));
        let ips: Vec<String> = config.nodeport_addresses.iter().map(ToString::to_string).collect();
        script.add_elements(NODEPORT_IPS, ips.iter().map(|ip| (ip.as_str(), "")));
        (format!("ip daddr @{NODEPORT_IPS}"), format!("ip daddr @{NODEPORT_IPS}"))
    };
    script.add_rule(
        NODEPORT_ENDPOINTS_CHECK,
        &format!("{nodeport_input_match} meta l4proto . th dport vmap @{}", Container::NoEndpointNodePorts.name()),
    );
    script.add_rule(
        SERVICES,
        &format!("{nodeport_match} meta l4proto . th dport vmap @{}", Container::ServiceNodePorts.name()),
    );
}
