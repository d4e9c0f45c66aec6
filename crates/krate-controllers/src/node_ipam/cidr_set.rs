//! One cluster CIDR cut into equal node CIDRs, handed out lowest-free-first and taken
//! back (upstream's cidrset).

use std::collections::BTreeSet;
use std::net::IpAddr;

/// At most 2^16 node CIDRs per cluster CIDR, as upstream.
const MAX_SUBNET_BITS: u8 = 16;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CidrError {
    #[error("invalid CIDR {0:?}")]
    Invalid(String),
    #[error(
        "node CIDR mask size /{node} does not fit cluster CIDR {cidr} (at most {MAX_SUBNET_BITS} bits more, within the address)"
    )]
    MaskSize { cidr: String, node: u8 },
    #[error("{0} is not a node CIDR of this cluster CIDR")]
    Outside(String),
}

/// A parsed CIDR: base address and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub ip: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, CidrError> {
        let invalid = || CidrError::Invalid(s.to_string());
        let (ip, prefix) = s.trim().split_once('/').ok_or_else(invalid)?;
        let ip: IpAddr = ip.parse().map_err(|_| invalid())?;
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        if prefix > bits(&ip) {
            return Err(invalid());
        }
        // Normalise to the network address.
        let ip = from_u128(&ip, to_u128(&ip) & mask(bits(&ip), prefix));
        Ok(Cidr { ip, prefix })
    }

    pub fn is_ipv6(&self) -> bool {
        self.ip.is_ipv6()
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

fn bits(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

fn to_u128(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(*v4) as u128,
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

fn from_u128(like: &IpAddr, n: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4((n as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(n.into()),
    }
}

/// The network mask of `prefix` within an address of `width` bits.
fn mask(width: u8, prefix: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let all: u128 = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
    all & !((1u128 << (width - prefix)).wrapping_sub(1) & all)
}

pub struct CidrSet {
    cluster: Cidr,
    node_prefix: u8,
    count: u128,
    used: BTreeSet<u128>,
}

impl CidrSet {
    pub fn new(cluster: Cidr, node_prefix: u8) -> Result<CidrSet, CidrError> {
        let width = bits(&cluster.ip);
        if node_prefix < cluster.prefix || node_prefix > width || node_prefix - cluster.prefix > MAX_SUBNET_BITS {
            return Err(CidrError::MaskSize { cidr: cluster.to_string(), node: node_prefix });
        }
        Ok(CidrSet { cluster, node_prefix, count: 1u128 << (node_prefix - cluster.prefix), used: BTreeSet::new() })
    }

    pub fn cluster(&self) -> Cidr {
        self.cluster
    }

    fn nth(&self, i: u128) -> Cidr {
        let width = bits(&self.cluster.ip);
        let base = to_u128(&self.cluster.ip) + (i << (width - self.node_prefix));
        Cidr { ip: from_u128(&self.cluster.ip, base), prefix: self.node_prefix }
    }

    fn index(&self, cidr: &Cidr) -> Result<u128, CidrError> {
        let width = bits(&self.cluster.ip);
        let outside = || CidrError::Outside(cidr.to_string());
        if cidr.prefix != self.node_prefix || cidr.ip.is_ipv4() != self.cluster.ip.is_ipv4() {
            return Err(outside());
        }
        let n = to_u128(&cidr.ip);
        if n & mask(width, self.cluster.prefix) != to_u128(&self.cluster.ip) {
            return Err(outside());
        }
        Ok((n - to_u128(&self.cluster.ip)) >> (width - self.node_prefix))
    }

    /// The lowest free node CIDR, now taken; None when all are taken.
    pub fn allocate(&mut self) -> Option<Cidr> {
        let mut i = 0u128;
        for used in &self.used {
            if *used != i {
                break;
            }
            i += 1;
        }
        (i < self.count).then(|| {
            self.used.insert(i);
            self.nth(i)
        })
    }

    /// Marks a node CIDR as taken (one a node already has).
    pub fn occupy(&mut self, cidr: &Cidr) -> Result<(), CidrError> {
        let i = self.index(cidr)?;
        self.used.insert(i);
        Ok(())
    }

    /// Takes every node CIDR overlapping `range` out of use (upstream keeps the service
    /// CIDR out of node podCIDRs so). A range of the other family overlaps nothing.
    pub fn reserve(&mut self, range: &Cidr) {
        if range.ip.is_ipv4() != self.cluster.ip.is_ipv4() {
            return;
        }
        let width = bits(&self.cluster.ip);
        let span = |c: &Cidr| {
            let start = to_u128(&c.ip) & mask(width, c.prefix);
            let size = if c.prefix == 0 { u128::MAX >> (128 - width) } else { (1u128 << (width - c.prefix)) - 1 };
            (start, start.saturating_add(size))
        };
        let ((a0, a1), (b0, b1)) = (span(&self.cluster), span(range));
        let (lo, hi) = (a0.max(b0), a1.min(b1));
        if lo > hi {
            return;
        }
        let shift = width - self.node_prefix;
        for i in ((lo - a0) >> shift)..=((hi - a0) >> shift) {
            self.used.insert(i);
        }
    }

    pub fn release(&mut self, cidr: &Cidr) -> Result<(), CidrError> {
        let i = self.index(cidr)?;
        self.used.remove(&i);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_allocates_lowest_free_and_reuses_released() {
        let mut set = CidrSet::new(Cidr::parse("10.42.0.0/16").unwrap(), 24).unwrap();
        assert_eq!(set.allocate().unwrap().to_string(), "10.42.0.0/24");
        assert_eq!(set.allocate().unwrap().to_string(), "10.42.1.0/24");
        set.occupy(&Cidr::parse("10.42.2.0/24").unwrap()).unwrap();
        assert_eq!(set.allocate().unwrap().to_string(), "10.42.3.0/24");
        set.release(&Cidr::parse("10.42.1.0/24").unwrap()).unwrap();
        assert_eq!(set.allocate().unwrap().to_string(), "10.42.1.0/24");
        assert!(set.occupy(&Cidr::parse("10.43.0.0/24").unwrap()).is_err());
    }

    #[test]
    fn reserved_ranges_are_never_handed_out() {
        let mut set = CidrSet::new(Cidr::parse("10.0.0.0/16").unwrap(), 24).unwrap();
        set.reserve(&Cidr::parse("10.0.1.128/25").unwrap());
        set.reserve(&Cidr::parse("10.0.2.0/23").unwrap());
        set.reserve(&Cidr::parse("192.168.0.0/16").unwrap());
        set.reserve(&Cidr::parse("fd00::/64").unwrap());
        let got: Vec<String> = (0..3).map(|_| set.allocate().unwrap().to_string()).collect();
        assert_eq!(got, ["10.0.0.0/24", "10.0.4.0/24", "10.0.5.0/24"]);
        // A range containing the whole cluster CIDR leaves nothing.
        let mut set = CidrSet::new(Cidr::parse("10.0.0.0/22").unwrap(), 24).unwrap();
        set.reserve(&Cidr::parse("10.0.0.0/8").unwrap());
        assert!(set.allocate().is_none());
    }

    #[test]
    fn exhaustion_gives_none() {
        let mut set = CidrSet::new(Cidr::parse("10.0.0.0/30").unwrap(), 31).unwrap();
        assert_eq!(set.allocate().unwrap().to_string(), "10.0.0.0/31");
        assert_eq!(set.allocate().unwrap().to_string(), "10.0.0.2/31");
        assert_eq!(set.allocate(), None);
    }

    #[test]
    fn v6_and_bad_sizes() {
        let mut set = CidrSet::new(Cidr::parse("fd00:10:42::/56").unwrap(), 64).unwrap();
        assert_eq!(set.allocate().unwrap().to_string(), "fd00:10:42::/64");
        assert_eq!(set.allocate().unwrap().to_string(), "fd00:10:42:1::/64");
        assert!(CidrSet::new(Cidr::parse("10.0.0.0/8").unwrap(), 28).is_err());
        assert!(CidrSet::new(Cidr::parse("10.0.0.0/24").unwrap(), 16).is_err());
        assert_eq!(Cidr::parse("10.42.7.9/16").unwrap().to_string(), "10.42.0.0/16");
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nonsense").is_err());
    }
}
