//! What the Endpoints and EndpointSlice controllers agree on about a Service's pods:
//! which pods a selector picks, which of them are endpoints at all, their readiness,
//! hostname and resolved ports (upstream's pkg/controller/util/endpoint and podutil).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

/// The Service's selector, if it has one (selector-less Services are left alone).
pub fn selector(service: &Service) -> Option<&BTreeMap<String, String>> {
    let spec = service.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.as_ref().filter(|s| !s.is_empty())
}

pub fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// The pods of the Service's namespace its selector picks, sorted by name.
pub fn pods_of(service: &Service, pods: &Store<Pod>) -> Vec<std::sync::Arc<Pod>> {
    let Some(selector) = selector(service) else { return Vec::new() };
    let namespace = service.namespace();
    let mut out: Vec<_> =
        pods.state().into_iter().filter(|p| p.namespace() == namespace && selects(selector, p)).collect();
    out.sort_by_key(|p| p.name_any());
    out
}

/// The Services of `pod`'s namespace whose selectors pick it.
pub fn services_selecting(pod: &Pod, services: &Store<Service>) -> Vec<std::sync::Arc<Service>> {
    let namespace = pod.namespace();
    services
        .state()
        .into_iter()
        .filter(|s| s.namespace() == namespace && selector(s).is_some_and(|sel| selects(sel, pod)))
        .collect()
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// Whether the pod is an endpoint at all: it has an IP, has not finished, and (unless
/// terminating pods are included) is not being deleted — upstream's ShouldPodBeInEndpoints.
pub fn should_be_endpoint(pod: &Pod, include_terminating: bool) -> bool {
    if matches!(phase(pod), Some("Succeeded" | "Failed")) {
        return false;
    }
    if pod_ips(pod).is_empty() {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// The pod's IPs (status.podIPs, else status.podIP).
pub fn pod_ips(pod: &Pod) -> Vec<String> {
    let Some(status) = pod.status.as_ref() else { return Vec::new() };
    let ips: Vec<String> =
        status.pod_ips.iter().flatten().map(|ip| ip.ip.clone()).filter(|ip| !ip.is_empty()).collect();
    if !ips.is_empty() {
        return ips;
    }
    status.pod_ip.iter().filter(|ip| !ip.is_empty()).cloned().collect()
}

/// The pod's IP of one family ("IPv4" or "IPv6").
pub fn pod_ip_of_family(pod: &Pod, family: &str) -> Option<String> {
    pod_ips(pod).into_iter().find(|ip| (family == "IPv6") == ip.contains(':'))
}

/// The Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// When the pod's readiness last changed, which upstream takes as the pod's trigger time.
pub fn ready_transition(pod: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready")?.last_transition_time.as_ref().map(|t| t.0)
}

/// The endpoint's hostname: the pod's spec.hostname when its subdomain is this Service.
pub fn hostname(pod: &Pod, service: &Service) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_ref().filter(|h| !h.is_empty())?;
    (spec.subdomain.as_deref() == Some(service.name_any().as_str())).then(|| hostname.clone())
}

/// The port number `port`'s targetPort means for this pod: a number as is, a name looked
/// up among the pod's container ports of the same protocol (None when it has none).
pub fn resolve_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let spec = pod.spec.as_ref()?;
            spec.containers.iter().flat_map(|c| c.ports.iter().flatten()).find_map(|p| {
                (p.name.as_deref() == Some(name.as_str()) && p.protocol.as_deref().unwrap_or("TCP") == protocol)
                    .then_some(p.container_port)
            })
        }
    }
}

/// Whether the Service is headless (clusterIP None).
pub fn is_headless(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

pub fn publish_not_ready(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.publish_not_ready_addresses).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn named_target_ports_resolve_per_pod_and_protocol() {
        let p = pod(json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "ports": [
            {"name": "http", "containerPort": 8080},
            {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]}}));
        let port = |target: IntOrString, protocol: &str| ServicePort {
            port: 80,
            target_port: Some(target),
            protocol: Some(protocol.into()),
            ..Default::default()
        };
        assert_eq!(resolve_port(&p, &port(IntOrString::String("http".into()), "TCP")), Some(8080));
        assert_eq!(resolve_port(&p, &port(IntOrString::String("dns".into()), "TCP")), None);
        assert_eq!(resolve_port(&p, &port(IntOrString::String("dns".into()), "UDP")), Some(53));
        assert_eq!(resolve_port(&p, &port(IntOrString::Int(9000), "TCP")), Some(9000));
    }

    #[test]
    fn finished_or_ipless_pods_are_not_endpoints() {
        let running = pod(json!({"metadata": {"name": "a"}, "status": {"phase": "Running", "podIP": "10.0.0.1"}}));
        let done = pod(json!({"metadata": {"name": "a"}, "status": {"phase": "Succeeded", "podIP": "10.0.0.1"}}));
        let pending = pod(json!({"metadata": {"name": "a"}, "status": {"phase": "Pending"}}));
        let deleting = pod(json!({"metadata": {"name": "a", "deletionTimestamp": "2025-01-01T00:00:00Z"},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}}));
        assert!(should_be_endpoint(&running, false));
        assert!(!should_be_endpoint(&done, true));
        assert!(!should_be_endpoint(&pending, true));
        assert!(!should_be_endpoint(&deleting, false));
        assert!(should_be_endpoint(&deleting, true));
    }
}
