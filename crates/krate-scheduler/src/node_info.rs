//! What the scheduler knows of each node and of each pod on it, precomputed once per
//! change so that a scheduling cycle only compares numbers (upstream's NodeInfo/PodInfo).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};

use crate::resources::{Resources, pod_requests};

/// A host port a pod takes: (host IP, protocol, port). "0.0.0.0" stands for any address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    /// Two uses conflict on the same port and protocol when either takes every address
    /// or both take the same one.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// A pod with what scheduling needs of it computed once.
#[derive(Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub requests: Resources,
    /// cpu and memory with the non-zero defaults, for scoring.
    pub non_zero_cpu: i64,
    pub non_zero_memory: i64,
    pub host_ports: Vec<HostPort>,
    pub has_affinity: bool,
    pub has_required_anti_affinity: bool,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let requests = pod_requests(&pod, false);
        let non_zero = pod_requests(&pod, true);
        let spec = pod.spec.as_ref();
        let mut host_ports = Vec::new();
        let containers = spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
        for c in containers {
            for p in c.ports.iter().flatten() {
                if let Some(port) = p.host_port.filter(|p| *p > 0) {
                    let ip = p.host_ip.clone().filter(|ip| !ip.is_empty()).unwrap_or_else(|| "0.0.0.0".into());
                    host_ports.push(HostPort {
                        ip,
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        port,
                    });
                }
            }
        }
        let affinity = spec.and_then(|s| s.affinity.as_ref());
        let has_affinity = affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some());
        let has_required_anti_affinity = affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
            .is_some_and(|t| !t.is_empty());
        PodInfo {
            requests,
            non_zero_cpu: non_zero.milli_cpu,
            non_zero_memory: non_zero.memory,
            host_ports,
            has_affinity,
            has_required_anti_affinity,
            pod,
        }
    }

    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// A node and the pods on it (bound or assumed).
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub name: String,
    /// None while pods name a node the scheduler has not seen (yet).
    pub node: Option<Arc<Node>>,
    pub allocatable: Resources,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    /// Image name (every name the node reports) → size in bytes.
    pub images: HashMap<String, i64>,
    pub pods: Vec<Arc<PodInfo>>,
    pub requested: Resources,
    pub non_zero_cpu: i64,
    pub non_zero_memory: i64,
    pub used_ports: Vec<HostPort>,
    pub pods_with_affinity: usize,
    pub pods_with_required_anti_affinity: usize,
}

impl NodeInfo {
    pub fn empty(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.to_string(),
            node: None,
            allocatable: Resources::default(),
            taints: Vec::new(),
            unschedulable: false,
            images: HashMap::new(),
            pods: Vec::new(),
            requested: Resources::default(),
            non_zero_cpu: 0,
            non_zero_memory: 0,
            used_ports: Vec::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
        }
    }

    pub fn set_node(&mut self, node: Arc<Node>) {
        let status = node.status.as_ref();
        self.allocatable = Resources::from_list(status.and_then(|s| s.allocatable.as_ref()));
        let spec = node.spec.as_ref();
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        self.images.clear();
        for image in status.and_then(|s| s.images.as_ref()).into_iter().flatten() {
            for name in image.names.iter().flatten() {
                self.images.insert(normalized_image(name), image.size_bytes.unwrap_or(0));
            }
        }
        self.node = Some(node);
    }

    pub fn labels(&self) -> Option<&std::collections::BTreeMap<String, String>> {
        self.node.as_ref()?.metadata.labels.as_ref()
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels()?.get(key).map(String::as_str)
    }

    pub fn add_pod(&mut self, info: Arc<PodInfo>) {
        self.requested.add(&info.requests);
        self.non_zero_cpu += info.non_zero_cpu;
        self.non_zero_memory += info.non_zero_memory;
        self.used_ports.extend(info.host_ports.iter().cloned());
        self.pods_with_affinity += usize::from(info.has_affinity);
        self.pods_with_required_anti_affinity += usize::from(info.has_required_anti_affinity);
        self.pods.push(info);
    }

    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let at = self.pods.iter().position(|p| p.uid() == uid)?;
        let info = self.pods.swap_remove(at);
        self.requested.sub(&info.requests);
        self.non_zero_cpu -= info.non_zero_cpu;
        self.non_zero_memory -= info.non_zero_memory;
        for port in &info.host_ports {
            if let Some(i) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(i);
            }
        }
        self.pods_with_affinity -= usize::from(info.has_affinity);
        self.pods_with_required_anti_affinity -= usize::from(info.has_required_anti_affinity);
        Some(info)
    }
}

/// An image reference as nodes report it: a bare name gets the ":latest" tag.
pub fn normalized_image(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if name.contains('@') || last.contains(':') { name.to_string() } else { format!("{name}:latest") }
}
