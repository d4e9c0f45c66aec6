//! The desired rules: a pure function from a snapshot and the node's settings to the
//! per-service chains, affinity sets and map elements of kube-proxy's nftables
//! layout. The fixed part (base chains, dispatch maps) is in `base`; turning either
//! into `nft` commands is `script`'s job.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use super::categorize::{Categorized, categorize};
use super::config::ProxyConfig;
use super::names;
use super::snapshot::{Endpoint, ServicePort, ServicePortName, Snapshot};

/// The fixed sets and maps whose elements the per-service rules fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Container {
    /// Every ClusterIP (for rejecting traffic to their undefined ports).
    ClusterIps,
    /// ClusterIP, external IP and load-balancer IP . protocol . port → service chain.
    ServiceIps,
    /// protocol . node port → service's external chain.
    ServiceNodePorts,
    /// Service addresses with no usable endpoints → reject or drop.
    NoEndpointServices,
    /// Node ports with no usable endpoints → reject or drop.
    NoEndpointNodePorts,
    /// Load-balancer IPs with loadBalancerSourceRanges → firewall chain.
    FirewallIps,
}

impl Container {
    pub const ALL: [Container; 6] = [
        Container::ClusterIps,
        Container::ServiceIps,
        Container::ServiceNodePorts,
        Container::NoEndpointServices,
        Container::NoEndpointNodePorts,
        Container::FirewallIps,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Container::ClusterIps => "cluster-ips",
            Container::ServiceIps => "service-ips",
            Container::ServiceNodePorts => "service-nodeports",
            Container::NoEndpointServices => "no-endpoint-services",
            Container::NoEndpointNodePorts => "no-endpoint-nodeports",
            Container::FirewallIps => "firewall-ips",
        }
    }

    /// `set` or `map`, as nft's commands name it.
    pub fn kind(self) -> &'static str {
        if self == Container::ClusterIps { "set" } else { "map" }
    }

    /// The body of its declaration.
    pub fn declaration(self) -> &'static str {
        match self {
            Container::ClusterIps => "type ipv4_addr ; comment \"Active ClusterIPs\" ;",
            Container::ServiceIps => {
                "type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ;"
            }
            Container::ServiceNodePorts => "type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ;",
            Container::NoEndpointServices => {
                "type ipv4_addr . inet_proto . inet_service : verdict ; comment \"services with no endpoints\" ;"
            }
            Container::NoEndpointNodePorts => {
                "type inet_proto . inet_service : verdict ; comment \"node ports with no endpoints\" ;"
            }
            Container::FirewallIps => {
                "type ipv4_addr . inet_proto . inet_service : verdict ; comment \"destinations subject to loadBalancerSourceRanges\" ;"
            }
        }
    }
}

/// Fixed chain names shared by `render` and `base`.
pub const MARK_MASQ_CHAIN: &str = "mark-for-masquerade";
pub const REJECT_CHAIN: &str = "reject-chain";

/// Everything the proxy programs besides the fixed skeleton.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// Per-service and per-endpoint chains, name → rules in order.
    pub chains: BTreeMap<String, Vec<String>>,
    /// ClientIP affinity sets, name → timeout in seconds.
    pub affinity_sets: BTreeMap<String, u32>,
    /// Elements of the fixed sets and maps: key → value (empty for sets).
    pub elements: BTreeMap<Container, BTreeMap<String, String>>,
    /// Service ports whose internal (ClusterIP) traffic has no local endpoint to go to
    /// under internalTrafficPolicy Local, and likewise for external traffic.
    pub no_local_internal: usize,
    pub no_local_external: usize,
}

impl Ruleset {
    pub fn rule_count(&self) -> usize {
        self.chains.values().map(Vec::len).sum()
    }

    pub fn element_count(&self) -> usize {
        self.elements.values().map(BTreeMap::len).sum()
    }

    fn element(&mut self, container: Container, key: String, value: String) {
        // Two services claiming one address and port: the first (in name order) wins,
        // where nft would refuse the whole transaction.
        self.elements.entry(container).or_default().entry(key).or_insert(value);
    }
}

/// The rules for `snapshot` on this node.
pub fn render(snapshot: &Snapshot, config: &ProxyConfig) -> Ruleset {
    let mut out = Ruleset::default();
    for (name, port) in &snapshot.services {
        let endpoints = snapshot.endpoints.get(name).map(Vec::as_slice).unwrap_or_default();
        render_port(&mut out, config, name, port, &categorize(endpoints, port));
    }
    out
}

/// The chain names of one service port.
struct Chains {
    cluster: String,
    local: String,
    external: String,
    firewall: String,
}

fn render_port(out: &mut Ruleset, config: &ProxyConfig, name: &ServicePortName, port: &ServicePort, eps: &Categorized) {
    let base = names::service_base(name);
    let chains = Chains {
        cluster: format!("service-{base}"),
        local: format!("local-{base}"),
        external: format!("external-{base}"),
        firewall: format!("firewall-{base}"),
    };
    let proto = name.protocol.as_str();

    let uses_cluster_chain = !eps.cluster.is_empty() && port.uses_cluster_endpoints();
    let uses_local_chain = !eps.local.is_empty() && port.uses_local_endpoints();
    let (internal_chain, has_internal) = if port.internal_policy_local {
        (&chains.local, eps.any && !eps.local.is_empty())
    } else {
        (&chains.cluster, eps.any)
    };
    let (external_policy_chain, has_external) = if port.external_policy_local {
        (&chains.local, eps.any && !eps.local.is_empty())
    } else {
        (&chains.cluster, eps.any)
    };
    // Needed even without external endpoints: pods and the node still short-circuit.
    let uses_external_chain = eps.any && port.externally_accessible();

    let reject = format!("goto {REJECT_CHAIN}");
    let (internal_verdict, external_verdict) =
        if eps.any { ("drop".to_string(), "drop".to_string()) } else { (reject.clone(), reject) };
    if eps.any && !has_internal {
        out.no_local_internal += 1;
    }
    if eps.any && !has_external {
        out.no_local_external += 1;
    }

    // Map elements: where each address of the service goes.
    let key = |ip: Ipv4Addr, p: u16| format!("{ip} . {proto} . {p}");
    out.element(Container::ClusterIps, port.cluster_ip.to_string(), String::new());
    if has_internal {
        out.element(Container::ServiceIps, key(port.cluster_ip, port.port), format!("goto {internal_chain}"));
    } else {
        out.element(Container::NoEndpointServices, key(port.cluster_ip, port.port), internal_verdict);
    }
    for &ip in port.external_ips.iter().chain(&port.load_balancer_ips) {
        if eps.any {
            out.element(Container::ServiceIps, key(ip, port.port), format!("goto {}", chains.external));
        }
        if !has_external {
            out.element(Container::NoEndpointServices, key(ip, port.port), external_verdict.clone());
        }
    }
    let uses_firewall = !port.load_balancer_ips.is_empty() && !port.load_balancer_source_ranges.is_empty();
    if uses_firewall {
        for &ip in &port.load_balancer_ips {
            out.element(Container::FirewallIps, key(ip, port.port), format!("goto {}", chains.firewall));
        }
        let mut sources: Vec<String> = port.load_balancer_source_ranges.iter().map(ToString::to_string).collect();
        // A VIP-style load balancer's address is local, so the node's own requests
        // arrive from it: let them through when the node itself is allowed.
        if config.node_ip.is_some_and(|ip| port.load_balancer_source_ranges.iter().any(|r| r.contains(ip))) {
            sources.extend(port.load_balancer_ips.iter().map(ToString::to_string));
        }
        out.chains.insert(chains.firewall.clone(), vec![format!("ip saddr != {{ {} }} drop", sources.join(", "))]);
    }
    if port.node_port != 0 {
        let key = format!("{proto} . {}", port.node_port);
        if eps.any {
            out.element(Container::ServiceNodePorts, key.clone(), format!("goto {}", chains.external));
        }
        if !has_external {
            out.element(Container::NoEndpointNodePorts, key, external_verdict);
        }
    }

    // Masquerade ClusterIP traffic from outside the pod network (or all of it): the
    // reply must come back through this node to be un-DNATed.
    let mut internal_rules = Vec::new();
    if has_internal {
        let dest = format!("ip daddr {} {proto} dport {}", port.cluster_ip, port.port);
        if config.masquerade_all {
            internal_rules.push(format!("{dest} jump {MARK_MASQ_CHAIN}"));
        } else if let Some(cidr) = config.cluster_cidr {
            internal_rules.push(format!("{dest} ip saddr != {cidr} jump {MARK_MASQ_CHAIN}"));
        }
    }

    if uses_external_chain {
        let mut rules = Vec::new();
        if port.external_policy_local {
            // Pods reaching an external address behave as if they went out and came
            // back in through the load balancer: neither policy applies to them.
            if let Some(cidr) = config.cluster_cidr {
                rules.push(format!("ip saddr {cidr} goto {} comment \"short-circuit pod traffic\"", chains.cluster));
            }
            // The node's own traffic has the external address as source: masquerade it.
            rules.push(format!("fib saddr type local jump {MARK_MASQ_CHAIN} comment \"masquerade local traffic\""));
            rules.push(format!("fib saddr type local goto {} comment \"short-circuit local traffic\"", chains.cluster));
        } else {
            // Endpoints may be on other nodes: masquerade so replies return here.
            rules.push(format!("jump {MARK_MASQ_CHAIN}"));
        }
        if has_external {
            rules.push(format!("goto {external_policy_chain}"));
        }
        out.chains.insert(chains.external.clone(), rules);
    }

    let affinity = |ep: &Endpoint| port.affinity_timeout.map(|t| names::affinity_set(name, ep.ip, ep.port, t));
    for (chain, endpoints, used) in
        [(&chains.cluster, &eps.cluster, uses_cluster_chain), (&chains.local, &eps.local, uses_local_chain)]
    {
        if !used {
            continue;
        }
        let mut rules = if chain == internal_chain { internal_rules.clone() } else { Vec::new() };
        // Clients seen recently keep their endpoint.
        for ep in endpoints {
            if let Some(set) = affinity(ep) {
                rules.push(format!("ip saddr @{set} goto {}", names::endpoint_chain(name, ep.ip, ep.port)));
            }
        }
        let arms: Vec<String> = endpoints
            .iter()
            .enumerate()
            .map(|(i, ep)| format!("{i} : goto {}", names::endpoint_chain(name, ep.ip, ep.port)))
            .collect();
        rules.push(format!("numgen random mod {} vmap {{ {} }}", endpoints.len(), arms.join(", ")));
        out.chains.insert(chain.clone(), rules);
    }

    for ep in &eps.reachable {
        let mut rules = vec![
            // Hairpin: an endpoint reaching itself through the service must not see
            // its own address as the source, or it would answer itself directly.
            format!("ip saddr {} jump {MARK_MASQ_CHAIN}", ep.ip),
        ];
        if let Some(set) = affinity(ep) {
            rules.push(format!("update @{set} {{ ip saddr }}"));
            out.affinity_sets.insert(set, port.affinity_timeout.unwrap_or_default());
        }
        rules.push(format!("meta l4proto {proto} dnat to {}:{}", ep.ip, ep.port));
        out.chains.insert(names::endpoint_chain(name, ep.ip, ep.port), rules);
    }
}
