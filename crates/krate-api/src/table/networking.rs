//! networking.k8s.io and discovery.k8s.io.

use serde_json::{Value, json};

use super::*;
use crate::object;

/// formatHosts: up to three rule hosts, "*" when no rule names one.
fn ingress_hosts(o: &Value) -> String {
    let rules: Vec<&Value> = items(o, "/spec/rules").collect();
    let mut list = Vec::new();
    let mut more = false;
    for rule in &rules {
        if list.len() == 3 {
            more = true;
        }
        let host = s(rule.get("host"));
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    match (list.is_empty(), more) {
        (true, _) => "*".into(),
        (false, true) => format!("{} + {} more...", list.join(","), rules.len() - 3),
        (false, false) => list.join(","),
    }
}

/// The load balancer's IPs (else hostnames), de-duplicated and sorted as upstream's string set;
/// the server prints wide, so nothing is clipped.
fn load_balancer(o: &Value) -> String {
    let mut set: Vec<String> = items(o, "/status/loadBalancer/ingress")
        .filter_map(|i| {
            let ip = s(i.get("ip"));
            let host = s(i.get("hostname"));
            if !ip.is_empty() {
                Some(ip)
            } else if !host.is_empty() {
                Some(host)
            } else {
                None
            }
        })
        .collect();
    set.sort();
    set.dedup();
    set.join(",")
}

pub(super) fn ingress_row(o: &Value, age: &str) -> Vec<Value> {
    let ports = if len(o.pointer("/spec/tls")) > 0 { "80, 443" } else { "80" };
    vec![
        json!(object::name(o)),
        json!(or(o.pointer("/spec/ingressClassName"), "<none>")),
        json!(ingress_hosts(o)),
        json!(load_balancer(o)),
        json!(ports),
        json!(age),
    ]
}

pub(super) fn ingress_class_row(o: &Value, age: &str) -> Vec<Value> {
    let parameters = match o.pointer("/spec/parameters").filter(|p| p.is_object()) {
        None => "<none>".to_string(),
        Some(p) => {
            let mut kind = s(p.get("kind"));
            if let Some(g) = p.get("apiGroup").and_then(Value::as_str) {
                kind = format!("{kind}.{g}");
            }
            format!("{kind}/{}", s(p.get("name")))
        }
    };
    vec![json!(object::name(o)), json!(s(o.pointer("/spec/controller"))), json!(parameters), json!(age)]
}

pub(super) fn network_policy_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(format_selector(o.pointer("/spec/podSelector"))), json!(age)]
}

pub(super) fn endpoint_slice_row(o: &Value, age: &str) -> Vec<Value> {
    // formatDiscoveryPorts: the number, else the name, else "*".
    let ports: Vec<String> = items(o, "/ports")
        .map(|p| match (p.get("port").and_then(Value::as_i64), p.get("name").and_then(Value::as_str)) {
            (Some(n), _) => n.to_string(),
            (None, Some(name)) => name.to_string(),
            _ => "*".to_string(),
        })
        .collect();
    let addresses: Vec<String> =
        items(o, "/endpoints").flat_map(|e| items(e, "/addresses")).map(|a| s(Some(a))).collect();
    vec![
        json!(object::name(o)),
        json!(s(o.get("addressType"))),
        json!(list_with_more(&ports, 3)),
        json!(list_with_more(&addresses, 3)),
        json!(age),
    ]
}

pub(super) fn service_cidr_row(o: &Value, age: &str) -> Vec<Value> {
    let cidrs: Vec<String> = items(o, "/spec/cidrs").map(|c| s(Some(c))).collect();
    vec![json!(object::name(o)), json!(cidrs.join(",")), json!(age)]
}

/// The parent as lower-cased "resource.group[/namespace]/name".
pub(super) fn ip_address_row(o: &Value, _age: &str) -> Vec<Value> {
    let parent = match o.pointer("/spec/parentRef").filter(|p| p.is_object()) {
        None => "<none>".to_string(),
        Some(p) => {
            let (group, resource) = (s(p.get("group")), s(p.get("resource")));
            let mut out = if group.is_empty() { resource } else { format!("{resource}.{group}") }.to_lowercase();
            let ns = s(p.get("namespace"));
            if !ns.is_empty() {
                out = format!("{out}/{ns}");
            }
            format!("{out}/{}", s(p.get("name")))
        }
    };
    // Upstream defines only these two columns for IPAddress (its row's extra age cell is
    // never shown), so the table stays consistent with its header here.
    vec![json!(object::name(o)), json!(parent)]
}

const INGRESS_COLUMNS: &[Column] = &[NAME, col("Class"), col("Hosts"), col("Address"), col("Ports"), AGE];
const INGRESS_CLASS_COLUMNS: &[Column] = &[NAME, col("Controller"), col("Parameters"), AGE];
const NETWORK_POLICY_COLUMNS: &[Column] = &[NAME, col("Pod-Selector"), AGE];
const ENDPOINT_SLICE_COLUMNS: &[Column] = &[NAME, col("AddressType"), col("Ports"), col("Endpoints"), AGE];
const SERVICE_CIDR_COLUMNS: &[Column] = &[NAME, col("CIDRs"), AGE];
const IP_ADDRESS_COLUMNS: &[Column] = &[NAME, col("ParentRef")];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    Some(match (group, kind) {
        ("networking.k8s.io", "Ingress") => (INGRESS_COLUMNS, ingress_row),
        ("networking.k8s.io", "IngressClass") => (INGRESS_CLASS_COLUMNS, ingress_class_row),
        ("networking.k8s.io", "NetworkPolicy") => (NETWORK_POLICY_COLUMNS, network_policy_row),
        ("networking.k8s.io", "ServiceCIDR") => (SERVICE_CIDR_COLUMNS, service_cidr_row),
        ("networking.k8s.io", "IPAddress") => (IP_ADDRESS_COLUMNS, ip_address_row),
        ("discovery.k8s.io", "EndpointSlice") => (ENDPOINT_SLICE_COLUMNS, endpoint_slice_row),
        _ => return None,
    })
}
