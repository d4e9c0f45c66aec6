//! The in-memory view that answers are made from: one entry per Service, rebuilt from
//! the Service and its EndpointSlices whenever either changes, and the reverse maps
//! from addresses back to names for PTR.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::DnsError;
use super::names::{Zone, dashed};

/// CoreDNS's default TTL for every record it makes.
pub const DEFAULT_TTL: u32 = 5;

/// A Service's namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> ServiceKey {
        ServiceKey { namespace: namespace.to_ascii_lowercase(), name: name.to_ascii_lowercase() }
    }
}

/// What a Service's name resolves to.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// Its cluster IPs (one per family).
    ClusterIp(Vec<IpAddr>),
    /// clusterIP None: the addresses of its endpoints.
    Headless,
    /// A CNAME to this name; None when spec.externalName is missing or an IP address,
    /// which CoreDNS does not answer for.
    ExternalName(Option<Name>),
}

/// A Service or EndpointSlice port; name and protocol lower-cased for matching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub protocol: String,
    /// -1 stands for "no ports declared", as in CoreDNS: the address still resolves but
    /// makes no SRV record.
    pub port: i32,
}

/// One address of an endpoint in the Service's EndpointSlices.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    /// Its first label: the endpoint's hostname, or its address dashed.
    pub label: String,
    pub ip: IpAddr,
    /// The ports of the slice it came from (never empty: see `Port::port`).
    pub ports: Arc<[Port]>,
}

/// The records of one Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub kind: Kind,
    pub ports: Vec<Port>,
    /// Ready endpoints (all of them with publishNotReadyAddresses), sorted by address.
    pub endpoints: Vec<Endpoint>,
}

impl Entry {
    /// The entry for `service`, with the endpoints of `slices` (those labelled with its
    /// name; others are ignored).
    pub fn build<'a>(service: &Service, slices: impl IntoIterator<Item = &'a EndpointSlice>) -> Entry {
        let no_spec = ServiceSpec::default();
        let spec = service.spec.as_ref().unwrap_or(&no_spec);
        let kind = if spec.type_.as_deref() == Some("ExternalName") {
            Kind::ExternalName(spec.external_name.as_deref().and_then(external_target))
        } else if spec.cluster_ip.as_deref() == Some("None") {
            Kind::Headless
        } else {
            // clusterIPs lists every family's address; clusterIP alone is the older form.
            let listed = spec.cluster_ips.as_deref().filter(|ips| !ips.is_empty());
            let ips = listed.unwrap_or(spec.cluster_ip.as_slice());
            Kind::ClusterIp(ips.iter().filter_map(|ip| ip.parse().ok()).collect())
        };
        let ports = spec
            .ports
            .iter()
            .flatten()
            .map(|p| Port { name: lower(p.name.as_deref()), protocol: protocol(p.protocol.as_deref()), port: p.port })
            .collect();
        let mut endpoints = Vec::new();
        if !matches!(kind, Kind::ExternalName(_)) {
            let all = spec.publish_not_ready_addresses.unwrap_or(false);
            let name = service.metadata.name.as_deref().unwrap_or_default();
            for slice in slices {
                if slice_service(slice) != Some(name) {
                    continue;
                }
                collect_endpoints(slice, all, &mut endpoints);
            }
        }
        endpoints.sort_by(|a, b| (a.ip, &a.label).cmp(&(b.ip, &b.label)));
        // The same endpoint in two slices (while one replaces another) is one endpoint.
        endpoints.dedup_by(|a, b| a.ip == b.ip && a.label == b.label);
        Entry { kind, ports, endpoints }
    }
}

/// The Service an EndpointSlice belongs to (its kubernetes.io/service-name label).
pub fn slice_service(slice: &EndpointSlice) -> Option<&str> {
    slice.metadata.labels.as_ref()?.get("kubernetes.io/service-name").map(String::as_str)
}

fn collect_endpoints(slice: &EndpointSlice, include_not_ready: bool, into: &mut Vec<Endpoint>) {
    // FQDN slices carry names, not addresses: nothing for DNS to serve.
    if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
        return;
    }
    let mut ports: Vec<Port> = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(Port { name: lower(p.name.as_deref()), protocol: protocol(p.protocol.as_deref()), port: p.port? })
        })
        .collect();
    if ports.is_empty() {
        ports.push(Port { name: String::new(), protocol: String::new(), port: -1 });
    }
    let ports: Arc<[Port]> = ports.into();
    for endpoint in slice.endpoints.iter().flatten() {
        // Unset means ready, as the EndpointSlice API documents.
        let ready = endpoint.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
        if !ready && !include_not_ready {
            continue;
        }
        let hostname = endpoint.hostname.as_deref().filter(|h| !h.is_empty()).map(str::to_ascii_lowercase);
        for address in &endpoint.addresses {
            let Ok(ip) = address.parse::<IpAddr>() else { continue };
            let label = hostname.clone().unwrap_or_else(|| dashed(ip));
            into.push(Endpoint { label, ip, ports: ports.clone() });
        }
    }
}

fn external_target(external: &str) -> Option<Name> {
    let trimmed = external.trim().trim_end_matches('.');
    if trimmed.is_empty() || trimmed.parse::<IpAddr>().is_ok() {
        return None;
    }
    let mut name = Name::from_ascii(trimmed).ok()?;
    name.set_fqdn(true);
    Some(name)
}

fn lower(value: Option<&str>) -> String {
    value.unwrap_or_default().to_ascii_lowercase()
}

fn protocol(value: Option<&str>) -> String {
    // The API defaults protocol to TCP.
    value.map_or_else(|| "tcp".to_string(), str::to_ascii_lowercase)
}

/// Every Service's records, and the maps from addresses back to Services.
#[derive(Debug)]
pub struct Index {
    zone: Zone,
    ttl: u32,
    entries: HashMap<ServiceKey, Entry>,
    cluster_ips: HashMap<IpAddr, BTreeSet<ServiceKey>>,
    endpoint_ips: HashMap<IpAddr, BTreeSet<(ServiceKey, String)>>,
    serial: u32,
}

impl Index {
    /// An empty index for `zone` whose records carry `ttl` seconds.
    pub fn new(zone: &str, ttl: u32) -> Result<Index, DnsError> {
        Ok(Index {
            zone: Zone::new(zone)?,
            ttl,
            entries: HashMap::new(),
            cluster_ips: HashMap::new(),
            endpoint_ips: HashMap::new(),
            serial: now_serial(),
        })
    }

    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    pub fn ttl(&self) -> u32 {
        self.ttl
    }

    /// The SOA serial: when the index last changed, in Unix seconds, as CoreDNS's.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    pub fn entry(&self, key: &ServiceKey) -> Option<&Entry> {
        self.entries.get(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Rebuilds the Service `namespace/name` from its object (None: it is gone) and its
    /// EndpointSlices.
    pub fn update<'a>(
        &mut self,
        namespace: &str,
        name: &str,
        service: Option<&Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ) {
        let entry = service.map(|service| Entry::build(service, slices));
        self.set(ServiceKey::new(namespace, name), entry);
    }

    /// Replaces (or with None removes) one Service's entry and its reverse mappings.
    pub fn set(&mut self, key: ServiceKey, entry: Option<Entry>) {
        if self.entries.get(&key) == entry.as_ref() {
            return;
        }
        if let Some(old) = self.entries.remove(&key) {
            self.unmap(&key, &old);
        }
        if let Some(entry) = entry {
            self.map(&key, &entry);
            self.entries.insert(key, entry);
        }
        // Serials only grow, even if two changes land within one second.
        self.serial = now_serial().max(self.serial.wrapping_add(1));
    }

    /// The Services whose cluster IP is `ip`.
    pub fn services_with_cluster_ip(&self, ip: IpAddr) -> impl Iterator<Item = &ServiceKey> {
        self.cluster_ips.get(&ip).into_iter().flatten()
    }

    /// The (Service, endpoint label) pairs with an endpoint at `ip`.
    pub fn endpoints_with_ip(&self, ip: IpAddr) -> impl Iterator<Item = &(ServiceKey, String)> {
        self.endpoint_ips.get(&ip).into_iter().flatten()
    }

    fn map(&mut self, key: &ServiceKey, entry: &Entry) {
        if let Kind::ClusterIp(ips) = &entry.kind {
            for ip in ips {
                self.cluster_ips.entry(*ip).or_default().insert(key.clone());
            }
        }
        for endpoint in &entry.endpoints {
            self.endpoint_ips.entry(endpoint.ip).or_default().insert((key.clone(), endpoint.label.clone()));
        }
    }

    fn unmap(&mut self, key: &ServiceKey, entry: &Entry) {
        if let Kind::ClusterIp(ips) = &entry.kind {
            for ip in ips {
                if let Some(keys) = self.cluster_ips.get_mut(ip) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.cluster_ips.remove(ip);
                    }
                }
            }
        }
        for endpoint in &entry.endpoints {
            if let Some(pairs) = self.endpoint_ips.get_mut(&endpoint.ip) {
                pairs.remove(&(key.clone(), endpoint.label.clone()));
                if pairs.is_empty() {
                    self.endpoint_ips.remove(&endpoint.ip);
                }
            }
        }
    }
}

fn now_serial() -> u32 {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    // Truncation is what a 32-bit serial does (RFC 1982 arithmetic); fine until 2106.
    secs as u32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).expect("valid Service")
    }

    pub fn slice(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).expect("valid EndpointSlice")
    }

    #[test]
    fn headless_entry_takes_ready_endpoints_and_sentinel_ports() {
        let svc = service(serde_json::json!({
            "metadata": {"name": "db", "namespace": "ns"},
            "spec": {"clusterIP": "None"}
        }));
        let eps = slice(serde_json::json!({
            "metadata": {"name": "db-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.2"], "hostname": "DB-0"},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}}
            ]
        }));
        let other = slice(serde_json::json!({
            "metadata": {"name": "x-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "x"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.9.9.9"]}]
        }));
        let entry = Entry::build(&svc, [&eps, &other]);
        assert_eq!(entry.kind, Kind::Headless);
        let got: Vec<(String, String)> = entry.endpoints.iter().map(|e| (e.label.clone(), e.ip.to_string())).collect();
        assert_eq!(got, vec![("10-0-0-1".into(), "10.0.0.1".into()), ("db-0".into(), "10.0.0.2".into())]);
        assert_eq!(entry.endpoints[0].ports[0].port, -1);
    }

    #[test]
    fn reverse_maps_follow_updates() {
        let mut index = Index::new("cluster.local", DEFAULT_TTL).unwrap();
        let svc = service(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [{"port": 80}]}
        }));
        index.update("ns", "web", Some(&svc), []);
        let ip: IpAddr = "10.96.0.10".parse().unwrap();
        assert_eq!(index.services_with_cluster_ip(ip).count(), 1);
        let serial = index.serial();
        index.update("ns", "web", None, []);
        assert_eq!(index.services_with_cluster_ip(ip).count(), 0);
        assert!(index.is_empty());
        assert!(index.serial() > serial);
    }
}
