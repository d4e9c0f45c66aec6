//! NetworkPolicy enforcement on each node (networking.k8s.io/v1, IPv4), with
//! nftables. The policies selecting this node's pods become one `ip` table whose rules
//! stay put while sets of pod addresses follow pods, labels and namespaces, applied
//! with one `nft -f` per sync: whole at start and after failures, as element-level
//! changes otherwise.
//!
//! ```ignore
//! let mut config = NetpolConfig::new("node-1");
//! config.nft_command = ["ip", "netns", "exec", "node", "nft"].map(String::from).to_vec(); // or just nft
//! let enforcement = krate_net::netpol::start(client, config);
//! // ...
//! enforcement.stop().await?; // deletes the table
//! ```
//!
//! Semantics as upstream's: a pod selected by some policy of a type is isolated in
//! that direction and gets the union of those policies' rules; replies to allowed
//! connections pass; the node always reaches its own pods (kubelet probes), since its
//! traffic does not pass the forward hook. Only pods on this node are policed (and
//! never host-network ones); peers are pods anywhere, by address.
//!
//! The pieces, each a pure step but the last: `snapshot` (API objects → defaulted
//! policies, pods, namespace labels), `resolve` (→ targets, peer addresses, ports),
//! `render` (→ sets and chains), `plan` (→ a full or partial script), `runner`
//! (reflectors, batching, retries; `nft` runs through the crate's `Nft`).

mod config;
mod metrics;
mod plan;
mod render;
mod resolve;
mod runner;
mod selector;
mod snapshot;

#[cfg(test)]
mod tests;

pub use config::NetpolConfig;
pub use plan::{Plan, SyncMode, plan};
pub use render::{
    BASE_CHAINS, EGRESS_ISOLATED, INGRESS_ISOLATED, NftSet, POD_EGRESS, POD_INGRESS, Ruleset, SetKind, policy_base,
    render, render_resolved,
};
pub use resolve::{AddrPort, IpRange, Peers, PortRange, Ports, Resolved, ResolvedPolicy, ResolvedRule, resolve};
pub use runner::{NetpolError, NetpolHandle, SyncReport, cleanup, run, start};
pub use selector::{Labels, Selector};
pub use snapshot::{NAMESPACE_NAME_LABEL, NamedPort, Peer, PodInfo, Policy, Port, Rule, Snapshot};
