//! The service proxy: kube-proxy's nftables mode (IPv4). Services and EndpointSlices
//! become one `ip` table of chains and verdict maps, applied with one `nft -f` per
//! sync: whole at start and after failures, as a diff otherwise.
//!
//! ```ignore
//! let mut config = ProxyConfig::new("node-1");
//! config.cluster_cidr = Some("10.244.0.0/16".parse()?);
//! let proxy = krate_net::proxy::start(client, config);
//! // ...
//! proxy.stop().await?; // deletes the table
//! ```
//!
//! The pieces, each a pure step but the last: `snapshot` (API objects → service
//! ports and endpoints), `categorize` (which endpoints each traffic policy uses),
//! `render` (→ desired chains and map elements), `base` (the fixed skeleton), `diff`
//! (→ a full or partial script), `runner` (reflectors, batching, retries; `nft` runs
//! through the crate's `Nft`).

mod base;
mod categorize;
mod config;
mod diff;
mod metrics;
pub(crate) mod names;
mod render;
mod runner;
mod script;
mod snapshot;

#[cfg(test)]
mod tests;

pub use categorize::{Categorized, categorize};
pub use config::{InvalidCidr, Ipv4Cidr, ProxyConfig};
pub use diff::{Applied, Plan, SyncMode, plan};
pub use render::{Container, Ruleset, render};
pub use runner::{ProxyError, ProxyHandle, SyncReport, cleanup, run, start};
pub use snapshot::{Endpoint, Protocol, SERVICE_NAME_LABEL, ServicePort, ServicePortName, Snapshot};

pub use crate::nft::{Nft, NftError};
