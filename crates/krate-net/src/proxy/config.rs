//! The proxy's settings: kube-proxy's flags that matter to nftables mode, plus where
//! and how to run `nft`.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

/// How one node's service proxy behaves. `ProxyConfig::new(node)` gives kube-proxy's
/// defaults; set the fields that differ.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// This node's name: endpoints whose `nodeName` is this are local.
    pub node_name: String,
    /// The pod network (kube-proxy's --cluster-cidr). Traffic from outside it to a
    /// ClusterIP is masqueraded, and pods reaching an externalTrafficPolicy=Local
    /// service's external addresses short-circuit to all endpoints.
    pub cluster_cidr: Option<Ipv4Cidr>,
    /// Masquerade all traffic to ClusterIPs (kube-proxy's --masquerade-all).
    pub masquerade_all: bool,
    /// The packet mark bit meaning "masquerade this" (kube-proxy's default is 14).
    pub masquerade_bit: u8,
    /// The command that runs `nft`, e.g. `["ip", "netns", "exec", "node", "nft"]`
    /// to program another network namespace; `-f -` and friends are appended.
    pub nft_command: Vec<String>,
    /// The `ip` family table holding every rule, created and deleted whole.
    pub table: String,
    /// Addresses that accept NodePort traffic; empty means every local address but
    /// loopback (`fib daddr type local`).
    pub nodeport_addresses: Vec<Ipv4Addr>,
    /// The ServiceCIDRs: traffic to an unallocated address in them is dropped.
    pub service_cidrs: Vec<Ipv4Cidr>,
    /// This node's own address, let through loadBalancerSourceRanges firewalls when a
    /// range covers it (as kube-proxy does for VIP-style load balancers).
    pub node_ip: Option<Ipv4Addr>,
    /// The shortest time between two syncs; changes inside it are batched.
    pub min_sync_interval: Duration,
    /// How often everything is rewritten even without failures.
    pub full_sync_interval: Duration,
    /// How soon a failed sync is retried (as a full sync).
    pub retry_interval: Duration,
    /// How long a chain stays flushed before it is deleted: kernels before 6.2 keep a
    /// chain referenced for a moment after the map element pointing to it goes.
    pub stale_chain_delay: Duration,
    /// How long one `nft` run may take.
    pub nft_timeout: Duration,
}

impl ProxyConfig {
    pub fn new(node_name: impl Into<String>) -> ProxyConfig {
        ProxyConfig {
            node_name: node_name.into(),
            cluster_cidr: None,
            masquerade_all: false,
            masquerade_bit: 14,
            nft_command: vec!["nft".into()],
            table: "krate-proxy".into(),
            nodeport_addresses: Vec::new(),
            service_cidrs: Vec::new(),
            node_ip: None,
            min_sync_interval: Duration::from_millis(100),
            full_sync_interval: Duration::from_secs(3600),
            retry_interval: Duration::from_secs(5),
            stale_chain_delay: Duration::from_secs(1),
            nft_timeout: Duration::from_secs(60),
        }
    }

    /// The masquerade mark as nft writes it.
    pub(crate) fn masquerade_mark(&self) -> String {
        format!("{:#010x}", 1u32 << u32::from(self.masquerade_bit.min(31)))
    }
}

/// An IPv4 network, `10.244.0.0/16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ipv4Cidr {
    pub(crate) addr: Ipv4Addr,
    pub(crate) prefix: u8,
}

impl Ipv4Cidr {
    /// The network of `addr`/`prefix` (host bits cleared, so nft accepts it).
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Option<Ipv4Cidr> {
        (prefix <= 32).then(|| Ipv4Cidr { addr: Ipv4Addr::from(u32::from(addr) & Self::mask(prefix)), prefix })
    }

    fn mask(prefix: u8) -> u32 {
        if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) }
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.prefix) == u32::from(self.addr)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("invalid IPv4 CIDR {0:?}")]
pub struct InvalidCidr(pub String);

impl FromStr for Ipv4Cidr {
    type Err = InvalidCidr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidCidr(s.to_string());
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, prefix.parse::<u8>().map_err(|_| invalid())?),
            None => (s, 32),
        };
        Ipv4Cidr::new(addr.parse().map_err(|_| invalid())?, prefix).ok_or_else(invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_mask() {
        let cidr: Ipv4Cidr = "10.244.3.7/16".parse().unwrap();
        assert_eq!(cidr.to_string(), "10.244.0.0/16");
        assert!(cidr.contains("10.244.200.1".parse().unwrap()));
        assert!(!cidr.contains("10.245.0.1".parse().unwrap()));
        assert_eq!("1.2.3.4".parse::<Ipv4Cidr>().unwrap().to_string(), "1.2.3.4/32");
        assert!("10.0.0.0/33".parse::<Ipv4Cidr>().is_err());
        assert!("fd00::/8".parse::<Ipv4Cidr>().is_err());
        assert_eq!(ProxyConfig::new("n").masquerade_mark(), "0x00004000");
    }
}
