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

pub(super) fn service_row(o: &Value, age: &str) -> Vec<Value> {
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort") {
                Some(n) if !n.is_null() => format!("{}:{n}/{proto}", s(p.get("port"))),
                _ => format!("{}/{proto}", s(p.get("port"))),
            }
        })
        .collect();
    let external: Vec<String> = o
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .chain(
            o.pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| i.get("ip").and_then(Value::as_str).map(String::from)),
        )
        .collect();
    let ty = s(o.pointer("/spec/type"));
    let external = match (external.is_empty(), ty.as_str()) {
        (false, _) => external.join(","),
        (true, "LoadBalancer") => "<pending>".into(),
        (true, "ExternalName") => s(o.pointer("/spec/externalName")),
        _ => "<none>".into(),
    };
    let selector = o
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","));
    vec![
        json!(object::name(o)),
        json!(ty),
        json!(s(o.pointer("/spec/clusterIP"))),
        json!(external),
        json!(if ports.is_empty() { "<none>".to_string() } else { ports.join(",") }),
        json!(age),
        json!(selector.filter(|s| !s.is_empty()).unwrap_or_else(|| "<none>".into())),
    ]
}

/// Upstream's pod STATUS: the phase, refined by container states and deletion.
pub(super) fn pod_status(o: &Value) -> String {
    let mut reason = s(o.pointer("/status/reason"));
    if reason.is_empty() {
        reason = s(o.pointer("/status/phase"));
    }
    let statuses: Vec<&Value> =
        o.pointer("/status/containerStatuses").and_then(Value::as_array).into_iter().flatten().collect();
    for c in statuses.iter().rev() {
        if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            reason = r.to_string();
        } else if let Some(t) = c.pointer("/state/terminated") {
            reason = t
                .get("reason")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| format!("ExitCode:{}", s(t.get("exitCode"))));
        }
    }
    if object::is_deleting(o) {
        reason = if s(o.pointer("/status/reason")) == "NodeLost" { "Unknown".into() } else { "Terminating".into() };
    }
    reason
}

pub(super) fn pod_row(o: &Value, age: &str) -> Vec<Value> {
    let statuses: Vec<&Value> =
        o.pointer("/status/containerStatuses").and_then(Value::as_array).into_iter().flatten().collect();
    let total = o.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
    let ready = statuses.iter().filter(|c| c.get("ready") == Some(&Value::Bool(true))).count();
    let restarts: i64 = statuses.iter().filter_map(|c| c.get("restartCount").and_then(Value::as_i64)).sum();
    let none = |v: String| if v.is_empty() { "<none>".to_string() } else { v };
    vec![
        json!(object::name(o)),
        json!(format!("{ready}/{total}")),
        json!(pod_status(o)),
        json!(restarts.to_string()),
        json!(age),
        json!(none(s(o.pointer("/status/podIP")))),
        json!(none(s(o.pointer("/spec/nodeName")))),
        json!(none(s(o.pointer("/status/nominatedNodeName")))),
        json!("<none>"),
    ]
}

pub(super) fn node_row(o: &Value, age: &str) -> Vec<Value> {
    let conditions: Vec<&Value> =
        o.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().collect();
    let ready = conditions.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
    let mut status = match ready.and_then(|c| c.get("status")).and_then(Value::as_str) {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push_str(",SchedulingDisabled");
    }
    let roles: Vec<&str> = object::labels(o)
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    vec![
        json!(object::name(o)),
        json!(status),
        json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }),
        json!(age),
        json!(s(o.pointer("/status/nodeInfo/kubeletVersion"))),
    ]
}

pub(super) fn event_row(o: &Value, age: &str) -> Vec<Value> {
    let last = age_of(o.get("lastTimestamp"))
        .or_else(|| age_of(o.pointer("/series/lastObservedTime")))
        .or_else(|| age_of(o.get("eventTime")))
        .unwrap_or_else(|| age.to_string());
    let kind = s(o.pointer("/involvedObject/kind")).to_lowercase();
    vec![
        json!(last),
        json!(s(o.get("type"))),
        json!(s(o.get("reason"))),
        json!(format!("{kind}/{}", s(o.pointer("/involvedObject/name")))),
        json!(s(o.get("message"))),
    ]
}

pub(super) fn service_account_row(o: &Value, age: &str) -> Vec<Value> {
    let secrets = o.get("secrets").and_then(Value::as_array).map_or(0, Vec::len);
    vec![json!(object::name(o)), json!(secrets), json!(age)]
}

pub(super) fn endpoints_row(o: &Value, age: &str) -> Vec<Value> {
    let mut eps = Vec::new();
    for subset in o.get("subsets").and_then(Value::as_array).into_iter().flatten() {
        let ports: Vec<String> =
            subset.get("ports").and_then(Value::as_array).into_iter().flatten().map(|p| s(p.get("port"))).collect();
        for a in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
            let ip = s(a.get("ip"));
            if ports.is_empty() {
                eps.push(ip.clone());
            }
            eps.extend(ports.iter().map(|p| format!("{ip}:{p}")));
        }
    }
    let shown = match eps.len() {
        0 => "<none>".to_string(),
        n if n > 3 => format!("{} + {} more...", eps[..3].join(","), n - 3),
        _ => eps.join(","),
    };
    vec![json!(object::name(o)), json!(shown), json!(age)]
}

pub(super) fn pvc_row(o: &Value, age: &str) -> Vec<Value> {
    let modes: Vec<String> = o
        .pointer("/status/accessModes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO".to_string(),
            "ReadOnlyMany" => "ROX".to_string(),
            "ReadWriteMany" => "RWX".to_string(),
            "ReadWriteOncePod" => "RWOP".to_string(),
            other => other.to_string(),
        })
        .collect();
    let or_unset = |v: String| if v.is_empty() { "<unset>".to_string() } else { v };
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/status/phase"))),
        json!(s(o.pointer("/spec/volumeName"))),
        json!(s(o.pointer("/status/capacity/storage"))),
        json!(modes.join(",")),
        json!(or_unset(s(o.pointer("/spec/storageClassName")))),
        json!(or_unset(s(o.pointer("/spec/volumeAttributesClassName")))),
        json!(age),
    ]
}

const EVENT_COLUMNS: &[Column] = &[col("Last Seen"), col("Type"), col("Reason"), col("Object"), col("Message")];

const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[NAME, col("Secrets"), col("Age")];

const ENDPOINTS_COLUMNS: &[Column] = &[NAME, col("Endpoints"), col("Age")];

const PVC_COLUMNS: &[Column] = &[
    NAME,
    col("Status"),
    col("Volume"),
    col("Capacity"),
    col("Access Modes"),
    col("StorageClass"),
    col("VolumeAttributesClass"),
    col("Age"),
];

const NAMESPACE_COLUMNS: &[Column] = &[NAME, col("Status"), col("Age")];

const CONFIGMAP_COLUMNS: &[Column] = &[NAME, col("Data"), col("Age")];

const SECRET_COLUMNS: &[Column] = &[NAME, col("Type"), col("Data"), col("Age")];

const SERVICE_COLUMNS: &[Column] =
    &[NAME, col("Type"), col("Cluster-IP"), col("External-IP"), col("Port(s)"), col("Age"), wide("Selector")];

const POD_COLUMNS: &[Column] = &[
    NAME,
    col("Ready"),
    col("Status"),
    RESTARTS,
    col("Age"),
    wide("IP"),
    wide("Node"),
    wide("Nominated Node"),
    wide("Readiness Gates"),
];

const NODE_COLUMNS: &[Column] = &[NAME, col("Status"), col("Roles"), col("Age"), col("Version")];

const RESTARTS: Column = Column { name: "Restarts", kind: "string", format: "", wide: false };

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
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(n(o, "/spec/replicas")),
        json!(n(o, "/status/replicas")),
        json!(n(o, "/status/readyReplicas")),
        json!(age),
        json!(names),
        json!(images),
        json!(format_labels(o.pointer("/spec/selector"))),
    ]
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
