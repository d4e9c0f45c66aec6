//! The core (legacy, "") group: pods, services, nodes, events, volumes, quotas…

use serde_json::{Value, json};

use super::*;
use crate::object;

pub(super) fn namespace_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(s(o.pointer("/status/phase"))), json!(age)]
}

pub(super) fn configmap_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(count(o.get("data")) + count(o.get("binaryData"))), json!(age)]
}

pub(super) fn secret_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(s(o.get("type"))), json!(count(o.get("data"))), json!(age)]
}

/// EXTERNAL-IP by service type, as getServiceExternalIP (load balancer addresses unclipped:
/// the server prints wide).
fn service_external_ip(o: &Value) -> String {
    let external: Vec<String> = items(o, "/spec/externalIPs").map(|v| s(Some(v))).collect();
    match o.pointer("/spec/type").and_then(Value::as_str).unwrap_or("") {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".into()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let mut set: Vec<String> = items(o, "/status/loadBalancer/ingress")
                .filter_map(|i| {
                    let (ip, host) = (s(i.get("ip")), s(i.get("hostname")));
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
            set.extend(external);
            if set.is_empty() { "<pending>".into() } else { set.join(",") }
        }
        "ExternalName" => s(o.pointer("/spec/externalName")),
        _ => "<unknown>".into(),
    }
}

pub(super) fn service_row(o: &Value, age: &str) -> Vec<Value> {
    let ports: Vec<String> = items(o, "/spec/ports")
        .map(|p| {
            let proto = s(p.get("protocol"));
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) if np > 0 => format!("{}:{np}/{proto}", n(p, "/port")),
                _ => format!("{}/{proto}", n(p, "/port")),
            }
        })
        .collect();
    let cluster_ip = o
        .pointer("/spec/clusterIPs/0")
        .or_else(|| o.pointer("/spec/clusterIP"))
        .map(|v| s(Some(v)))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "<none>".into());
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/spec/type"))),
        json!(cluster_ip),
        json!(service_external_ip(o)),
        json!(if ports.is_empty() { "<none>".to_string() } else { ports.join(",") }),
        json!(age),
        json!(format_labels(o.pointer("/spec/selector"))),
    ]
}

fn condition_true(o: &Value, ty: &str) -> bool {
    items(o, "/status/conditions").any(|c| {
        c.get("type").and_then(Value::as_str) == Some(ty) && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

fn finished_at(c: &Value) -> Option<jiff::Timestamp> {
    c.pointer("/lastState/terminated/finishedAt").and_then(Value::as_str).and_then(|t| t.parse().ok())
}

/// Upstream's printPod summary: ready/total containers, STATUS, and RESTARTS (with the age of
/// the last restart when known).
struct PodSummary {
    ready: usize,
    total: usize,
    reason: String,
    restarts: String,
}

fn pod_summary(o: &Value) -> PodSummary {
    let phase = s(o.pointer("/status/phase"));
    let mut reason = or(o.pointer("/status/reason"), &phase);
    if items(o, "/status/conditions").any(|c| {
        c.get("type").and_then(Value::as_str) == Some("PodScheduled")
            && c.get("reason").and_then(Value::as_str) == Some("SchedulingGated")
    }) {
        reason = "SchedulingGated".into();
    }
    let init_specs: Vec<&Value> = items(o, "/spec/initContainers").collect();
    // Sidecars (restartable init containers) count as containers.
    let restartable = |name: &str| {
        init_specs.iter().any(|c| {
            c.get("name").and_then(Value::as_str) == Some(name)
                && c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
        })
    };
    let total = len(o.pointer("/spec/containers"))
        + init_specs.iter().filter(|c| c.get("restartPolicy").and_then(Value::as_str) == Some("Always")).count();
    let mut ready = 0;
    let (mut restarts, mut sidecar_restarts) = (0i64, 0i64);
    let (mut last_restart, mut last_sidecar_restart): (Option<jiff::Timestamp>, Option<jiff::Timestamp>) = (None, None);
    let mut initializing = false;
    for (i, c) in items(o, "/status/initContainerStatuses").enumerate() {
        let count = n(c, "/restartCount");
        restarts += count;
        let finished = finished_at(c);
        last_restart = last_restart.max(finished);
        let sidecar = restartable(&s(c.get("name")));
        if sidecar {
            sidecar_restarts += count;
            last_sidecar_restart = last_sidecar_restart.max(finished);
        }
        let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
        let waiting_reason = s(c.pointer("/state/waiting/reason"));
        match terminated {
            Some(t) if n(t, "/exitCode") == 0 => continue,
            _ if sidecar && c.get("started").and_then(Value::as_bool) == Some(true) => {
                if c.get("ready").and_then(Value::as_bool) == Some(true) {
                    ready += 1;
                }
                continue;
            }
            Some(t) => {
                let r = s(t.get("reason"));
                reason = match (r.is_empty(), n(t, "/signal")) {
                    (false, _) => format!("Init:{r}"),
                    (true, 0) => format!("Init:ExitCode:{}", n(t, "/exitCode")),
                    (true, sig) => format!("Init:Signal:{sig}"),
                };
            }
            None if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" => {
                reason = format!("Init:{waiting_reason}");
            }
            None => reason = format!("Init:{i}/{}", init_specs.len()),
        }
        initializing = true;
        break;
    }
    if !initializing || condition_true(o, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        let statuses: Vec<&Value> = items(o, "/status/containerStatuses").collect();
        for c in statuses.iter().rev() {
            restarts += n(c, "/restartCount");
            last_restart = last_restart.max(finished_at(c));
            let waiting = s(c.pointer("/state/waiting/reason"));
            let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
            if !waiting.is_empty() {
                reason = waiting;
            } else if let Some(t) = terminated {
                let r = s(t.get("reason"));
                reason = match (r.is_empty(), n(t, "/signal")) {
                    (false, _) => r,
                    (true, 0) => format!("ExitCode:{}", n(t, "/exitCode")),
                    (true, sig) => format!("Signal:{sig}"),
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some_and(Value::is_object)
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(o, "Ready") { "Running".into() } else { "NotReady".into() };
        }
    }
    if object::is_deleting(o) && s(o.pointer("/status/reason")) == "NodeLost" {
        reason = "Unknown".into();
    } else if object::is_deleting(o) && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", human_duration((jiff::Timestamp::now() - t).get_seconds()))
        }
        _ => restarts.to_string(),
    };
    PodSummary { ready, total, reason, restarts }
}

/// Upstream's pod STATUS: the phase, refined by init and app container states and deletion.
pub fn pod_status(o: &Value) -> String {
    pod_summary(o).reason
}

pub(super) fn pod_row(o: &Value, age: &str) -> Vec<Value> {
    let p = pod_summary(o);
    let gates: Vec<String> = items(o, "/spec/readinessGates").map(|g| s(g.get("conditionType"))).collect();
    // A gate counts when the first condition of its type is True.
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let met = gates
            .iter()
            .filter(|g| {
                items(o, "/status/conditions")
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(g.as_str()))
                    .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        json!(object::name(o)),
        json!(format!("{}/{}", p.ready, p.total)),
        json!(p.reason),
        json!(p.restarts),
        json!(age),
        json!(or(o.pointer("/status/podIPs/0/ip"), "<none>")),
        json!(or(o.pointer("/spec/nodeName"), "<none>")),
        json!(or(o.pointer("/status/nominatedNodeName"), "<none>")),
        json!(gates),
    ]
}

/// The row condition upstream attaches to a finished pod's row (Completed, with the phase as reason).
pub(super) fn pod_row_conditions(o: &Value) -> Option<Value> {
    let message = match o.pointer("/status/phase").and_then(Value::as_str)? {
        "Succeeded" => "The pod has completed successfully.",
        "Failed" => "The pod failed.",
        _ => return None,
    };
    let reason = s(o.pointer("/status/phase"));
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

fn node_address(o: &Value, ty: &str) -> String {
    items(o, "/status/addresses")
        .find(|a| a.get("type").and_then(Value::as_str) == Some(ty))
        .map_or_else(|| "<none>".to_string(), |a| s(a.get("address")))
}

pub(super) fn node_row(o: &Value, age: &str) -> Vec<Value> {
    let ready = items(o, "/status/conditions").find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
    let mut status = match ready.and_then(|c| c.get("status")).and_then(Value::as_str) {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push_str(",SchedulingDisabled");
    }
    // Roles from node-role.kubernetes.io/<role> keys and the kubernetes.io/role value, as a sorted set.
    let mut roles: Vec<String> = object::labels(o)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role.to_string()),
            Some(_) => None,
            None if k == "kubernetes.io/role" => v.as_str().filter(|v| !v.is_empty()).map(String::from),
            None => None,
        })
        .collect();
    roles.sort();
    roles.dedup();
    vec![
        json!(object::name(o)),
        json!(status),
        json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }),
        json!(age),
        json!(s(o.pointer("/status/nodeInfo/kubeletVersion"))),
        json!(node_address(o, "InternalIP")),
        json!(node_address(o, "ExternalIP")),
        json!(or(o.pointer("/status/nodeInfo/osImage"), "<unknown>")),
        json!(or(o.pointer("/status/nodeInfo/kernelVersion"), "<unknown>")),
        json!(or(o.pointer("/status/nodeInfo/containerRuntimeVersion"), "<unknown>")),
    ]
}

pub(super) fn event_row(o: &Value, _age: &str) -> Vec<Value> {
    let first =
        age_of(o.get("firstTimestamp")).or_else(|| age_of(o.get("eventTime"))).unwrap_or_else(|| "<unknown>".into());
    let mut last = age_of(o.get("lastTimestamp")).unwrap_or_else(|| first.clone());
    let mut count = n(o, "/count");
    if o.get("series").is_some_and(Value::is_object) {
        last = age_of(o.pointer("/series/lastObservedTime")).unwrap_or_else(|| "<unknown>".into());
        count = n(o, "/series/count");
    } else if count == 0 {
        // Singleton events of the events.k8s.io API carry no count.
        count = 1;
    }
    let kind = s(o.pointer("/involvedObject/kind")).to_lowercase();
    let name = s(o.pointer("/involvedObject/name"));
    let target = if name.is_empty() { kind } else { format!("{kind}/{name}") };
    let first_non_empty = |a: String, b: String| if a.is_empty() { b } else { a };
    let component = first_non_empty(s(o.pointer("/source/component")), s(o.get("reportingComponent")));
    let instance = first_non_empty(s(o.pointer("/source/host")), s(o.get("reportingInstance")));
    let source = if instance.is_empty() { component } else { format!("{component}, {instance}") };
    vec![
        json!(last),
        json!(s(o.get("type"))),
        json!(s(o.get("reason"))),
        json!(target),
        json!(s(o.pointer("/involvedObject/fieldPath"))),
        json!(source),
        json!(s(o.get("message")).trim()),
        json!(first),
        json!(count),
        json!(object::name(o)),
    ]
}

pub(super) fn service_account_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(len(o.get("secrets"))), json!(age)]
}

/// formatEndpoints: ip:port for each port then each address (bare IPs for port-less
/// subsets), the first three, then " + N more...".
pub(super) fn endpoints_row(o: &Value, age: &str) -> Vec<Value> {
    let mut eps = Vec::new();
    for subset in items(o, "/subsets") {
        let addresses: Vec<String> = items(subset, "/addresses").map(|a| s(a.get("ip"))).collect();
        let ports: Vec<i64> = items(subset, "/ports").map(|p| n(p, "/port")).collect();
        if ports.is_empty() {
            eps.extend(addresses.iter().cloned());
            continue;
        }
        for port in ports {
            for ip in &addresses {
                eps.push(if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") });
            }
        }
    }
    let shown = match eps.len() {
        _ if len(o.get("subsets")) == 0 => "<none>".to_string(),
        n if n > 3 => format!("{} + {} more...", eps[..3].join(","), n - 3),
        _ => eps.join(","),
    };
    vec![json!(object::name(o)), json!(shown), json!(age)]
}

/// Capacity and access modes show once the claim is bound to a volume.
pub(super) fn pvc_row(o: &Value, age: &str) -> Vec<Value> {
    let bound = !s(o.pointer("/spec/volumeName")).is_empty();
    let (capacity, modes) = if bound {
        (quantity(o.pointer("/status/capacity/storage")), access_modes(o, "/status/accessModes"))
    } else {
        (String::new(), String::new())
    };
    vec![
        json!(object::name(o)),
        json!(volume_phase(o)),
        json!(s(o.pointer("/spec/volumeName"))),
        json!(capacity),
        json!(modes),
        json!(storage_class(o)),
        json!(or(o.pointer("/spec/volumeAttributesClassName"), "<unset>")),
        json!(age),
        json!(or(o.pointer("/spec/volumeMode"), "<unset>")),
    ]
}

const EVENT_COLUMNS: &[Column] = &[
    col("Last Seen"),
    col("Type"),
    col("Reason"),
    col("Object"),
    wide("Subobject"),
    wide("Source"),
    col("Message"),
    wide("First Seen"),
    wide("Count"),
    Column { name: "Name", kind: "string", format: "name", wide: true },
];
const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[NAME, col("Secrets"), AGE];
const ENDPOINTS_COLUMNS: &[Column] = &[NAME, col("Endpoints"), AGE];
const PVC_COLUMNS: &[Column] = &[
    NAME,
    col("Status"),
    col("Volume"),
    col("Capacity"),
    col("Access Modes"),
    col("StorageClass"),
    col("VolumeAttributesClass"),
    AGE,
    wide("VolumeMode"),
];
const NAMESPACE_COLUMNS: &[Column] = &[NAME, col("Status"), AGE];
const CONFIGMAP_COLUMNS: &[Column] = &[NAME, col("Data"), AGE];
const SECRET_COLUMNS: &[Column] = &[NAME, col("Type"), col("Data"), AGE];
const SERVICE_COLUMNS: &[Column] =
    &[NAME, col("Type"), col("Cluster-IP"), col("External-IP"), col("Port(s)"), AGE, wide("Selector")];
const POD_COLUMNS: &[Column] = &[
    NAME,
    col("Ready"),
    col("Status"),
    col("Restarts"),
    AGE,
    wide("IP"),
    wide("Node"),
    wide("Nominated Node"),
    wide("Readiness Gates"),
];
const NODE_COLUMNS: &[Column] = &[
    NAME,
    col("Status"),
    col("Roles"),
    AGE,
    col("Version"),
    wide("Internal-IP"),
    wide("External-IP"),
    wide("OS-Image"),
    wide("Kernel-Version"),
    wide("Container-Runtime"),
];

/// helper.GetAccessModesAsString: upstream's short names in its fixed order, not the object's.
fn access_modes(o: &Value, p: &str) -> String {
    let modes: Vec<&str> = items(o, p).filter_map(Value::as_str).collect();
    [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
        .iter()
        .filter(|(long, _)| modes.contains(long))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

/// Phase, or Terminating once deletion has begun (PVs and PVCs).
fn volume_phase(o: &Value) -> String {
    if object::is_deleting(o) { "Terminating".into() } else { s(o.pointer("/status/phase")) }
}

/// The legacy beta annotation wins over spec.storageClassName, as in helper.GetPersistentVolumeClass.
fn storage_class(o: &Value) -> String {
    o.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| s(o.pointer("/spec/storageClassName")))
}

pub(super) fn pv_row(o: &Value, age: &str) -> Vec<Value> {
    let claim = o
        .pointer("/spec/claimRef")
        .filter(|c| c.is_object())
        .map(|c| format!("{}/{}", s(c.get("namespace")), s(c.get("name"))))
        .unwrap_or_default();
    vec![
        json!(object::name(o)),
        json!(quantity(o.pointer("/spec/capacity/storage"))),
        json!(access_modes(o, "/spec/accessModes")),
        json!(s(o.pointer("/spec/persistentVolumeReclaimPolicy"))),
        json!(volume_phase(o)),
        json!(claim),
        json!(storage_class(o)),
        json!(or(o.pointer("/spec/volumeAttributesClassName"), "<unset>")),
        json!(s(o.pointer("/status/reason"))),
        json!(age),
        json!(or(o.pointer("/spec/volumeMode"), "<unset>")),
    ]
}

pub(super) fn replication_controller_row(o: &Value, age: &str) -> Vec<Value> {
    super::apps::replicas_row(o, age, format_labels(o.pointer("/spec/selector")))
}

pub(super) fn pod_template_row(o: &Value, _age: &str) -> Vec<Value> {
    let (names, images) = containers_and_images(o.pointer("/template/spec"));
    vec![
        json!(object::name(o)),
        json!(names),
        json!(images),
        json!(format_labels(o.pointer("/template/metadata/labels"))),
    ]
}

/// Each hard limit as "name: used/hard", sorted by name; `limits.*` go to the Limit column.
pub(super) fn resource_quota_row(o: &Value, age: &str) -> Vec<Value> {
    let mut names: Vec<&String> =
        o.pointer("/status/hard").and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k).collect();
    names.sort();
    let (mut request, mut limit) = (Vec::new(), Vec::new());
    for name in names {
        let key = name.replace('~', "~0").replace('/', "~1");
        let used = quantity(o.pointer(&format!("/status/used/{key}")));
        let used = if used.is_empty() { "0".to_string() } else { used };
        let hard = quantity(o.pointer(&format!("/status/hard/{key}")));
        let cell = format!("{name}: {used}/{hard}");
        if name.starts_with("limits.") { limit.push(cell) } else { request.push(cell) }
    }
    vec![json!(object::name(o)), json!(request.join(", ")), json!(limit.join(", ")), json!(age)]
}

/// The Healthy condition's verdict, message and error; Unknown without one.
pub(super) fn component_status_row(o: &Value, _age: &str) -> Vec<Value> {
    let healthy = items(o, "/conditions").find(|c| c.get("type").and_then(Value::as_str) == Some("Healthy"));
    let (status, message, error) = match healthy {
        Some(c) => (
            if c.get("status").and_then(Value::as_str) == Some("True") { "Healthy" } else { "Unhealthy" },
            s(c.get("message")),
            s(c.get("error")),
        ),
        None => ("Unknown", String::new(), String::new()),
    };
    vec![json!(object::name(o)), json!(status), json!(message), json!(error)]
}

const PV_COLUMNS: &[Column] = &[
    NAME,
    col("Capacity"),
    col("Access Modes"),
    col("Reclaim Policy"),
    col("Status"),
    col("Claim"),
    col("StorageClass"),
    col("VolumeAttributesClass"),
    col("Reason"),
    AGE,
    wide("VolumeMode"),
];
const REPLICATION_CONTROLLER_COLUMNS: &[Column] =
    &[NAME, int("Desired"), int("Current"), int("Ready"), AGE, wide("Containers"), wide("Images"), wide("Selector")];
const POD_TEMPLATE_COLUMNS: &[Column] = &[NAME, col("Containers"), col("Images"), col("Pod Labels")];
const RESOURCE_QUOTA_COLUMNS: &[Column] = &[NAME, col("Request"), col("Limit"), AGE];
const COMPONENT_STATUS_COLUMNS: &[Column] = &[NAME, col("Status"), col("Message"), col("Error")];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    // events.k8s.io Events are stored as core Events, and upstream prints both alike.
    if (group, kind) == ("events.k8s.io", "Event") {
        return Some((EVENT_COLUMNS, event_row));
    }
    if !group.is_empty() {
        return None;
    }
    Some(match kind {
        "Namespace" => (NAMESPACE_COLUMNS, namespace_row),
        "ConfigMap" => (CONFIGMAP_COLUMNS, configmap_row),
        "Secret" => (SECRET_COLUMNS, secret_row),
        "Service" => (SERVICE_COLUMNS, service_row),
        "Pod" => (POD_COLUMNS, pod_row),
        "Node" => (NODE_COLUMNS, node_row),
        "Event" => (EVENT_COLUMNS, event_row),
        "ServiceAccount" => (SERVICE_ACCOUNT_COLUMNS, service_account_row),
        "Endpoints" => (ENDPOINTS_COLUMNS, endpoints_row),
        "PersistentVolumeClaim" => (PVC_COLUMNS, pvc_row),
        "PersistentVolume" => (PV_COLUMNS, pv_row),
        "ReplicationController" => (REPLICATION_CONTROLLER_COLUMNS, replication_controller_row),
        "PodTemplate" => (POD_TEMPLATE_COLUMNS, pod_template_row),
        "ResourceQuota" => (RESOURCE_QUOTA_COLUMNS, resource_quota_row),
        "ComponentStatus" => (COMPONENT_STATUS_COLUMNS, component_status_row),
        _ => return None,
    })
}
