//! The pod network across nodes, as flannel's host-gw backend: every other node's
//! podCIDR is routed via its InternalIP (`ip route replace 10.42.1.0/24 via
//! 192.168.1.12 proto 75`), so nodes must share an L2 segment; pod traffic leaving the
//! cluster CIDR is masqueraded and the cluster CIDR's forwarding accepted, in an nft
//! table of its own; `net.ipv4.ip_forward` is switched on. This node's own podCIDR
//! goes to a callback (which writes the CNI config).
//!
//! ```ignore
//! let config = PodNetConfig::new("node-1", "10.42.0.0/16".parse()?);
//! let runtime = pod_runtime.clone();
//! let net = krate_net::podnet::start(client, config, move |cidr| {
//!     let runtime = runtime.clone();
//!     async move { runtime.set_pod_cidr(&cidr).await }
//! });
//! let cidr = net.wait_pod_cidr().await; // once the callback accepted it
//! // ...
//! net.stop().await?; // deletes its routes and its table
//! ```
//!
//! The client must list and watch all Nodes: the Node authorizer lets a node's own
//! identity (system:node:NAME) read only its own Node, so use one with
//! system:node-proxier's grants (system:kube-proxy) or another that can.
//!
//! Routes are marked with a protocol number of their own (`route_protocol`, 75): only
//! those are listed, replaced and deleted; a wanted destination some other route
//! already has is left to that route. A route the kernel refuses (the gateway not on a
//! connected network) is reported (`SyncReport::failed`, `krate_podnet_route_failures`)
//! and retried, and the others are installed regardless.
//!
//! The pieces: `plan` (Nodes → wanted routes → what to change, pure), `rules` (the nft
//! script, pure), `routes` (running `ip`), `runner` (the reflector and the loop).

mod config;
mod metrics;
mod plan;
mod routes;
mod rules;
mod runner;

#[cfg(test)]
mod tests;

pub use config::{IpForward, KUBE_PROXY_MASQUERADE_MARK, PodNetConfig, ROUTE_PROTOCOL};
pub use plan::{Desired, KernelRoutes, RoutePlan, RouteTarget, Skipped, covers, desired, internal_ip, plan, pod_cidr};
pub use routes::Routes;
pub use rules::render;
pub use runner::{PodNetError, PodNetHandle, RouteFailure, SyncReport, cleanup, enable_ip_forward, run, start};

pub use crate::command::CommandError;
pub use crate::proxy::Ipv4Cidr;
