//! The service environment variables the kubelet gives every container (Docker-link
//! style): for each service with a cluster IP in the pod's namespace (when
//! enableServiceLinks is on, the default) and always for `kubernetes` in `default`,
//! NAME_SERVICE_HOST, NAME_SERVICE_PORT(_PORTNAME), NAME_PORT and
//! NAME_PORT_<port>_<PROTO>(_PROTO|_PORT|_ADDR), as upstream's envvars.FromServices.
//! Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;

/// The services whose variables upstream always adds, from the default namespace.
const MASTER_SERVICES: &[&str] = &["kubernetes"];

/// Upstream's makeEnvVariableName: upper case, '-' as '_'.
pub fn env_name(name: &str) -> String {
    name.to_uppercase().replace('-', "_")
}

fn cluster_ip(service: &Service) -> Option<&str> {
    let ip = service.spec.as_ref()?.cluster_ip.as_deref()?;
    (!ip.is_empty() && ip != "None").then_some(ip)
}

/// `ip:port`, bracketing IPv6 addresses as Go's net.JoinHostPort.
fn join_host_port(ip: &str, port: i32) -> String {
    if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") }
}

/// One service's variables, in upstream's order.
pub fn service_vars(service: &Service) -> Vec<(String, String)> {
    let Some(ip) = cluster_ip(service) else { return Vec::new() };
    let ports = service.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    let Some(first) = ports.first() else { return Vec::new() };
    let prefix = env_name(service.metadata.name.as_deref().unwrap_or_default());
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_string()),
        (format!("{prefix}_SERVICE_PORT"), first.port.to_string()),
    ];
    for p in &ports {
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            out.push((format!("{prefix}_SERVICE_PORT_{}", env_name(name)), p.port.to_string()));
        }
    }
    for (i, p) in ports.iter().enumerate() {
        let protocol = p.protocol.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "TCP".into());
        let lower = protocol.to_lowercase();
        let url = format!("{lower}://{}", join_host_port(ip, p.port));
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!("{prefix}_PORT_{}_{}", p.port, protocol.to_uppercase());
        out.push((port_prefix.clone(), url));
        out.push((format!("{port_prefix}_PROTO"), lower));
        out.push((format!("{port_prefix}_PORT"), p.port.to_string()));
        out.push((format!("{port_prefix}_ADDR"), ip.to_string()));
    }
    out
}

/// The variables for a pod in `namespace`, from all the services the node knows.
pub fn pod_service_env<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for s in services {
        if cluster_ip(s).is_none() {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        let ns = s.metadata.namespace.as_deref().unwrap_or_default();
        if ns == "default" && MASTER_SERVICES.contains(&name.as_str()) {
            chosen.entry(name).or_insert(s);
        } else if ns == namespace && enable_service_links {
            chosen.insert(name, s);
        }
    }
    chosen.values().flat_map(|s| service_vars(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": ports},
        }))
        .unwrap()
    }

    #[test]
    fn variables_follow_upstream_names() {
        let s = service(
            "ns",
            "my-db",
            "10.43.0.7",
            serde_json::json!([{"name": "sql", "port": 5432}, {"name": "metrics", "port": 9187, "protocol": "UDP"}]),
        );
        let vars: BTreeMap<String, String> = service_vars(&s).into_iter().collect();
        let expect = [
            ("MY_DB_SERVICE_HOST", "10.43.0.7"),
            ("MY_DB_SERVICE_PORT", "5432"),
            ("MY_DB_SERVICE_PORT_SQL", "5432"),
            ("MY_DB_SERVICE_PORT_METRICS", "9187"),
            ("MY_DB_PORT", "tcp://10.43.0.7:5432"),
            ("MY_DB_PORT_5432_TCP", "tcp://10.43.0.7:5432"),
            ("MY_DB_PORT_5432_TCP_PROTO", "tcp"),
            ("MY_DB_PORT_5432_TCP_PORT", "5432"),
            ("MY_DB_PORT_5432_TCP_ADDR", "10.43.0.7"),
            ("MY_DB_PORT_9187_UDP", "udp://10.43.0.7:9187"),
            ("MY_DB_PORT_9187_UDP_PROTO", "udp"),
            ("MY_DB_PORT_9187_UDP_PORT", "9187"),
            ("MY_DB_PORT_9187_UDP_ADDR", "10.43.0.7"),
        ];
        assert_eq!(vars.len(), expect.len(), "{vars:?}");
        for (k, v) in expect {
            assert_eq!(vars.get(k).map(String::as_str), Some(v), "{k}");
        }
        let v6 = service("ns", "v6", "fd00::1", serde_json::json!([{"port": 80}]));
        assert!(service_vars(&v6).contains(&("V6_PORT".into(), "tcp://[fd00::1]:80".into())));
    }

    #[test]
    fn namespace_links_and_the_kubernetes_service() {
        let services = [
            service("default", "kubernetes", "10.43.0.1", serde_json::json!([{"name": "https", "port": 443}])),
            service("ns", "web", "10.43.0.9", serde_json::json!([{"port": 80}])),
            service("ns", "headless", "None", serde_json::json!([{"port": 80}])),
            service("other", "web2", "10.43.0.10", serde_json::json!([{"port": 80}])),
        ];
        let env = pod_service_env(&services, "ns", true);
        assert_eq!(env.get("KUBERNETES_SERVICE_HOST").map(String::as_str), Some("10.43.0.1"));
        assert_eq!(env.get("KUBERNETES_SERVICE_PORT_HTTPS").map(String::as_str), Some("443"));
        assert_eq!(env.get("WEB_SERVICE_HOST").map(String::as_str), Some("10.43.0.9"));
        assert!(!env.keys().any(|k| k.starts_with("HEADLESS_") || k.starts_with("WEB2_")));
        let off = pod_service_env(&services, "ns", false);
        assert!(off.contains_key("KUBERNETES_SERVICE_HOST"), "the kubernetes service is always there");
        assert!(!off.contains_key("WEB_SERVICE_HOST"));
    }
}
