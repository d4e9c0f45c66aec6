//! apps.

use serde_json::{Value, json};

use super::*;
use crate::object;

pub(super) fn deployment_row(o: &Value, age: &str) -> Vec<Value> {
    let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    let selector = o.pointer("/spec/selector").filter(|v| v.is_object()).map(selector_string).unwrap_or_default();
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

pub(super) fn replica_set_row(o: &Value, age: &str) -> Vec<Value> {
    replicas_row(o, age, format_selector(o.pointer("/spec/selector")))
}

/// NAME DESIRED CURRENT READY AGE CONTAINERS IMAGES SELECTOR: ReplicaSets and
/// ReplicationControllers alike (their selectors are printed differently).
pub(super) fn replicas_row(o: &Value, age: &str, selector: String) -> Vec<Value> {
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(n(o, "/spec/replicas")),
        json!(n(o, "/status/replicas")),
        json!(n(o, "/status/readyReplicas")),
        json!(age),
        json!(names),
        json!(images),
        json!(selector),
    ]
}

pub(super) fn stateful_set_row(o: &Value, age: &str) -> Vec<Value> {
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(format!("{}/{}", n(o, "/status/readyReplicas"), n(o, "/spec/replicas"))),
        json!(age),
        json!(names),
        json!(images),
    ]
}

pub(super) fn daemon_set_row(o: &Value, age: &str) -> Vec<Value> {
    let (names, images) = containers_and_images(o.pointer("/spec/template/spec"));
    vec![
        json!(object::name(o)),
        json!(n(o, "/status/desiredNumberScheduled")),
        json!(n(o, "/status/currentNumberScheduled")),
        json!(n(o, "/status/numberReady")),
        json!(n(o, "/status/updatedNumberScheduled")),
        json!(n(o, "/status/numberAvailable")),
        json!(format_labels(o.pointer("/spec/template/spec/nodeSelector"))),
        json!(age),
        json!(names),
        json!(images),
        json!(format_selector(o.pointer("/spec/selector"))),
    ]
}

/// The controlling owner as lower-cased "kind.group/name" (upstream's formatResourceName).
pub(super) fn controller_revision_row(o: &Value, age: &str) -> Vec<Value> {
    let owner =
        items(o, "/metadata/ownerReferences").find(|r| r.get("controller").and_then(Value::as_bool) == Some(true));
    let controller = owner.map_or_else(
        || "<none>".to_string(),
        |r| {
            let api_version = s(r.get("apiVersion"));
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let kind = s(r.get("kind"));
            let group_kind = if group.is_empty() { kind } else { format!("{kind}.{group}") };
            if group_kind.is_empty() {
                s(r.get("name"))
            } else {
                format!("{}/{}", group_kind.to_lowercase(), s(r.get("name")))
            }
        },
    );
    vec![json!(object::name(o)), json!(controller), json!(n(o, "/revision")), json!(age)]
}

const REPLICA_SET_COLUMNS: &[Column] =
    &[NAME, int("Desired"), int("Current"), int("Ready"), AGE, wide("Containers"), wide("Images"), wide("Selector")];
const STATEFUL_SET_COLUMNS: &[Column] = &[NAME, col("Ready"), AGE, wide("Containers"), wide("Images")];
const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    int("Desired"),
    int("Current"),
    int("Ready"),
    int("Up-to-date"),
    int("Available"),
    col("Node Selector"),
    AGE,
    wide("Containers"),
    wide("Images"),
    wide("Selector"),
];
const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    col("Ready"),
    col("Up-to-date"),
    col("Available"),
    AGE,
    wide("Containers"),
    wide("Images"),
    wide("Selector"),
];
const CONTROLLER_REVISION_COLUMNS: &[Column] = &[NAME, col("Controller"), col("Revision"), AGE];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    if group != "apps" {
        return None;
    }
    Some(match kind {
        "Deployment" => (DEPLOYMENT_COLUMNS, deployment_row),
        "ReplicaSet" => (REPLICA_SET_COLUMNS, replica_set_row),
        "StatefulSet" => (STATEFUL_SET_COLUMNS, stateful_set_row),
        "DaemonSet" => (DAEMON_SET_COLUMNS, daemon_set_row),
        "ControllerRevision" => (CONTROLLER_REVISION_COLUMNS, controller_revision_row),
        _ => return None,
    })
}
