//! Server-side printing: the meta.k8s.io/v1 Table kubectl asks for, with upstream's
//! columns for the kinds people look at most (pods, services, workloads, jobs, events…) and the default Name / Created At table for
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

fn n(o: &Value, p: &str) -> i64 {
    o.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

fn age_of(ts: Option<&Value>) -> Option<String> {
    let t = ts?.as_str()?.parse::<jiff::Timestamp>().ok()?;
    Some(human_duration((jiff::Timestamp::now() - t).get_seconds()))
}

fn event_row(o: &Value, age: &str) -> Vec<Value> {
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

fn replica_set_row(o: &Value, age: &str) -> Vec<Value> {
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(n(o, "/spec/replicas")),
        json!(n(o, "/status/replicas")),
        json!(n(o, "/status/readyReplicas")),
        json!(age),
        json!(names),
        json!(images),
    ]
}

fn stateful_set_row(o: &Value, age: &str) -> Vec<Value> {
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(format!("{}/{}", n(o, "/status/readyReplicas"), n(o, "/spec/replicas"))),
        json!(age),
        json!(names),
        json!(images),
    ]
}

fn daemon_set_row(o: &Value, age: &str) -> Vec<Value> {
    let selector = o
        .pointer("/spec/template/spec/nodeSelector")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","));
    vec![
        json!(object::name(o)),
        json!(n(o, "/status/desiredNumberScheduled")),
        json!(n(o, "/status/currentNumberScheduled")),
        json!(n(o, "/status/numberReady")),
        json!(n(o, "/status/updatedNumberScheduled")),
        json!(n(o, "/status/numberAvailable")),
        json!(selector.filter(|s| !s.is_empty()).unwrap_or_else(|| "<none>".into())),
        json!(age),
    ]
}

/// Upstream's Job STATUS: the terminal or suspended condition, else Running.
fn job_status(o: &Value) -> &'static str {
    let conditions: Vec<&Value> =
        o.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().collect();
    let is = |t: &str| {
        conditions.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(t) && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    match () {
        _ if is("Complete") => "Complete",
        _ if is("Failed") => "Failed",
        _ if is("FailureTarget") => "FailureTarget",
        _ if is("SuccessCriteriaMet") => "SuccessCriteriaMet",
        _ if is("Suspended") => "Suspended",
        _ => "Running",
    }
}

fn job_row(o: &Value, age: &str) -> Vec<Value> {
    let succeeded = n(o, "/status/succeeded");
    let completions = match (o.pointer("/spec/completions").and_then(Value::as_i64), n(o, "/spec/parallelism")) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, p) if p > 1 => format!("{succeeded}/1 of {p}"),
        _ => format!("{succeeded}/1"),
    };
    let start = o.pointer("/status/startTime").and_then(Value::as_str).and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let end = o
        .pointer("/status/completionTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .unwrap_or_else(jiff::Timestamp::now);
    let duration = start.map(|st| human_duration((end - st).get_seconds())).unwrap_or_default();
    vec![json!(object::name(o)), json!(job_status(o)), json!(completions), json!(duration), json!(age)]
}

fn cron_job_row(o: &Value, age: &str) -> Vec<Value> {
    let active = o.pointer("/status/active").and_then(Value::as_array).map_or(0, Vec::len);
    let tz = s(o.pointer("/spec/timeZone"));
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/spec/schedule"))),
        json!(if tz.is_empty() { "<none>".to_string() } else { tz }),
        json!(s(o.pointer("/spec/suspend"))),
        json!(active),
        json!(age_of(o.pointer("/status/lastScheduleTime")).unwrap_or_else(|| "<none>".into())),
        json!(age),
    ]
}

fn service_account_row(o: &Value, age: &str) -> Vec<Value> {
    let secrets = o.get("secrets").and_then(Value::as_array).map_or(0, Vec::len);
    vec![json!(object::name(o)), json!(secrets), json!(age)]
}

fn endpoints_row(o: &Value, age: &str) -> Vec<Value> {
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

fn lease_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(s(o.pointer("/spec/holderIdentity"))), json!(age)]
}

fn pvc_row(o: &Value, age: &str) -> Vec<Value> {
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
const REPLICA_SET_COLUMNS: &[Column] =
    &[NAME, col("Desired"), col("Current"), col("Ready"), col("Age"), wide("Containers"), wide("Images")];
const STATEFUL_SET_COLUMNS: &[Column] = &[NAME, col("Ready"), col("Age"), wide("Containers"), wide("Images")];
const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    col("Desired"),
    col("Current"),
    col("Ready"),
    col("Up-to-date"),
    col("Available"),
    col("Node Selector"),
    col("Age"),
];
const JOB_COLUMNS: &[Column] = &[NAME, col("Status"), col("Completions"), col("Duration"), col("Age")];
const CRON_JOB_COLUMNS: &[Column] =
    &[NAME, col("Schedule"), col("Timezone"), col("Suspend"), col("Active"), col("Last Schedule"), col("Age")];
const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[NAME, col("Secrets"), col("Age")];
const ENDPOINTS_COLUMNS: &[Column] = &[NAME, col("Endpoints"), col("Age")];
const LEASE_COLUMNS: &[Column] = &[NAME, col("Holder"), col("Age")];
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
        ("", "Event") => (EVENT_COLUMNS, event_row),
        ("apps", "ReplicaSet") => (REPLICA_SET_COLUMNS, replica_set_row),
        ("apps", "StatefulSet") => (STATEFUL_SET_COLUMNS, stateful_set_row),
        ("apps", "DaemonSet") => (DAEMON_SET_COLUMNS, daemon_set_row),
        ("batch", "Job") => (JOB_COLUMNS, job_row),
        ("batch", "CronJob") => (CRON_JOB_COLUMNS, cron_job_row),
        ("", "ServiceAccount") => (SERVICE_ACCOUNT_COLUMNS, service_account_row),
        ("", "Endpoints") => (ENDPOINTS_COLUMNS, endpoints_row),
        ("coordination.k8s.io", "Lease") => (LEASE_COLUMNS, lease_row),
        ("", "PersistentVolumeClaim") => (PVC_COLUMNS, pvc_row),
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
    fn workload_and_event_rows() {
        let job = json!({"metadata": {"name": "j"}, "spec": {"completions": 3, "parallelism": 1},
            "status": {"succeeded": 2, "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:05Z",
                "conditions": [{"type": "Complete", "status": "True"}]}});
        let row = job_row(&job, "1m");
        assert_eq!((row[1].as_str(), row[2].as_str(), row[3].as_str()), (Some("Complete"), Some("2/3"), Some("65s")));
        let ev = json!({"metadata": {"name": "e"}, "type": "Warning", "reason": "BackOff", "message": "m",
            "involvedObject": {"kind": "Pod", "name": "p"}});
        assert_eq!(event_row(&ev, "3s")[3], "pod/p");
        let ep = json!({"metadata": {"name": "e"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}]}]});
        assert_eq!(endpoints_row(&ep, "1s")[1], "10.0.0.1:80,10.0.0.2:80");
        let rs =
            json!({"metadata": {"name": "r"}, "spec": {"replicas": 3}, "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(&replica_set_row(&rs, "1s")[1..4], &[json!(3), json!(2), json!(1)]);
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
