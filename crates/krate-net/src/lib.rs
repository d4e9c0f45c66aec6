//! Service networking on each node: the cluster DNS server and the service proxy on
//! nftables. Both are API clients fed by kube-runtime reflectors.

pub mod dns;
pub mod netpol;
pub mod podnet;
pub mod proxy;
