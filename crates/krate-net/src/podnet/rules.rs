//! The pod network's nft table, flannel's rules in a table of their own, rebuilt whole
//! in one transaction whenever it changes:
//!
//! - nat postrouting: traffic kube-proxy marked is its to masquerade; pod to pod keeps
//!   its source; traffic from elsewhere to this node's own pods too; pod traffic
//!   leaving the cluster CIDR (but multicast) is masqueraded, and so is traffic from
//!   outside the cluster CIDR to other nodes' pods (so their answers come back here).
//! - filter forward: the cluster CIDR's traffic is accepted (a host whose own forward
//!   policy drops needs an accept there as well: nft evaluates every table).

use std::fmt::Write as _;

use super::config::PodNetConfig;
use crate::proxy::Ipv4Cidr;

// nft 1.0.6 knows `srcnat` only on its own hook: numbers work everywhere.
const SRCNAT: i32 = 100;
const FILTER: i32 = 0;

/// The `nft -f` script making the table as `config` and this node's podCIDR (once
/// known) want it.
pub fn render(config: &PodNetConfig, own_pod_cidr: Option<Ipv4Cidr>) -> String {
    let table = &config.table;
    let cluster = config.cluster_cidr;
    let mut s = String::new();
    let mut line = |text: String| {
        let _ = writeln!(s, "{text}");
    };
    let comment = "comment \"krate's pod network: masquerading and forwarding\"";
    // Made (if missing) and deleted first, so the script rebuilds it atomically.
    line(format!("add table ip {table}"));
    line(format!("delete table ip {table}"));
    line(format!("add table ip {table} {{ {comment} ; }}"));

    line(format!("add chain ip {table} forward {{ type filter hook forward priority {FILTER} ; policy accept ; }}"));
    line(format!("add rule ip {table} forward ip saddr {cluster} accept"));
    line(format!("add rule ip {table} forward ip daddr {cluster} accept"));

    if config.masquerade {
        let rule = |text: String| format!("add rule ip {table} postrouting {text}");
        line(format!(
            "add chain ip {table} postrouting {{ type nat hook postrouting priority {SRCNAT} ; policy accept ; }}"
        ));
        if let Some(mark) = config.kube_proxy_mark {
            line(rule(format!("meta mark and {mark:#010x} != 0 return")));
        }
        line(rule(format!("ip saddr {cluster} ip daddr {cluster} return")));
        if let Some(own) = own_pod_cidr {
            line(rule(format!("ip saddr != {cluster} ip daddr {own} return")));
        }
        line(rule(format!("ip saddr {cluster} ip daddr != 224.0.0.0/4 masquerade fully-random")));
        line(rule(format!("ip saddr != {cluster} ip daddr {cluster} masquerade fully-random")));
    }
    s
}
