//! What enforcement needs from NetworkPolicies, Pods and Namespaces, boiled down:
//! policies with their defaults applied (as the API server's `SetDefaults_NetworkPolicy`
//! does) and parsed selectors, pods with their IPv4 addresses and named ports, and
//! namespace labels. Whatever cannot be understood is kept as something that matches
//! nothing, never as something that matches everything.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::selector::{Labels, Selector};
use crate::proxy::{Ipv4Cidr, Protocol};

/// The label the API server puts on every namespace, naming it.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// One pod that has an address: a possible peer anywhere in the cluster, and a
/// possible target if it is on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// `spec.nodeName` (empty before scheduling).
    pub node_name: String,
    /// Its IPv4 addresses (`status.podIPs`, else `status.podIP`).
    pub ips: Vec<Ipv4Addr>,
    /// Host-network pods share the node's address and are never isolated.
    pub host_network: bool,
    /// Its containers' named ports.
    pub ports: Vec<NamedPort>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

impl PodInfo {
    /// The pod as enforcement sees it; None for pods without an IPv4 address and for
    /// finished ones (whose address may already be someone else's).
    pub fn from_api(pod: &Pod) -> Option<PodInfo> {
        let status = pod.status.as_ref()?;
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let mut ips: Vec<Ipv4Addr> =
            status.pod_ips.iter().flatten().filter_map(|ip| ip.ip.parse::<Ipv4Addr>().ok()).collect();
        if ips.is_empty() {
            ips.extend(status.pod_ip.as_deref().and_then(|ip| ip.parse::<Ipv4Addr>().ok()));
        }
        if ips.is_empty() {
            return None;
        }
        let spec = pod.spec.as_ref();
        let mut ports = Vec::new();
        for container in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
            for port in container.ports.iter().flatten() {
                let (Some(name), Some(protocol), Ok(number)) = (
                    port.name.as_deref().filter(|n| !n.is_empty()),
                    Protocol::parse(port.protocol.as_deref()),
                    u16::try_from(port.container_port),
                ) else {
                    continue;
                };
                ports.push(NamedPort { name: name.to_string(), protocol, port: number });
            }
        }
        Some(PodInfo {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            node_name: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            ips,
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
            ports,
        })
    }

    /// The container port named `name` for `protocol`, if the pod has one.
    pub fn named_port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.ports.iter().find(|p| p.name == name && p.protocol == protocol).map(|p| p.port)
    }
}

/// A NetworkPolicy, defaulted and parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    pub pod_selector: Selector,
    /// The ingress rules if the policy is of type Ingress (an empty list isolates and
    /// allows nothing), None if it is not.
    pub ingress: Option<Vec<Rule>>,
    /// Likewise for Egress.
    pub egress: Option<Vec<Rule>>,
}

/// One ingress or egress rule: traffic matching any peer on any port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Empty: every source (ingress) or destination (egress).
    pub peers: Vec<Peer>,
    /// Empty: every port and protocol.
    pub ports: Vec<Port>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Pods matching `pods` (all if None) in the namespaces matching `namespaces` (the
    /// policy's own if None). Never both None.
    Pods { namespaces: Option<Selector>, pods: Option<Selector> },
    /// Addresses in `cidr` but not in any of `except`.
    Block { cidr: Ipv4Cidr, except: Vec<Ipv4Cidr> },
    /// A peer that matches nothing: none given, or an IPv6 or invalid block.
    Nothing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Port {
    /// `first..=last` of `protocol`; a port without a number is 0-65535.
    Range { protocol: Protocol, first: u16, last: u16 },
    /// A container port name, resolved on the pod at the receiving end.
    Named { protocol: Protocol, name: String },
    /// A port that matches nothing (an unknown protocol, an invalid number or range).
    Nothing,
}

impl Policy {
    pub fn from_api(policy: &NetworkPolicy) -> Policy {
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let name = policy.metadata.name.clone().unwrap_or_default();
        let spec = policy.spec.clone().unwrap_or_default();
        let egress_rules = spec.egress.unwrap_or_default();
        // SetDefaults_NetworkPolicy: Ingress always, Egress when there are egress rules.
        let types = match spec.policy_types.filter(|t| !t.is_empty()) {
            Some(types) => types,
            None if egress_rules.is_empty() => vec!["Ingress".to_string()],
            None => vec!["Ingress".to_string(), "Egress".to_string()],
        };
        let has = |t: &str| types.iter().any(|x| x == t);
        let ingress = has("Ingress").then(|| {
            let rules = spec.ingress.unwrap_or_default();
            rules.iter().map(|r| Rule::parse(r.from.as_deref(), r.ports.as_deref())).collect()
        });
        let egress = has("Egress")
            .then(|| egress_rules.iter().map(|r| Rule::parse(r.to.as_deref(), r.ports.as_deref())).collect());
        Policy {
            namespace,
            name,
            pod_selector: spec.pod_selector.as_ref().map(Selector::from_api).unwrap_or_default(),
            ingress,
            egress,
        }
    }
}

impl Rule {
    fn parse(peers: Option<&[NetworkPolicyPeer]>, ports: Option<&[NetworkPolicyPort]>) -> Rule {
        Rule {
            peers: peers.unwrap_or_default().iter().map(Peer::parse).collect(),
            ports: ports.unwrap_or_default().iter().map(Port::parse).collect(),
        }
    }
}

impl Peer {
    fn parse(peer: &NetworkPolicyPeer) -> Peer {
        if let Some(block) = &peer.ip_block {
            if peer.pod_selector.is_some() || peer.namespace_selector.is_some() {
                return Peer::Nothing; // invalid: ipBlock goes alone
            }
            let Ok(cidr) = block.cidr.parse::<Ipv4Cidr>() else { return Peer::Nothing };
            let mut except = Vec::new();
            for e in block.except.iter().flatten() {
                match e.parse::<Ipv4Cidr>() {
                    Ok(e) => except.push(e),
                    // An except we cannot read: leave the whole block out rather than
                    // allow what it meant to keep out.
                    Err(_) => return Peer::Nothing,
                }
            }
            return Peer::Block { cidr, except };
        }
        let namespaces = peer.namespace_selector.as_ref().map(Selector::from_api);
        let pods = peer.pod_selector.as_ref().map(Selector::from_api);
        if namespaces.is_none() && pods.is_none() {
            return Peer::Nothing;
        }
        Peer::Pods { namespaces, pods }
    }
}

impl Port {
    fn parse(port: &NetworkPolicyPort) -> Port {
        let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else { return Port::Nothing };
        let number = |n: i32| u16::try_from(n).ok().filter(|n| *n > 0);
        match (&port.port, port.end_port) {
            (None, None) => Port::Range { protocol, first: 0, last: u16::MAX },
            (Some(IntOrString::Int(n)), end) => Port::range(protocol, number(*n), end),
            (Some(IntOrString::String(name)), None) => Port::Named { protocol, name: name.clone() },
            // endPort needs a numeric port (the API server refuses the rest).
            (None | Some(IntOrString::String(_)), Some(_)) => Port::Nothing,
        }
    }

    fn range(protocol: Protocol, first: Option<u16>, end: Option<i32>) -> Port {
        let Some(first) = first else { return Port::Nothing };
        let last = match end {
            None => first,
            Some(end) => match u16::try_from(end) {
                Ok(last) if last >= first => last,
                _ => return Port::Nothing,
            },
        };
        Port::Range { protocol, first, last }
    }
}

/// Everything one sync renders from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Sorted by namespace and name.
    pub policies: Vec<Policy>,
    /// Pods with addresses, sorted by namespace and name.
    pub pods: Vec<PodInfo>,
    /// Namespace labels, each with its `kubernetes.io/metadata.name`.
    pub namespaces: BTreeMap<String, Labels>,
}

impl Snapshot {
    pub fn build<'a>(
        policies: impl IntoIterator<Item = &'a NetworkPolicy>,
        pods: impl IntoIterator<Item = &'a Pod>,
        namespaces: impl IntoIterator<Item = &'a Namespace>,
    ) -> Snapshot {
        let mut policies: Vec<Policy> = policies.into_iter().map(Policy::from_api).collect();
        policies.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut pods: Vec<PodInfo> = pods.into_iter().filter_map(PodInfo::from_api).collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let namespaces = namespaces
            .into_iter()
            .filter_map(|ns| {
                let name = ns.metadata.name.clone()?;
                Some((name.clone(), namespace_labels(&name, ns.metadata.labels.clone().unwrap_or_default())))
            })
            .collect();
        Snapshot { policies, pods, namespaces }
    }

    /// A namespace's labels; one not (yet) seen has only its name label.
    pub fn namespace_labels(&self, namespace: &str) -> Labels {
        self.namespaces.get(namespace).cloned().unwrap_or_else(|| namespace_labels(namespace, Labels::new()))
    }
}

/// `labels` with the name label the API server guarantees.
pub fn namespace_labels(name: &str, mut labels: Labels) -> Labels {
    labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
    labels
}
