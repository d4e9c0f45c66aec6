//! Server-side printing: the meta.k8s.io/v1 Table kubectl asks for, with upstream's
//! columns for the kinds people look at most and the default Name / Created At table for
//! the rest. Ages are rendered here, as upstream renders them.

use serde_json::{Value, json};

use crate::object;

/// One column: header, type, and whether it shows only with `-o wide` (priority 1).
pub struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub format: &'static str,
    pub wide: bool,
}

const fn col(name: &'static str) -> Column {
    Column { name, kind: "string", format: "", wide: false }
}
const fn wide(name: &'static str) -> Column {
    Column { name, kind: "string", format: "", wide: true }
}
const NAME: Column = Column { name: "Name", kind: "string", format: "name", wide: false };
const RESTARTS: Column = Column { name: "Restarts", kind: "string", format: "", wide: false };

type Row = fn(&Value, &str) -> Vec<Value>;

/// A kind's columns and how to fill a row (given the object and its age).
pub struct TableDef {
    pub columns: &'static [Column],
    pub row: Row,
}

/// Upstream's HumanDuration: "42s", "5m3s", "3h", "2d4h", "400d", "3y12d".
pub fn human_duration(secs: i64) -> String {
    if secs < 0 {
        return if secs < -1 { "<invalid>".into() } else { "0s".into() };
    }
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if m < 10 => match secs % 60 {
            0 => format!("{m}m"),
            s => format!("{m}m{s}s"),
        },
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => match m % 60 {
            0 => format!("{h}h"),
            rem => format!("{h}h{rem}m"),
        },
        _ if h < 48 => format!("{h}h"),
        _ if h < 24 * 8 => match h % 24 {
            0 => format!("{d}d"),
            rem => format!("{d}d{rem}h"),
        },
        _ if h < 24 * 365 * 2 => format!("{d}d"),
        _ if d / 365 < 8 => format!("{}y{}d", d / 365, d % 365),
        _ => format!("{}y", d / 365),
    }
}

/// The age of an object from its creationTimestamp.
pub fn age(obj: &Value) -> String {
    let created = object::meta_str(obj, "creationTimestamp").and_then(|t| t.parse::<jiff::Timestamp>().ok());
    match created {
        Some(t) => human_duration((jiff::Timestamp::now() - t).get_seconds()),
        None => "<unknown>".into(),
    }
}

fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn count(v: Option<&Value>) -> usize {
    v.and_then(Value::as_object).map_or(0, |m| m.len())
}

fn default_row(obj: &Value, _age: &str) -> Vec<Value> {
    vec![json!(object::name(obj)), json!(object::meta_str(obj, "creationTimestamp").unwrap_or(""))]
}

fn namespace_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(s(o.pointer("/status/phase"))), json!(age)]
}

fn configmap_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(count(o.get("data")) + count(o.get("binaryData"))), json!(age)]
}

fn secret_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(s(o.get("type"))), json!(count(o.get("data"))), json!(age)]
}

fn service_row(o: &Value, age: &str) -> Vec<Value> {
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

fn containers_and_images(template_spec: Option<&Value>) -> (String, String) {
    let cs: Vec<&Value> =
        template_spec.and_then(|t| t.get("containers")).and_then(Value::as_array).into_iter().flatten().collect();
    let names = cs.iter().map(|c| s(c.get("name"))).collect::<Vec<_>>().join(",");
    let images = cs.iter().map(|c| s(c.get("image"))).collect::<Vec<_>>().join(",");
    (names, images)
}

fn deployment_row(o: &Value, age: &str) -> Vec<Value> {
    let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    let selector = o.pointer("/spec/selector").map(crate::registry::label_selector_string).unwrap_or_default();
    vec![
        json!(object::name(o)),
        json!(format!("{}/{}", n("/status/readyReplicas"), n("/spec/replicas"))),
        json!(n("/status/updatedReplicas")),
        json!(n("/status/availableReplicas")),
        json!(age),
        json!(names),
        json!(images),
        json!(selector),
    ]
}

/// Upstream's pod STATUS: the phase, refined by container states and deletion.
pub fn pod_status(o: &Value) -> String {
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

fn pod_row(o: &Value, age: &str) -> Vec<Value> {
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

fn node_row(o: &Value, age: &str) -> Vec<Value> {
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

const DEFAULT_COLUMNS: &[Column] = &[NAME, Column { name: "Created At", kind: "date", format: "", wide: false }];
const NAMESPACE_COLUMNS: &[Column] = &[NAME, col("Status"), col("Age")];
const CONFIGMAP_COLUMNS: &[Column] = &[NAME, col("Data"), col("Age")];
const SECRET_COLUMNS: &[Column] = &[NAME, col("Type"), col("Data"), col("Age")];
const SERVICE_COLUMNS: &[Column] =
    &[NAME, col("Type"), col("Cluster-IP"), col("External-IP"), col("Port(s)"), col("Age"), wide("Selector")];
const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    col("Ready"),
    col("Up-to-date"),
    col("Available"),
    col("Age"),
    wide("Containers"),
    wide("Images"),
    wide("Selector"),
];
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

/// The table definition for a kind.
pub fn for_kind(group: &str, kind: &str) -> TableDef {
    let (columns, row): (&'static [Column], Row) = match (group, kind) {
        ("", "Namespace") => (NAMESPACE_COLUMNS, namespace_row),
        ("", "ConfigMap") => (CONFIGMAP_COLUMNS, configmap_row),
        ("", "Secret") => (SECRET_COLUMNS, secret_row),
        ("", "Service") => (SERVICE_COLUMNS, service_row),
        ("apps", "Deployment") => (DEPLOYMENT_COLUMNS, deployment_row),
        ("", "Pod") => (POD_COLUMNS, pod_row),
        ("", "Node") => (NODE_COLUMNS, node_row),
        _ => (DEFAULT_COLUMNS, default_row),
    };
    TableDef { columns, row }
}

/// A Table of `objects`; `include` is None, Metadata (the default) or Object.
pub fn table(group: &str, kind: &str, objects: &[Value], resource_version: Option<&str>, include: &str) -> Value {
    let def = for_kind(group, kind);
    let columns: Vec<Value> = def
        .columns
        .iter()
        .map(|c| json!({"name": c.name, "type": c.kind, "format": c.format, "description": "", "priority": if c.wide { 1 } else { 0 }}))
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": (def.row)(o, &age(o))});
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
                    })
                }
            }
            row
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = resource_version {
        meta["resourceVersion"] = json!(rv);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_like_upstream() {
        for (secs, want) in [
            (5, "5s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn pod_status_follows_containers_and_deletion() {
        let mut p = json!({"metadata": {"name": "p"}, "status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        assert_eq!(pod_status(&p), "ContainerCreating");
        p["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"reason": "Completed", "exitCode": 0}});
        assert_eq!(pod_status(&p), "Completed");
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(pod_status(&p), "Terminating");
    }

    #[test]
    fn service_rows_show_ports_and_ips() {
        let svc = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "clusterIP": "10.43.0.9", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}], "selector": {"app": "web"}}});
        let row = service_row(&svc, "1s");
        assert_eq!(row[2], "10.43.0.9");
        assert_eq!(row[3], "<none>");
        assert_eq!(row[4], "80:30080/TCP");
        assert_eq!(row[6], "app=web");
    }
}
