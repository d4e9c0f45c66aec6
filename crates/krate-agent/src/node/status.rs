//! The Node object the agent registers and the status it reports: capacity and
//! allocatable, addresses, the four conditions with the kubelet's reasons and messages,
//! nodeInfo and the kubelet endpoint. Pure: built from what `host` read and what the
//! runtime says, so it is unit-tested without a cluster.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::host::{Identity, Resources, go_arch};

/// What the container runtime tells the node status (the seam the runtime fills in;
/// without a runtime the node reports Ready with an empty containerRuntimeVersion).
pub trait RuntimeStatus: Send + Sync {
    /// nodeInfo.containerRuntimeVersion, e.g. "containerd://1.6.20".
    fn version(&self) -> String;
    /// Ok when the runtime and its network are ready; otherwise the reason, which
    /// becomes the Ready condition's message (e.g. "container runtime is down").
    fn ready(&self) -> Result<(), String>;
}

/// Who the node is, fixed for the agent's life.
#[derive(Clone, Debug)]
pub struct NodeIdentity {
    pub name: String,
    pub hostname: String,
    pub ip: IpAddr,
    pub kubelet_port: u16,
    /// nodeInfo.kubeletVersion (krate's Kubernetes version, v1.36.x).
    pub kubelet_version: String,
}

/// The Node object to create on registration (labels the kubelet sets on itself).
pub fn node_object(id: &NodeIdentity) -> Value {
    let arch = go_arch();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": id.name,
            "labels": {
                "kubernetes.io/hostname": id.hostname,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": arch,
            },
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {},
    })
}

/// One condition's state, without times.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// The kubelet's four conditions, as its setters word them.
pub fn conditions(r: &Resources, runtime: Result<(), String>, shutting_down: bool) -> Vec<Condition> {
    let c = |type_, status, reason, message: &str| Condition { type_, status, reason, message: message.into() };
    let memory = if r.memory_pressure() {
        c("MemoryPressure", "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    } else {
        c("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
    };
    let disk = if r.disk_pressure() {
        c("DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure")
    } else {
        c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    };
    let pid = if r.pid_pressure() {
        c("PIDPressure", "True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
    } else {
        c("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available")
    };
    let ready = match (shutting_down, runtime) {
        (true, _) => c("Ready", "False", "KubeletNotReady", "node is shutting down"),
        (false, Err(why)) => c("Ready", "False", "KubeletNotReady", &why),
        (false, Ok(())) => c("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    };
    vec![memory, disk, pid, ready]
}

/// status, as a merge patch body's `status`. Conditions whose status did not change
/// keep their lastTransitionTime from `previous` (the Node's current conditions).
pub fn status(
    id: &NodeIdentity,
    host: &Identity,
    r: &Resources,
    conditions: &[Condition],
    runtime_version: &str,
    previous: &[Value],
    now: &str,
) -> Value {
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|c| {
            let transition = previous
                .iter()
                .find(|p| p["type"] == c.type_ && p["status"] == c.status)
                .and_then(|p| p["lastTransitionTime"].as_str())
                .unwrap_or(now);
            json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
                "lastHeartbeatTime": now, "lastTransitionTime": transition})
        })
        .collect();
    json!({
        "capacity": r.capacity(),
        "allocatable": r.allocatable(),
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": id.ip.to_string()},
            {"type": "Hostname", "address": id.hostname},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": id.kubelet_port}},
        "nodeInfo": {
            "machineID": host.machine_id,
            "systemUUID": host.system_uuid,
            "bootID": host.boot_id,
            "kernelVersion": host.kernel_version,
            "osImage": host.os_image,
            "containerRuntimeVersion": runtime_version,
            "kubeletVersion": id.kubelet_version,
            "operatingSystem": "linux",
            "architecture": go_arch(),
        },
    })
}

/// The status without times: what decides whether it changed since the last report.
pub fn without_times(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(cs) = s["conditions"].as_array_mut() {
        for c in cs {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastHeartbeatTime");
                o.remove("lastTransitionTime");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::host::{Filesystem, Memory};

    fn id() -> NodeIdentity {
        NodeIdentity {
            name: "n1".into(),
            hostname: "host1".into(),
            ip: "10.0.0.5".parse().unwrap(),
            kubelet_port: 10250,
            kubelet_version: "v1.36.0".into(),
        }
    }

    fn resources() -> Resources {
        Resources {
            cpus: 4,
            memory: Memory { total: 8 << 30, available: 4 << 30, hugepages: None },
            storage: Filesystem { total: 100 << 30, available: 50 << 30 },
            pids: (10, 32768),
        }
    }

    #[test]
    fn a_healthy_node_is_ready_with_the_kubelets_reasons() {
        let cs = conditions(&resources(), Ok(()), false);
        let summary: Vec<_> = cs.iter().map(|c| (c.type_, c.status, c.reason)).collect();
        assert_eq!(
            summary,
            [
                ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID"),
                ("Ready", "True", "KubeletReady"),
            ]
        );
        let down = conditions(&resources(), Err("container runtime is down".into()), false);
        assert_eq!((down[3].status, down[3].message.as_str()), ("False", "container runtime is down"));
        assert_eq!(conditions(&resources(), Ok(()), true)[3].message, "node is shutting down");
    }

    #[test]
    fn status_carries_addresses_endpoint_info_and_keeps_transition_times() {
        let cs = conditions(&resources(), Ok(()), false);
        let previous = vec![json!({"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"})];
        let s = status(&id(), &Identity::default(), &resources(), &cs, "", &previous, "2026-02-02T00:00:00Z");
        assert_eq!(s["addresses"][0], json!({"type": "InternalIP", "address": "10.0.0.5"}));
        assert_eq!(s["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(s["nodeInfo"]["kubeletVersion"], "v1.36.0");
        assert_eq!(s["nodeInfo"]["operatingSystem"], "linux");
        assert_eq!(s["capacity"]["pods"], "110");
        let ready = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(ready["lastHeartbeatTime"], "2026-02-02T00:00:00Z");
        let memory = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "MemoryPressure").unwrap();
        assert_eq!(memory["lastTransitionTime"], "2026-02-02T00:00:00Z");
        let later = status(&id(), &Identity::default(), &resources(), &cs, "", &previous, "2026-03-03T00:00:00Z");
        assert_eq!(without_times(&s), without_times(&later));
        assert_ne!(s, later);
    }
}
