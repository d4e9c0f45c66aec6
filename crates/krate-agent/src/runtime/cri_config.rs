//! The CRI configs the kubelet derives from a pod: the sandbox (hostname, DNS, ports,
//! cgroup parent, namespaces) and each container (image, command, env, resources).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::env;

pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// What the sandbox config needs from the node.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub host_ip: String,
    pub cgroup_root: String,
    pub log_dir: PathBuf,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The host's resolv.conf, for dnsPolicy Default (and ClusterFirst without DNS).
    pub host_dns: cri::DnsConfig,
}

/// Parses resolv.conf text into nameservers, search domains and options.
pub fn parse_resolv_conf(text: &str) -> cri::DnsConfig {
    let mut dns = cri::DnsConfig::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(String::from)),
            // As the kubelet: "." (the root, meaning no search) is dropped, and trailing
            // dots go, so "search ." gives pods only the cluster's own search path.
            Some("search") | Some("domain") => {
                dns.searches = words.filter(|w| *w != ".").map(|w| w.trim_end_matches('.').to_string()).collect()
            }
            Some("options") => dns.options.extend(words.map(String::from)),
            _ => {}
        }
    }
    dns
}

/// The pod's DNS config from dnsPolicy and dnsConfig, as the kubelet builds it.
pub fn dns_config(pod: &Pod, node: &NodeSettings) -> cri::DnsConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let host_network = spec.host_network == Some(true);
    if policy == "ClusterFirst" && host_network {
        policy = "Default";
    } else if policy == "ClusterFirstWithHostNet" {
        policy = "ClusterFirst";
    }
    if policy == "ClusterFirst" && node.cluster_dns.is_empty() {
        // Upstream falls back to the host's resolver when no cluster DNS is configured.
        policy = "Default";
    }
    let mut dns = match policy {
        "None" => cri::DnsConfig::default(),
        "ClusterFirst" => {
            let domain = &node.cluster_domain;
            let mut searches = vec![format!("{namespace}.svc.{domain}"), format!("svc.{domain}"), domain.clone()];
            searches.extend(node.host_dns.searches.iter().cloned());
            cri::DnsConfig { servers: node.cluster_dns.clone(), searches, options: vec!["ndots:5".into()] }
        }
        _ => node.host_dns.clone(),
    };
    if let Some(extra) = spec.dns_config {
        dns.servers.extend(extra.nameservers.into_iter().flatten());
        dns.searches.extend(extra.searches.into_iter().flatten());
        for option in extra.options.into_iter().flatten() {
            let text = match &option.value {
                Some(v) => format!("{}:{v}", option.name.clone().unwrap_or_default()),
                None => option.name.clone().unwrap_or_default(),
            };
            let name = option.name.unwrap_or_default();
            dns.options.retain(|o| o.split(':').next() != Some(name.as_str()));
            dns.options.push(text);
        }
    }
    dns
}

/// The pod's cgroup under the node's root, by QoS class (cgroupfs driver).
pub fn pod_cgroup(pod: &Pod, root: &str) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let qos = pod.status.as_ref().and_then(|s| s.qos_class.as_deref()).unwrap_or("BestEffort");
    match qos {
        "Guaranteed" => format!("{root}/pod{uid}"),
        "Burstable" => format!("{root}/burstable/pod{uid}"),
        _ => format!("{root}/besteffort/pod{uid}"),
    }
}

/// upstream's pod log directory name: NAMESPACE_NAME_UID.
pub fn pod_log_dir(pod: &Pod, base: &Path) -> PathBuf {
    let m = &pod.metadata;
    base.join(format!(
        "{}_{}_{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    ))
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let m = &pod.metadata;
    HashMap::from([
        (LABEL_POD_UID.to_string(), m.uid.clone().unwrap_or_default()),
        (LABEL_POD_NAME.to_string(), m.name.clone().unwrap_or_default()),
        (LABEL_POD_NAMESPACE.to_string(), m.namespace.clone().unwrap_or_default()),
    ])
}

/// NamespaceMode values (runtime.v1): POD, CONTAINER, NODE.
const NS_POD: i32 = 0;
const NS_CONTAINER: i32 = 1;
const NS_NODE: i32 = 2;

fn namespaces(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.clone().unwrap_or_default();
    let node_if = |on: Option<bool>, otherwise: i32| if on == Some(true) { NS_NODE } else { otherwise };
    let shared_pid = spec.share_process_namespace == Some(true);
    cri::NamespaceOption {
        network: node_if(spec.host_network, NS_POD),
        pid: node_if(spec.host_pid, if shared_pid { NS_POD } else { NS_CONTAINER }),
        ipc: node_if(spec.host_ipc, NS_POD),
        ..Default::default()
    }
}

pub fn sandbox_config(pod: &Pod, attempt: u32, node: &NodeSettings) -> cri::PodSandboxConfig {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let mut hostname = spec.hostname.clone().unwrap_or_else(|| m.name.clone().unwrap_or_default());
    hostname.truncate(63);
    let hostname = hostname.trim_end_matches(['-', '.']).to_string();
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| cri::PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => cri::Protocol::Udp as i32,
                Some("SCTP") => cri::Protocol::Sctp as i32,
                _ => cri::Protocol::Tcp as i32,
            },
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or_default(),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let mut labels: HashMap<String, String> = m.labels.clone().unwrap_or_default().into_iter().collect();
    labels.extend(pod_labels(pod));
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname: if spec.host_network == Some(true) { String::new() } else { hostname },
        log_directory: pod_log_dir(pod, &node.log_dir).to_string_lossy().into_owned(),
        dns_config: Some(dns_config(pod, node)),
        port_mappings,
        labels,
        annotations: m.annotations.clone().unwrap_or_default().into_iter().collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: pod_cgroup(pod, &node.cgroup_root),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(pod)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// cgroupfs resources from requests and limits, as the kubelet computes them.
pub fn resources(container: &Container) -> cri::LinuxContainerResources {
    let res = container.resources.clone().unwrap_or_default();
    let get =
        |list: &Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         name: &str| {
            list.as_ref().and_then(|l| l.get(name)).and_then(|q| krate_api::kinds::quantity::Quantity::parse(&q.0).ok())
        };
    let milli_cpu_request = get(&res.requests, "cpu").or(get(&res.limits, "cpu")).map(|q| q.milli_value());
    let milli_cpu_limit = get(&res.limits, "cpu").map(|q| q.milli_value());
    let memory_limit = get(&res.limits, "memory").map(|q| q.value());
    const PERIOD: i64 = 100_000;
    cri::LinuxContainerResources {
        cpu_period: if milli_cpu_limit.is_some() { PERIOD } else { 0 },
        // upstream's milliCPUToQuota (at least 1 ms) and milliCPUToShares (at least 2).
        cpu_quota: milli_cpu_limit.map_or(0, |m| (m.saturating_mul(PERIOD) / 1000).max(1000)),
        cpu_shares: milli_cpu_request.map_or(2, |m| (m.saturating_mul(1024) / 1000).max(2)),
        memory_limit_in_bytes: memory_limit.unwrap_or(0),
        ..Default::default()
    }
}

/// The container config for attempt `attempt` of `container`, with its environment
/// (see `env::container_env`) and mounts (see `volumes`).
pub fn container_config(
    pod: &Pod,
    container: &Container,
    attempt: u32,
    image_ref: &str,
    env: Vec<(String, String)>,
    mounts: Vec<cri::Mount>,
) -> cri::ContainerConfig {
    let (command, args) = env::command_and_args(container, &env);
    let mut labels = pod_labels(pod);
    labels.insert(LABEL_CONTAINER_NAME.into(), container.name.clone());
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: container.name.clone(), attempt }),
        image: Some(cri::ImageSpec {
            image: image_ref.to_string(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: env.into_iter().map(|(key, value)| cri::KeyValue { key, value }).collect(),
        mounts,
        labels,
        annotations: HashMap::from([("io.kubernetes.container.restartCount".to_string(), attempt.to_string())]),
        log_path: format!("{}/{attempt}.log", container.name),
        stdin: container.stdin == Some(true),
        stdin_once: container.stdin_once == Some(true),
        tty: container.tty == Some(true),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(resources(container)),
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(namespaces(pod)),
                privileged: container.security_context.as_ref().and_then(|s| s.privileged) == Some(true),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cluster_dns: &[&str]) -> NodeSettings {
        NodeSettings {
            host_ip: "10.0.0.1".into(),
            cgroup_root: "/kubepods".into(),
            log_dir: "/logs".into(),
            cluster_dns: cluster_dns.iter().map(|s| s.to_string()).collect(),
            cluster_domain: "cluster.local".into(),
            host_dns: parse_resolv_conf("nameserver 1.1.1.1\nsearch example.com\noptions edns0\n"),
        }
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn dns_follows_policy_and_merges_dns_config() {
        let p = pod(
            serde_json::json!({"containers": [], "dnsConfig": {"nameservers": ["9.9.9.9"], "options": [{"name": "ndots", "value": "2"}]}}),
        );
        let dns = dns_config(&p, &node(&["10.43.0.10"]));
        assert_eq!(dns.servers, vec!["10.43.0.10", "9.9.9.9"]);
        assert_eq!(dns.searches[0], "ns.svc.cluster.local");
        assert_eq!(dns.options, vec!["ndots:2"]);
        // No cluster DNS: the host's resolver.
        let dns = dns_config(&p, &node(&[]));
        assert_eq!(dns.servers, vec!["1.1.1.1", "9.9.9.9"]);
        assert_eq!(dns.options, vec!["edns0", "ndots:2"]);
        let none =
            pod(serde_json::json!({"containers": [], "dnsPolicy": "None", "dnsConfig": {"nameservers": ["8.8.8.8"]}}));
        assert_eq!(dns_config(&none, &node(&["10.43.0.10"])).servers, vec!["8.8.8.8"]);
    }

    #[test]
    fn sandbox_has_hostname_ports_cgroup_and_labels() {
        let p = pod(serde_json::json!({"hostname": "h1", "containers": [{"name": "c", "ports": [
            {"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "protocol": "UDP"}]}]}));
        let config = sandbox_config(&p, 1, &node(&[]));
        assert_eq!(config.hostname, "h1");
        assert_eq!(config.port_mappings.len(), 1);
        assert_eq!(config.port_mappings[0].host_port, 8080);
        assert_eq!(config.linux.unwrap().cgroup_parent, "/kubepods/besteffort/podu1");
        assert_eq!(config.labels[LABEL_POD_UID], "u1");
        assert_eq!(config.log_directory, "/logs/ns_web_u1");
    }

    #[test]
    fn resources_follow_requests_and_limits() {
        let p = pod(serde_json::json!({"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}}]}));
        let r = resources(&p.spec.unwrap().containers[0]);
        assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period), (256, 50_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 64 * 1024 * 1024);
    }

    #[test]
    fn a_root_search_domain_is_dropped_as_the_kubelet_does() {
        let dns = parse_resolv_conf("nameserver 192.0.2.53\nsearch . example.com.\noptions ndots:2\n");
        assert_eq!(dns.servers, ["192.0.2.53"]);
        assert_eq!(dns.searches, ["example.com"]);
        assert!(parse_resolv_conf("search .\n").searches.is_empty());
    }
}
