//! Policy evaluation: which of this node's pods each policy isolates, and, rule by
//! rule, which addresses and ports it lets through — label selectors, namespace
//! selectors, ipBlocks and named ports all turned into addresses and numbers. This is
//! the whole of NetworkPolicy's semantics; `render` only writes it down for nftables.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use super::snapshot::{Peer, PodInfo, Policy, Port, Rule, Snapshot, namespace_labels};
use crate::proxy::{Ipv4Cidr, Protocol};

/// Every policy that selects a pod on this node, resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// In namespace and name order; policies selecting no local pod are left out.
    pub policies: Vec<ResolvedPolicy>,
    /// Local pods some Ingress policy selects.
    pub ingress_isolated: BTreeSet<Ipv4Addr>,
    /// Local pods some Egress policy selects.
    pub egress_isolated: BTreeSet<Ipv4Addr>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPolicy {
    pub namespace: String,
    pub name: String,
    /// The addresses of the local pods it selects (never empty).
    pub targets: BTreeSet<Ipv4Addr>,
    /// None when the policy is not of that type.
    pub ingress: Option<Vec<ResolvedRule>>,
    pub egress: Option<Vec<ResolvedRule>>,
}

/// One rule: traffic from (ingress) or to (egress) `peers` on `ports`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedRule {
    pub peers: Peers,
    pub ports: Ports,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peers {
    /// The rule lists no peers: everyone.
    Any,
    /// The addresses of the pods its pod and namespace selectors pick (None if it has
    /// no such peer), and of its ipBlocks less their excepts (None if it has none).
    Listed { pods: Option<BTreeSet<Ipv4Addr>>, ranges: Option<Vec<IpRange>> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ports {
    /// The rule lists no ports: every port and protocol.
    Any,
    /// Numeric ports and ranges (None if it lists none), and named ports resolved to
    /// `address . protocol . port` of the pods receiving the traffic (None if it lists
    /// none): for ingress the selected pods, for egress the peer pods.
    Listed { ranges: Option<Vec<PortRange>>, named: Option<BTreeSet<AddrPort>> },
}

/// `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpRange {
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    pub protocol: Protocol,
    pub first: u16,
    pub last: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddrPort {
    pub ip: Ipv4Addr,
    pub protocol: Protocol,
    pub port: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

/// Resolves every policy selecting a pod on `node_name` (host-network pods are never
/// selected). Peers are pods anywhere in the cluster.
pub fn resolve(snapshot: &Snapshot, node_name: &str) -> Resolved {
    let mut out = Resolved::default();
    for policy in &snapshot.policies {
        let selected: Vec<&PodInfo> = snapshot
            .pods
            .iter()
            .filter(|p| p.node_name == node_name && !p.host_network && p.namespace == policy.namespace)
            .filter(|p| policy.pod_selector.matches(&p.labels))
            .collect();
        if selected.is_empty() {
            continue;
        }
        let targets: BTreeSet<Ipv4Addr> = selected.iter().flat_map(|p| p.ips.iter().copied()).collect();
        let rules = |rules: &Option<Vec<Rule>>, direction| {
            rules.as_ref().map(|rules| {
                rules.iter().map(|rule| resolve_rule(snapshot, policy, rule, direction, &selected)).collect::<Vec<_>>()
            })
        };
        let ingress = rules(&policy.ingress, Direction::Ingress);
        let egress = rules(&policy.egress, Direction::Egress);
        if ingress.is_some() {
            out.ingress_isolated.extend(&targets);
        }
        if egress.is_some() {
            out.egress_isolated.extend(&targets);
        }
        out.policies.push(ResolvedPolicy {
            namespace: policy.namespace.clone(),
            name: policy.name.clone(),
            targets,
            ingress,
            egress,
        });
    }
    out
}

fn resolve_rule(
    snapshot: &Snapshot,
    policy: &Policy,
    rule: &Rule,
    direction: Direction,
    selected: &[&PodInfo],
) -> ResolvedRule {
    let peers = resolve_peers(snapshot, &policy.namespace, &rule.peers);
    if rule.ports.is_empty() {
        return ResolvedRule { peers, ports: Ports::Any };
    }
    let mut ranges: Option<Vec<PortRange>> = None;
    let mut named: Option<BTreeSet<AddrPort>> = None;
    for port in &rule.ports {
        match port {
            Port::Range { protocol, first, last } => {
                ranges.get_or_insert_default().push(PortRange { protocol: *protocol, first: *first, last: *last })
            }
            Port::Named { protocol, name } => {
                let named = named.get_or_insert_default();
                // The pods at the receiving end: those selected for ingress, the peer
                // pods (wherever they run) for egress.
                let receivers: Vec<&PodInfo> = match direction {
                    Direction::Ingress => selected.to_vec(),
                    Direction::Egress => {
                        snapshot.pods.iter().filter(|p| p.ips.iter().any(|ip| peers.contains(*ip))).collect()
                    }
                };
                for pod in receivers {
                    let Some(number) = pod.named_port(name, *protocol) else { continue };
                    for ip in &pod.ips {
                        if direction == Direction::Ingress || peers.contains(*ip) {
                            named.insert(AddrPort { ip: *ip, protocol: *protocol, port: number });
                        }
                    }
                }
            }
            Port::Nothing => {}
        }
    }
    ResolvedRule { peers, ports: Ports::Listed { ranges: ranges.map(merge_ports), named } }
}

fn resolve_peers(snapshot: &Snapshot, namespace: &str, peers: &[Peer]) -> Peers {
    if peers.is_empty() {
        return Peers::Any;
    }
    let mut pods: Option<BTreeSet<Ipv4Addr>> = None;
    let mut ranges: Option<Vec<IpRange>> = None;
    for peer in peers {
        match peer {
            Peer::Pods { namespaces, pods: selector } => {
                let ips = pods.get_or_insert_default();
                for pod in &snapshot.pods {
                    let namespace_ok = match namespaces {
                        None => pod.namespace == namespace,
                        Some(sel) => match snapshot.namespaces.get(&pod.namespace) {
                            Some(labels) => sel.matches(labels),
                            None => sel.matches(&namespace_labels(&pod.namespace, Default::default())),
                        },
                    };
                    if namespace_ok && selector.as_ref().is_none_or(|s| s.matches(&pod.labels)) {
                        ips.extend(&pod.ips);
                    }
                }
            }
            Peer::Block { cidr, except } => ranges.get_or_insert_default().extend(block_ranges(*cidr, except)),
            Peer::Nothing => {}
        }
    }
    Peers::Listed { pods, ranges: ranges.map(merge_ranges) }
}

impl Peers {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        match self {
            Peers::Any => true,
            Peers::Listed { pods, ranges } => {
                pods.as_ref().is_some_and(|p| p.contains(&ip))
                    || ranges.iter().flatten().any(|r| r.first <= ip && ip <= r.last)
            }
        }
    }
}

impl Ports {
    /// Whether traffic to `dst` on `protocol`/`port` matches (`protocol` None: not
    /// TCP, UDP or SCTP, which only a rule without ports lets through).
    pub fn contains(&self, dst: Ipv4Addr, protocol: Option<Protocol>, port: u16) -> bool {
        let Some(protocol) = protocol else { return matches!(self, Ports::Any) };
        match self {
            Ports::Any => true,
            Ports::Listed { ranges, named } => {
                ranges.iter().flatten().any(|r| r.protocol == protocol && r.first <= port && port <= r.last)
                    || named.as_ref().is_some_and(|n| n.contains(&AddrPort { ip: dst, protocol, port }))
            }
        }
    }
}

impl Resolved {
    /// Whether these policies let a new connection from `src` to `dst` through, as the
    /// rules `render` writes decide it on this node (both ends judged only if local).
    pub fn allows(&self, src: Ipv4Addr, dst: Ipv4Addr, protocol: Option<Protocol>, port: u16) -> bool {
        let rule_allows =
            |rule: &ResolvedRule, peer: Ipv4Addr| rule.peers.contains(peer) && rule.ports.contains(dst, protocol, port);
        let egress_ok = !self.egress_isolated.contains(&src)
            || self
                .policies
                .iter()
                .filter(|p| p.targets.contains(&src))
                .any(|p| p.egress.iter().flatten().any(|rule| rule_allows(rule, dst)));
        let ingress_ok = !self.ingress_isolated.contains(&dst)
            || self
                .policies
                .iter()
                .filter(|p| p.targets.contains(&dst))
                .any(|p| p.ingress.iter().flatten().any(|rule| rule_allows(rule, src)));
        egress_ok && ingress_ok
    }
}

fn cidr_range(cidr: Ipv4Cidr) -> (u32, u32) {
    let first = u32::from(cidr.addr);
    let host_bits = 32 - u32::from(cidr.prefix.min(32));
    let last = if host_bits == 32 { u32::MAX } else { first | ((1u32 << host_bits) - 1) };
    (first, last)
}

/// `cidr` less every `except`, as disjoint ranges.
fn block_ranges(cidr: Ipv4Cidr, except: &[Ipv4Cidr]) -> Vec<IpRange> {
    let mut ranges = vec![cidr_range(cidr)];
    for hole in except {
        let (hole_first, hole_last) = cidr_range(*hole);
        ranges = ranges
            .into_iter()
            .flat_map(|(first, last)| {
                if hole_last < first || hole_first > last {
                    return vec![(first, last)];
                }
                let mut left = Vec::new();
                if hole_first > first {
                    left.push((first, hole_first - 1));
                }
                if hole_last < last {
                    left.push((hole_last + 1, last));
                }
                left
            })
            .collect();
    }
    ranges.into_iter().map(|(f, l)| IpRange { first: f.into(), last: l.into() }).collect()
}

/// Sorted, with overlapping and adjacent ranges joined (nft refuses overlaps).
fn merge<T: Copy + Ord>(mut items: Vec<(T, u64, u64)>) -> Vec<(T, u64, u64)> {
    items.sort();
    let mut out: Vec<(T, u64, u64)> = Vec::new();
    for (key, first, last) in items {
        match out.last_mut() {
            Some((k, _, end)) if *k == key && first <= *end + 1 => *end = (*end).max(last),
            _ => out.push((key, first, last)),
        }
    }
    out
}

fn merge_ranges(ranges: Vec<IpRange>) -> Vec<IpRange> {
    let items = ranges.iter().map(|r| ((), u64::from(u32::from(r.first)), u64::from(u32::from(r.last)))).collect();
    merge(items)
        .into_iter()
        .map(|((), f, l)| IpRange { first: Ipv4Addr::from(f as u32), last: Ipv4Addr::from(l as u32) })
        .collect()
}

fn merge_ports(ranges: Vec<PortRange>) -> Vec<PortRange> {
    let items = ranges.iter().map(|r| (r.protocol, u64::from(r.first), u64::from(r.last))).collect();
    merge(items).into_iter().map(|(protocol, f, l)| PortRange { protocol, first: f as u16, last: l as u16 }).collect()
}
