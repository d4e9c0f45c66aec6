//! What the proxy needs from Services and EndpointSlices, boiled down as kube-proxy's
//! service and endpoint change trackers do: one entry per service port, with the
//! endpoints the slices list for it (IPv4 only).

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::config::Ipv4Cidr;

/// The label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// kube-proxy's default ClientIP affinity timeout (3 hours).
const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The API's spelling; absent means TCP, as the API server defaults it.
    pub(crate) fn parse(protocol: Option<&str>) -> Option<Protocol> {
        match protocol.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// nft's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// A service port's identity: what endpoints are matched on (the slice port with the
/// same name and protocol), and what chain names are made of.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    pub namespace: String,
    pub name: String,
    pub port: String,
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.namespace, self.name, self.port)
    }
}

/// One port of a proxied Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub cluster_ip: Ipv4Addr,
    pub port: u16,
    /// 0 when the port has none.
    pub node_port: u16,
    pub external_ips: Vec<Ipv4Addr>,
    /// status.loadBalancer.ingress[].ip (VIP mode only).
    pub load_balancer_ips: Vec<Ipv4Addr>,
    pub load_balancer_source_ranges: Vec<Ipv4Cidr>,
    /// Seconds, for sessionAffinity ClientIP.
    pub affinity_timeout: Option<u32>,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
}

impl ServicePort {
    /// Reachable other than by ClusterIP.
    pub fn externally_accessible(&self) -> bool {
        self.node_port != 0 || !self.load_balancer_ips.is_empty() || !self.external_ips.is_empty()
    }

    /// Whether any traffic goes to cluster-wide endpoints; external traffic always
    /// may, since pods and the node short-circuit the Local policy.
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || self.externally_accessible()
    }

    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.external_policy_local && self.externally_accessible())
    }
}

/// One endpoint of a service port, with its slice conditions read as kube-proxy reads
/// them (ready and serving default to true, terminating to false).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub local: bool,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

/// Every proxied service port and its endpoints (sorted by address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub services: BTreeMap<ServicePortName, ServicePort>,
    pub endpoints: BTreeMap<ServicePortName, Vec<Endpoint>>,
}

impl Snapshot {
    /// The proxy's view of these objects from the node named `node_name`.
    pub fn build<'a>(
        services: impl IntoIterator<Item = &'a Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
        node_name: &str,
    ) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for service in services {
            for (name, port) in service_ports(service) {
                snapshot.services.insert(name, port);
            }
        }
        // Slices in name order, so which of two slices listing one address wins does
        // not depend on the order the watch delivered them.
        let mut slices: Vec<&EndpointSlice> = slices.into_iter().collect();
        slices
            .sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
        let mut by_port: BTreeMap<ServicePortName, BTreeMap<(Ipv4Addr, u16), Endpoint>> = BTreeMap::new();
        for slice in slices {
            add_slice(slice, node_name, &mut by_port);
        }
        for (name, endpoints) in by_port {
            // Endpoints of ports no Service has are of no use.
            if snapshot.services.contains_key(&name) {
                snapshot.endpoints.insert(name, endpoints.into_values().collect());
            }
        }
        snapshot
    }
}

/// The service's ports, or none for services kube-proxy skips: headless, ExternalName,
/// or without an IPv4 ClusterIP.
fn service_ports(service: &Service) -> Vec<(ServicePortName, ServicePort)> {
    let (Some(spec), Some(namespace), Some(name)) =
        (service.spec.as_ref(), service.metadata.namespace.as_ref(), service.metadata.name.as_ref())
    else {
        return Vec::new();
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let cluster_ips = spec.cluster_ips.iter().flatten().chain(spec.cluster_ip.iter());
    let Some(cluster_ip) = cluster_ips.filter_map(|ip| ip.parse::<Ipv4Addr>().ok()).next() else {
        return Vec::new(); // "None", unset, or IPv6 only
    };
    let ipv4s = |ips: &Option<Vec<String>>| -> Vec<Ipv4Addr> {
        ips.iter().flatten().filter_map(|ip| ip.trim().parse().ok()).collect()
    };
    let external_ips = ipv4s(&spec.external_ips);
    let ingress = service.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref());
    // Proxy-mode load balancers deliver to the node themselves: their IPs are not ours.
    let load_balancer_ips = ingress
        .into_iter()
        .flatten()
        .filter(|ing| ing.ip_mode.as_deref().unwrap_or("VIP") == "VIP")
        .filter_map(|ing| ing.ip.as_deref()?.parse().ok())
        .collect::<Vec<Ipv4Addr>>();
    let load_balancer_source_ranges =
        spec.load_balancer_source_ranges.iter().flatten().filter_map(|r| r.parse().ok()).collect::<Vec<Ipv4Cidr>>();
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        let timeout = spec.session_affinity_config.as_ref().and_then(|c| c.client_ip.as_ref()?.timeout_seconds);
        timeout.and_then(|t| u32::try_from(t).ok()).filter(|t| *t > 0).unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
    });
    let node_port_type = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let external_policy_local = node_port_type && spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");

    let mut ports = Vec::new();
    for port in spec.ports.iter().flatten() {
        let (Some(protocol), Ok(number)) = (Protocol::parse(port.protocol.as_deref()), u16::try_from(port.port)) else {
            continue;
        };
        let key = ServicePortName {
            namespace: namespace.clone(),
            name: name.clone(),
            port: port.name.clone().unwrap_or_default(),
            protocol,
        };
        let value = ServicePort {
            cluster_ip,
            port: number,
            node_port: port.node_port.and_then(|p| u16::try_from(p).ok()).unwrap_or(0),
            external_ips: external_ips.clone(),
            load_balancer_ips: load_balancer_ips.clone(),
            load_balancer_source_ranges: load_balancer_source_ranges.clone(),
            affinity_timeout,
            external_policy_local,
            internal_policy_local,
        };
        ports.push((key, value));
    }
    ports
}

/// Adds the slice's IPv4 endpoints under each of its ports. An address listed by two
/// slices is kept once, preferring the listing that says it is local (as upstream).
fn add_slice(
    slice: &EndpointSlice,
    node_name: &str,
    by_port: &mut BTreeMap<ServicePortName, BTreeMap<(Ipv4Addr, u16), Endpoint>>,
) {
    if slice.address_type != "IPv4" {
        return;
    }
    let labels = slice.metadata.labels.as_ref();
    let (Some(service), Some(namespace)) =
        (labels.and_then(|l| l.get(SERVICE_NAME_LABEL)), slice.metadata.namespace.as_ref())
    else {
        return;
    };
    for port in slice.ports.iter().flatten() {
        let (Some(protocol), Some(number)) = (
            Protocol::parse(port.protocol.as_deref()),
            port.port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0),
        ) else {
            continue;
        };
        let key = ServicePortName {
            namespace: namespace.clone(),
            name: service.clone(),
            port: port.name.clone().unwrap_or_default(),
            protocol,
        };
        let endpoints = by_port.entry(key).or_default();
        for endpoint in slice.endpoints.iter().flatten() {
            // Only the first address counts: the rest are for other families or ignored upstream.
            let Some(ip) = endpoint.addresses.first().and_then(|a| a.parse::<Ipv4Addr>().ok()) else {
                continue;
            };
            let conditions = endpoint.conditions.as_ref();
            let found = Endpoint {
                ip,
                port: number,
                local: endpoint.node_name.as_deref() == Some(node_name),
                ready: conditions.and_then(|c| c.ready).unwrap_or(true),
                serving: conditions.and_then(|c| c.serving).unwrap_or(true),
                terminating: conditions.and_then(|c| c.terminating).unwrap_or(false),
            };
            match endpoints.get(&(ip, number)) {
                Some(known) if known.local || !found.local => {}
                _ => {
                    endpoints.insert((ip, number), found);
                }
            }
        }
    }
}
