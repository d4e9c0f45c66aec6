//! The desired table, a pure function of the resolved policies: fixed base chains
//! and isolation sets, then per policy a set of its local pods, a chain per direction
//! with one `accept` rule per way a rule can match, and the sets those rules look up
//! (peer pods, ipBlock ranges, ports, named ports). Pods, labels and namespaces
//! changing only change set elements, except when a policy gains its first or loses
//! its last local pod (its chains come or go); policy edits change rules.
//!
//! ```text
//! egress-forward  (forward, priority 0): established → accept; saddr isolated → jump pod-egress
//! egress-input    (input,   priority 0): the same, for pods talking to the node
//! ingress-forward (forward, priority 1): established → accept; daddr isolated → jump pod-ingress
//! pod-egress:  saddr @targets-P jump eg-P … ; drop        (an `accept` in eg-P ends the hook)
//! pod-ingress: daddr @targets-P jump in-P … ; drop
//! ```
//!
//! Egress and ingress are separate base chains because an `accept` is final only for
//! its own base chain: allowed egress still faces the destination's ingress check.
//! Traffic from the node itself never passes the forward hook (it leaves through
//! output), so the node always reaches its pods, as upstream requires.

use std::collections::{BTreeMap, BTreeSet};

use super::resolve::{AddrPort, IpRange, Peers, PortRange, Ports, Resolved, ResolvedRule, resolve};
use super::snapshot::Snapshot;
use crate::proxy::names;

pub const INGRESS_ISOLATED: &str = "ingress-isolated";
pub const EGRESS_ISOLATED: &str = "egress-isolated";
pub const POD_INGRESS: &str = "pod-ingress";
pub const POD_EGRESS: &str = "pod-egress";

/// The base chains: name, hook, priority. The forward hook runs after the proxy's
/// DNAT (prerouting), so policies see the real destination pod.
pub const BASE_CHAINS: [(&str, &str, i32); 3] =
    [("egress-forward", "forward", 0), ("egress-input", "input", 0), ("ingress-forward", "forward", 1)];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetKind {
    /// `ipv4_addr`: pod addresses.
    Addresses,
    /// `ipv4_addr` intervals: ipBlocks less their excepts.
    Ranges,
    /// `inet_proto . inet_service` intervals: numeric ports and ranges.
    Ports,
    /// `ipv4_addr . inet_proto . inet_service`: named ports, resolved per pod.
    AddressPorts,
}

impl SetKind {
    /// The body of the set's declaration.
    pub fn declaration(self) -> &'static str {
        match self {
            SetKind::Addresses => "type ipv4_addr ;",
            SetKind::Ranges => "type ipv4_addr ; flags interval ;",
            SetKind::Ports => "type inet_proto . inet_service ; flags interval ;",
            SetKind::AddressPorts => "type ipv4_addr . inet_proto . inet_service ;",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftSet {
    pub kind: SetKind,
    /// As nft writes them: `10.0.0.1`, `10.0.0.0-10.0.0.127`, `tcp . 80`,
    /// `udp . 1000-2000`, `10.0.0.1 . tcp . 8080`.
    pub elements: BTreeSet<String>,
}

/// The whole table but its declaration: every set with its elements, every chain
/// (base chains too, see `BASE_CHAINS`) with its rules in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ruleset {
    pub sets: BTreeMap<String, NftSet>,
    pub chains: BTreeMap<String, Vec<String>>,
    /// Policies selecting local pods.
    pub policies: usize,
}

impl Ruleset {
    pub fn rule_count(&self) -> usize {
        self.chains.values().map(Vec::len).sum()
    }

    pub fn element_count(&self) -> usize {
        self.sets.values().map(|s| s.elements.len()).sum()
    }

    fn set(&mut self, name: &str, kind: SetKind, elements: impl IntoIterator<Item = String>) {
        self.sets.insert(name.to_string(), NftSet { kind, elements: elements.into_iter().collect() });
    }
}

/// The rules enforcing `snapshot`'s policies on the node `node_name`.
pub fn render(snapshot: &Snapshot, node_name: &str) -> Ruleset {
    render_resolved(&resolve(snapshot, node_name))
}

/// A policy's chains and sets are named after it: `in-`/`eg-` + this for its chains,
/// `targets-` + this for its pods, `in3-pods-` + this for rule 3's peer pods, …
pub fn policy_base(namespace: &str, name: &str) -> String {
    let readable = format!("{namespace}/{name}");
    names::hashed(&readable, &readable)
}

pub fn render_resolved(resolved: &Resolved) -> Ruleset {
    let mut out = Ruleset { policies: resolved.policies.len(), ..Ruleset::default() };
    out.set(INGRESS_ISOLATED, SetKind::Addresses, resolved.ingress_isolated.iter().map(ToString::to_string));
    out.set(EGRESS_ISOLATED, SetKind::Addresses, resolved.egress_isolated.iter().map(ToString::to_string));
    let established = "ct state established,related accept".to_string();
    for (name, ..) in BASE_CHAINS {
        let jump = match name {
            "ingress-forward" => format!("ip daddr @{INGRESS_ISOLATED} jump {POD_INGRESS}"),
            _ => format!("ip saddr @{EGRESS_ISOLATED} jump {POD_EGRESS}"),
        };
        out.chains.insert(name.to_string(), vec![established.clone(), jump]);
    }
    let mut dispatch_in = Vec::new();
    let mut dispatch_eg = Vec::new();
    for policy in &resolved.policies {
        let base = policy_base(&policy.namespace, &policy.name);
        let targets = format!("targets-{base}");
        let mut used = false;
        if let Some(rules) = &policy.ingress {
            let chain = format!("in-{base}");
            let rules = policy_rules(&mut out, rules, "in", &base, Side::Ingress);
            if !rules.is_empty() {
                dispatch_in.push(format!("ip daddr @{targets} jump {chain}"));
                out.chains.insert(chain, rules);
                used = true;
            }
        }
        if let Some(rules) = &policy.egress {
            let chain = format!("eg-{base}");
            let rules = policy_rules(&mut out, rules, "eg", &base, Side::Egress);
            if !rules.is_empty() {
                dispatch_eg.push(format!("ip saddr @{targets} jump {chain}"));
                out.chains.insert(chain, rules);
                used = true;
            }
        }
        if used {
            out.set(&targets, SetKind::Addresses, policy.targets.iter().map(ToString::to_string));
        }
    }
    dispatch_in.push("counter drop".to_string());
    dispatch_eg.push("counter drop".to_string());
    out.chains.insert(POD_INGRESS.to_string(), dispatch_in);
    out.chains.insert(POD_EGRESS.to_string(), dispatch_eg);
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Ingress,
    Egress,
}

/// One way a rule can match on one side (peer or port): its condition (empty for
/// "anything") and the set the condition looks up.
struct Alternative {
    condition: String,
    set: Option<(String, NftSet)>,
}

impl Alternative {
    fn any() -> Alternative {
        Alternative { condition: String::new(), set: None }
    }

    fn lookup(
        condition: String,
        name: String,
        kind: SetKind,
        elements: impl IntoIterator<Item = String>,
    ) -> Alternative {
        Alternative { condition, set: Some((name, NftSet { kind, elements: elements.into_iter().collect() })) }
    }
}

/// A policy's rules for one direction: for each of its rules, one `accept` per
/// (peer kind × port kind) it lists, each looking its sets up.
fn policy_rules(out: &mut Ruleset, rules: &[ResolvedRule], tag: &str, base: &str, side: Side) -> Vec<String> {
    let peer_field = if side == Side::Ingress { "ip saddr" } else { "ip daddr" };
    let mut chain = Vec::new();
    for (k, rule) in rules.iter().enumerate() {
        let set_name = |kind: &str| format!("{tag}{k}-{kind}-{base}");
        let mut peers = Vec::new();
        match &rule.peers {
            Peers::Any => peers.push(Alternative::any()),
            Peers::Listed { pods, ranges } => {
                if let Some(pods) = pods {
                    let name = set_name("pods");
                    let condition = format!("{peer_field} @{name}");
                    peers.push(Alternative::lookup(
                        condition,
                        name,
                        SetKind::Addresses,
                        pods.iter().map(ToString::to_string),
                    ));
                }
                if let Some(ranges) = ranges {
                    let name = set_name("cidrs");
                    let condition = format!("{peer_field} @{name}");
                    peers.push(Alternative::lookup(condition, name, SetKind::Ranges, ranges.iter().map(range_element)));
                }
            }
        }
        let mut ports = Vec::new();
        // Egress named ports name the peer too (the peer pods' own ports), so they
        // are one rule of their own.
        let mut egress_named = None;
        match &rule.ports {
            Ports::Any => ports.push(Alternative::any()),
            Ports::Listed { ranges, named } => {
                if let Some(ranges) = ranges {
                    let name = set_name("ports");
                    let condition = format!("meta l4proto . th dport @{name}");
                    ports.push(Alternative::lookup(condition, name, SetKind::Ports, ranges.iter().map(port_element)));
                }
                if let Some(named) = named {
                    let name = set_name("named");
                    let condition = format!("ip daddr . meta l4proto . th dport @{name}");
                    let alternative = Alternative::lookup(
                        condition,
                        name,
                        SetKind::AddressPorts,
                        named.iter().map(addr_port_element),
                    );
                    match side {
                        Side::Ingress => ports.push(alternative),
                        Side::Egress => egress_named = Some(alternative),
                    }
                }
            }
        }
        // A side with no alternative left (only peers or ports that match nothing)
        // makes the whole rule match nothing: no rules, no sets.
        if !peers.is_empty() && !ports.is_empty() {
            for peer in &peers {
                for port in &ports {
                    let parts: Vec<&str> = [peer.condition.as_str(), port.condition.as_str(), "accept"]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect();
                    chain.push(parts.join(" "));
                }
            }
            out.sets.extend(peers.into_iter().chain(ports).filter_map(|a| a.set));
        }
        if let Some(Alternative { condition, set }) = egress_named {
            chain.push(format!("{condition} accept"));
            out.sets.extend(set);
        }
    }
    chain
}

fn range_element(range: &IpRange) -> String {
    if range.first == range.last { range.first.to_string() } else { format!("{}-{}", range.first, range.last) }
}

fn port_element(range: &PortRange) -> String {
    let proto = range.protocol.as_str();
    if range.first == range.last {
        format!("{proto} . {}", range.first)
    } else {
        format!("{proto} . {}-{}", range.first, range.last)
    }
}

fn addr_port_element(target: &AddrPort) -> String {
    format!("{} . {} . {}", target.ip, target.protocol.as_str(), target.port)
}
