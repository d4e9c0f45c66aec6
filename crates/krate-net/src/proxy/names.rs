//! Chain and set names: kube-proxy's scheme, a short hash of the readable name (so
//! similar names look different and truncation stays unique) followed by the name
//! itself, e.g. `service-K3TQ2A7B-default/web/tcp/http`. The name is a pure function
//! of the service port (and endpoint), so unchanged services keep their chains.

use std::net::Ipv4Addr;

use super::snapshot::ServicePortName;

/// nft's limit is 256 with the NUL; leave room for the longest prefix.
const MAX_BASE_LEN: usize = 240;

/// 8 base32 characters of a 64-bit FNV-1a hash: not cryptographic, and need not be,
/// since the readable part makes names unique except when truncated.
fn hash8(input: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in input.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (0..8).map(|i| ALPHABET[((hash >> (59 - 5 * i)) & 31) as usize] as char).collect()
}

pub(crate) fn hashed(hash_input: &str, readable: &str) -> String {
    let mut name = format!("{}-{readable}", hash8(hash_input));
    if name.len() > MAX_BASE_LEN {
        // Names are ASCII (Kubernetes names, digits, '/', '.', '_').
        name.truncate(MAX_BASE_LEN - 3);
        name.push_str("...");
    }
    name
}

fn service_part(port: &ServicePortName) -> String {
    format!("{}/{}/{}/{}", port.namespace, port.name, port.protocol.as_str(), port.port)
}

fn endpoint_part(port: &ServicePortName, ip: Ipv4Addr, endpoint_port: u16) -> String {
    format!("{}__{ip}/{endpoint_port}", service_part(port))
}

/// The service port's chains: `service-`, `local-`, `external-`, `firewall-` + this.
pub fn service_base(port: &ServicePortName) -> String {
    let readable = service_part(port);
    hashed(&readable, &readable)
}

/// An endpoint's chain: `endpoint-` + this.
pub fn endpoint_chain(port: &ServicePortName, ip: Ipv4Addr, endpoint_port: u16) -> String {
    let readable = endpoint_part(port, ip, endpoint_port);
    format!("endpoint-{}", hashed(&readable, &readable))
}

/// An endpoint's affinity set. The timeout is part of the hash: a set's timeout cannot
/// be changed in place, so a new timeout makes a new set.
pub fn affinity_set(port: &ServicePortName, ip: Ipv4Addr, endpoint_port: u16, timeout: u32) -> String {
    let readable = endpoint_part(port, ip, endpoint_port);
    format!("affinity-{}", hashed(&format!("{readable}#{timeout}"), &readable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::snapshot::Protocol;

    #[test]
    fn names_are_stable_distinct_and_bounded() {
        let port = |name: &str| ServicePortName {
            namespace: "default".into(),
            name: name.into(),
            port: "http".into(),
            protocol: Protocol::Tcp,
        };
        let a = service_base(&port("web"));
        assert_eq!(a, service_base(&port("web")));
        assert!(a.ends_with("-default/web/tcp/http"), "{a}");
        assert_eq!(a.len(), 8 + 1 + "default/web/tcp/http".len());
        assert_ne!(a[..8], service_base(&port("web2"))[..8]);
        let long = service_base(&port(&"x".repeat(250)));
        assert_eq!(long.len(), MAX_BASE_LEN);
        let ip = "10.1.0.5".parse().unwrap();
        assert!(endpoint_chain(&port("web"), ip, 8080).ends_with("-default/web/tcp/http__10.1.0.5/8080"));
        assert_ne!(affinity_set(&port("web"), ip, 8080, 10), affinity_set(&port("web"), ip, 8080, 20));
    }
}
