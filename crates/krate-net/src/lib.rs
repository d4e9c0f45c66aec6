//! Service networking on each node: the cluster DNS server and the service proxy on
//! nftables. Both are API clients fed by kube-runtime reflectors.

mod command;
pub mod dns;
mod metrics_util;
pub mod netpol;
mod nft;
pub mod podnet;
pub mod proxy;
mod sync_loop;
