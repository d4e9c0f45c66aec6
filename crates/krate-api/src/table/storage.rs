//! storage.k8s.io.

use serde_json::{Value, json};

use super::*;
use crate::object;

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str)
}

/// The name, marked " (default)" when an is-default-class annotation (GA or beta) says "true".
pub(super) fn storage_class_row(o: &Value, age: &str) -> Vec<Value> {
    let default = ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
        .iter()
        .any(|k| annotation(o, k) == Some("true"));
    let mut name = object::name(o).to_string();
    if default {
        name.push_str(" (default)");
    }
    vec![
        json!(name),
        json!(s(o.get("provisioner"))),
        json!(or(o.get("reclaimPolicy"), "Delete")),
        json!(or(o.get("volumeBindingMode"), "Immediate")),
        flag(o, "/allowVolumeExpansion", false),
        json!(age),
    ]
}

pub(super) fn volume_attributes_class_row(o: &Value, age: &str) -> Vec<Value> {
    let mut name = object::name(o).to_string();
    if annotation(o, "volumeattributesclass.alpha.kubernetes.io/is-default-class") == Some("true") {
        name.push_str(" (default)");
    }
    vec![json!(name), json!(s(o.get("driverName"))), json!(age)]
}

pub(super) fn volume_attachment_row(o: &Value, age: &str) -> Vec<Value> {
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/spec/attacher"))),
        json!(s(o.pointer("/spec/source/persistentVolumeName"))),
        json!(s(o.pointer("/spec/nodeName"))),
        flag(o, "/status/attached", false),
        json!(age),
    ]
}

/// CSIDriver's flags with the API's defaults (attachRequired defaults to true).
pub(super) fn csi_driver_row(o: &Value, age: &str) -> Vec<Value> {
    let token_requests = match o.pointer("/spec/tokenRequests").and_then(Value::as_array) {
        Some(ts) => ts.iter().map(|t| s(t.get("audience"))).collect::<Vec<_>>().join(","),
        None => "<unset>".into(),
    };
    let modes: Vec<String> = items(o, "/spec/volumeLifecycleModes").map(|m| s(Some(m))).collect();
    vec![
        json!(object::name(o)),
        flag(o, "/spec/attachRequired", true),
        flag(o, "/spec/podInfoOnMount", false),
        flag(o, "/spec/storageCapacity", false),
        json!(token_requests),
        flag(o, "/spec/requiresRepublish", false),
        json!(if modes.is_empty() { "<none>".to_string() } else { modes.join(",") }),
        json!(age),
    ]
}

pub(super) fn csi_node_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(len(o.pointer("/spec/drivers"))), json!(age)]
}

pub(super) fn csi_storage_capacity_row(o: &Value, _age: &str) -> Vec<Value> {
    let capacity = quantity(o.get("capacity"));
    vec![
        json!(object::name(o)),
        json!(s(o.get("storageClassName"))),
        json!(if capacity.is_empty() { "<unset>".to_string() } else { capacity }),
    ]
}

const STORAGE_CLASS_COLUMNS: &[Column] =
    &[NAME, col("Provisioner"), col("ReclaimPolicy"), col("VolumeBindingMode"), col("AllowVolumeExpansion"), AGE];
const VOLUME_ATTRIBUTES_CLASS_COLUMNS: &[Column] = &[NAME, col("DriverName"), AGE];
const VOLUME_ATTACHMENT_COLUMNS: &[Column] = &[
    NAME,
    Column { name: "Attacher", kind: "string", format: "name", wide: false },
    col("PV"),
    col("Node"),
    boolean("Attached"),
    AGE,
];
const CSI_DRIVER_COLUMNS: &[Column] = &[
    NAME,
    boolean("AttachRequired"),
    boolean("PodInfoOnMount"),
    boolean("StorageCapacity"),
    col("TokenRequests"),
    boolean("RequiresRepublish"),
    col("Modes"),
    AGE,
];
const CSI_NODE_COLUMNS: &[Column] = &[NAME, int("Drivers"), AGE];
const CSI_STORAGE_CAPACITY_COLUMNS: &[Column] = &[NAME, col("StorageClassName"), col("Capacity")];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    if group != "storage.k8s.io" {
        return None;
    }
    Some(match kind {
        "StorageClass" => (STORAGE_CLASS_COLUMNS, storage_class_row),
        "VolumeAttributesClass" => (VOLUME_ATTRIBUTES_CLASS_COLUMNS, volume_attributes_class_row),
        "VolumeAttachment" => (VOLUME_ATTACHMENT_COLUMNS, volume_attachment_row),
        "CSIDriver" => (CSI_DRIVER_COLUMNS, csi_driver_row),
        "CSINode" => (CSI_NODE_COLUMNS, csi_node_row),
        "CSIStorageCapacity" => (CSI_STORAGE_CAPACITY_COLUMNS, csi_storage_capacity_row),
        _ => return None,
    })
}
