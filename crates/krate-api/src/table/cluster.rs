//! Cluster-level APIs: coordination, scheduling, node, certificates, flow control,
//! apiregistration and the apiserver's own bookkeeping kinds.

use serde_json::{Value, json};

use super::*;
use crate::object;

pub(super) fn lease_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(s(o.pointer("/spec/holderIdentity"))), json!(age)]
}

pub(super) fn lease_candidate_row(o: &Value, age: &str) -> Vec<Value> {
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/spec/leaseName"))),
        json!(s(o.pointer("/spec/binaryVersion"))),
        json!(s(o.pointer("/spec/emulationVersion"))),
        json!(age),
    ]
}

pub(super) fn priority_class_row(o: &Value, age: &str) -> Vec<Value> {
    vec![
        json!(object::name(o)),
        json!(n(o, "/value")),
        flag(o, "/globalDefault", false),
        json!(age),
        json!(s(o.get("preemptionPolicy"))),
    ]
}

pub(super) fn runtime_class_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(s(o.get("handler"))), json!(age)]
}

/// extractCSRStatus: Denied over Approved over Pending, then ",Failed" and ",Issued".
pub(super) fn csr_condition(o: &Value) -> String {
    let has = |t: &str| items(o, "/status/conditions").any(|c| c.get("type").and_then(Value::as_str) == Some(t));
    let mut status = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        status.push_str(",Failed");
    }
    if !s(o.pointer("/status/certificate")).is_empty() {
        status.push_str(",Issued");
    }
    status
}

pub(super) fn csr_row(o: &Value, age: &str) -> Vec<Value> {
    let duration = o
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .map_or_else(|| "<none>".to_string(), human_duration);
    vec![
        json!(object::name(o)),
        json!(age),
        json!(or(o.pointer("/spec/signerName"), "<none>")),
        json!(s(o.pointer("/spec/username"))),
        json!(duration),
        json!(csr_condition(o)),
    ]
}

pub(super) fn cluster_trust_bundle_row(o: &Value, _age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(or(o.pointer("/spec/signerName"), "<none>"))]
}

/// MISSINGPL is the Dangling condition's status, "?" until the apiserver has set one.
pub(super) fn flow_schema_row(o: &Value, age: &str) -> Vec<Value> {
    let missing = items(o, "/status/conditions")
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Dangling"))
        .map_or_else(|| "?".to_string(), |c| s(c.get("status")));
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/spec/priorityLevelConfiguration/name"))),
        json!(n(o, "/spec/matchingPrecedence")),
        json!(or(o.pointer("/spec/distinguisherMethod/type"), "<none>")),
        json!(age),
        json!(missing),
    ]
}

/// Limited levels show their shares and queuing; Exempt ones (and unqueued limits) "<none>".
pub(super) fn priority_level_row(o: &Value, age: &str) -> Vec<Value> {
    let none = || json!("<none>");
    let (mut ncs, mut queues, mut hand, mut limit) = (none(), none(), none(), none());
    if let Some(l) = o.pointer("/spec/limited").filter(|l| l.is_object()) {
        ncs = json!(n(l, "/nominalConcurrencyShares"));
        if let Some(q) = l.pointer("/limitResponse/queuing").filter(|q| q.is_object()) {
            (queues, hand, limit) =
                (json!(n(q, "/queues")), json!(n(q, "/handSize")), json!(n(q, "/queueLengthLimit")));
        }
    }
    vec![json!(object::name(o)), json!(s(o.pointer("/spec/type"))), ncs, queues, hand, limit, json!(age)]
}

/// kube-aggregator's table: SERVICE is "Local" or namespace/name; AVAILABLE is the Available
/// condition's status, with its reason in parentheses when not True.
pub(super) fn api_service_row(o: &Value, age: &str) -> Vec<Value> {
    let service = match o.pointer("/spec/service").filter(|v| v.is_object()) {
        Some(svc) => format!("{}/{}", s(svc.get("namespace")), s(svc.get("name"))),
        None => "Local".into(),
    };
    let available =
        match items(o, "/status/conditions").find(|c| c.get("type").and_then(Value::as_str) == Some("Available")) {
            None => "Unknown".to_string(),
            Some(c) => {
                let (status, reason) = (s(c.get("status")), s(c.get("reason")));
                if status == "True" || reason.is_empty() { status } else { format!("{status} ({reason})") }
            }
        };
    vec![json!(object::name(o)), json!(service), json!(available), json!(age)]
}

pub(super) fn storage_version_row(o: &Value, age: &str) -> Vec<Value> {
    let versions: Vec<String> = items(o, "/status/storageVersions")
        .map(|v| format!("{}={}", s(v.get("apiServerID")), s(v.get("encodingVersion"))))
        .collect();
    vec![
        json!(object::name(o)),
        json!(or(o.pointer("/status/commonEncodingVersion"), "<unset>")),
        json!(list_with_more(&versions, 3)),
        json!(age),
    ]
}

/// The migrated resource as "resource.version.group" (the version is left out where the
/// API no longer names one).
pub(super) fn storage_version_migration_row(o: &Value, _age: &str) -> Vec<Value> {
    let parts: Vec<String> = ["resource", "version", "group"]
        .iter()
        .filter_map(|k| o.pointer(&format!("/spec/resource/{k}")).and_then(Value::as_str))
        .map(String::from)
        .collect();
    vec![json!(object::name(o)), json!(parts.join("."))]
}

const LEASE_COLUMNS: &[Column] = &[NAME, col("Holder"), AGE];
const LEASE_CANDIDATE_COLUMNS: &[Column] =
    &[NAME, col("LeaseName"), col("BinaryVersion"), col("EmulationVersion"), AGE];
const PRIORITY_CLASS_COLUMNS: &[Column] =
    &[NAME, int("Value"), boolean("Global-Default"), AGE, col("PreemptionPolicy")];
const RUNTIME_CLASS_COLUMNS: &[Column] = &[NAME, col("Handler"), AGE];
const CSR_COLUMNS: &[Column] =
    &[NAME, AGE, col("SignerName"), col("Requestor"), col("RequestedDuration"), col("Condition")];
const CLUSTER_TRUST_BUNDLE_COLUMNS: &[Column] = &[NAME, col("SignerName")];
const FLOW_SCHEMA_COLUMNS: &[Column] =
    &[NAME, col("PriorityLevel"), col("MatchingPrecedence"), col("DistinguisherMethod"), AGE, col("MissingPL")];
const PRIORITY_LEVEL_COLUMNS: &[Column] =
    &[NAME, col("Type"), col("NominalConcurrencyShares"), col("Queues"), col("HandSize"), col("QueueLengthLimit"), AGE];
const API_SERVICE_COLUMNS: &[Column] = &[NAME, col("Service"), col("Available"), AGE];
const STORAGE_VERSION_COLUMNS: &[Column] = &[NAME, col("CommonEncodingVersion"), col("StorageVersions"), AGE];
// Upstream gives this table's Name column no "name" format.
const STORAGE_VERSION_MIGRATION_COLUMNS: &[Column] = &[col("Name"), col("Resource")];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    Some(match (group, kind) {
        ("coordination.k8s.io", "Lease") => (LEASE_COLUMNS, lease_row),
        ("coordination.k8s.io", "LeaseCandidate") => (LEASE_CANDIDATE_COLUMNS, lease_candidate_row),
        ("scheduling.k8s.io", "PriorityClass") => (PRIORITY_CLASS_COLUMNS, priority_class_row),
        ("node.k8s.io", "RuntimeClass") => (RUNTIME_CLASS_COLUMNS, runtime_class_row),
        ("certificates.k8s.io", "CertificateSigningRequest") => (CSR_COLUMNS, csr_row),
        ("certificates.k8s.io", "ClusterTrustBundle") => (CLUSTER_TRUST_BUNDLE_COLUMNS, cluster_trust_bundle_row),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => (FLOW_SCHEMA_COLUMNS, flow_schema_row),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => (PRIORITY_LEVEL_COLUMNS, priority_level_row),
        ("apiregistration.k8s.io", "APIService") => (API_SERVICE_COLUMNS, api_service_row),
        ("internal.apiserver.k8s.io", "StorageVersion") => (STORAGE_VERSION_COLUMNS, storage_version_row),
        ("storagemigration.k8s.io", "StorageVersionMigration") => {
            (STORAGE_VERSION_MIGRATION_COLUMNS, storage_version_migration_row)
        }
        _ => return None,
    })
}
