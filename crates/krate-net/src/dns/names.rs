//! Name handling: the cluster zone, the dashed-IP labels of pod and endpoint names, and
//! reverse (`in-addr.arpa`, `ip6.arpa`) names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

use super::DnsError;

/// The cluster domain (`cluster.local` by default), lower-cased.
#[derive(Clone, Debug)]
pub struct Zone {
    name: Name,
    /// Its labels, left to right.
    labels: Vec<String>,
}

impl Zone {
    pub fn new(zone: &str) -> Result<Zone, DnsError> {
        let trimmed = zone.trim().trim_end_matches('.');
        let invalid = || DnsError::InvalidZone(zone.to_string());
        if trimmed.is_empty() {
            return Err(invalid());
        }
        let mut name = Name::from_ascii(trimmed).map_err(|_| invalid())?.to_lowercase();
        name.set_fqdn(true);
        let labels = lower_labels(&name);
        if labels.iter().any(String::is_empty) {
            return Err(invalid());
        }
        Ok(Zone { name, labels })
    }

    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The labels of `qname` left of the zone, lower-cased, when `qname` is in it.
    pub fn relative(&self, qname: &Name) -> Option<Vec<String>> {
        let labels = lower_labels(qname);
        let keep = labels.len().checked_sub(self.labels.len())?;
        (labels[keep..] == self.labels[..]).then(|| labels[..keep].to_vec())
    }

    /// `prefix` + `.` + the zone, as a fully qualified name (None when too long).
    pub fn join(&self, prefix: &str) -> Option<Name> {
        let mut name = Name::from_ascii(prefix).ok()?.append_domain(&self.name).ok()?;
        name.set_fqdn(true);
        Some(name)
    }
}

/// The labels of `name`, lower-cased (names are compared without case, RFC 4343).
pub fn lower_labels(name: &Name) -> Vec<String> {
    name.iter().map(|label| String::from_utf8_lossy(label).to_ascii_lowercase()).collect()
}

/// The label CoreDNS gives an address without a hostname: its dots (or colons) as dashes.
pub fn dashed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

/// The address of a pod label (`10-1-2-3`, `fd00--1`), read as CoreDNS reads it: three
/// single dashes make an IPv4 address, anything else is an IPv6 one.
pub fn parse_dashed(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label.replace('-', ".").parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    } else {
        label.replace('-', ":").parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    }
}

/// Whether `labels` (lower-cased, left to right) end in a reverse zone.
pub fn is_reverse(labels: &[String]) -> bool {
    matches!(labels, [.., second, last] if last == "arpa" && (second == "in-addr" || second == "ip6"))
}

/// The address a full reverse name stands for (`4.3.2.1.in-addr.arpa` is 1.2.3.4); None
/// for partial names and anything malformed.
pub fn reverse_ip(labels: &[String]) -> Option<IpAddr> {
    match labels {
        [d, c, b, a, in_addr, arpa] if in_addr == "in-addr" && arpa == "arpa" => {
            let octet = |s: &str| -> Option<u8> {
                // Strict decimal: no signs, no leading zeros.
                let plain = !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
                (plain && (s == "0" || !s.starts_with('0'))).then(|| s.parse().ok()).flatten()
            };
            Some(IpAddr::V4(Ipv4Addr::new(octet(a)?, octet(b)?, octet(c)?, octet(d)?)))
        }
        [nibbles @ .., ip6, arpa] if ip6 == "ip6" && arpa == "arpa" && nibbles.len() == 32 => {
            let mut address: u128 = 0;
            // Least significant nibble first.
            for (i, nibble) in nibbles.iter().enumerate() {
                let &[digit] = nibble.as_bytes() else { return None };
                let value = char::from(digit).to_digit(16)?;
                address |= u128::from(value) << (4 * i);
            }
            Some(IpAddr::V6(Ipv6Addr::from(address)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(name: &str) -> Vec<String> {
        lower_labels(&Name::from_ascii(name).unwrap())
    }

    #[test]
    fn zone_relative_is_case_insensitive_and_exact() {
        let zone = Zone::new("Cluster.Local.").unwrap();
        assert_eq!(zone.name().to_ascii(), "cluster.local.");
        let rel = zone.relative(&Name::from_ascii("WEB.Default.SVC.cluster.LOCAL.").unwrap());
        assert_eq!(rel, Some(vec!["web".to_string(), "default".into(), "svc".into()]));
        assert_eq!(zone.relative(&Name::from_ascii("cluster.local.").unwrap()), Some(vec![]));
        assert_eq!(zone.relative(&Name::from_ascii("example.com.").unwrap()), None);
        assert_eq!(zone.relative(&Name::from_ascii("notcluster.local.").unwrap()), None);
        assert_eq!(zone.relative(&Name::from_ascii("local.").unwrap()), None);
        assert!(Zone::new("").is_err());
        assert!(Zone::new(".").is_err());
    }

    #[test]
    fn dashed_addresses_round_trip() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(dashed(v4), "10-1-2-3");
        assert_eq!(dashed(v6), "fd00--1");
        assert_eq!(parse_dashed("10-1-2-3"), Some(v4));
        assert_eq!(parse_dashed("fd00--1"), Some(v6));
        assert_eq!(parse_dashed("10-1-2"), None);
        assert_eq!(parse_dashed("10-1-2-300"), None);
        assert_eq!(parse_dashed("web"), None);
    }

    #[test]
    fn reverse_names() {
        assert_eq!(reverse_ip(&labels("3.2.1.10.in-addr.arpa.")), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(reverse_ip(&labels("3.2.1.10.IN-ADDR.ARPA.")), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(reverse_ip(&labels("2.1.10.in-addr.arpa.")), None);
        assert_eq!(reverse_ip(&labels("03.2.1.10.in-addr.arpa.")), None);
        assert_eq!(reverse_ip(&labels("x.2.1.10.in-addr.arpa.")), None);
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(reverse_ip(&lower_labels(&Name::from(v6))), Some(v6));
        assert!(is_reverse(&labels("10.in-addr.arpa.")));
        assert!(!is_reverse(&labels("example.arpa.")));
    }
}
