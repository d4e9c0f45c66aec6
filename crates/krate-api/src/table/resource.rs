//! resource.k8s.io (dynamic resource allocation).

use serde_json::{Value, json};

use super::*;
use crate::object;

/// DeviceClasses and ResourceClaimTemplates print their age, not the default Created At.
pub(super) fn name_age_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(age)]
}

/// STATE: "deleted", then "pending" (unallocated and not deleted) or "allocated" (",reserved").
pub(super) fn resource_claim_state(o: &Value) -> String {
    let mut states = Vec::new();
    let deleting = object::is_deleting(o);
    if deleting {
        states.push("deleted");
    }
    if o.pointer("/status/allocation").is_none_or(Value::is_null) {
        if !deleting {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if len(o.pointer("/status/reservedFor")) > 0 {
            states.push("reserved");
        }
    }
    states.join(",")
}

pub(super) fn resource_claim_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(resource_claim_state(o)), json!(age)]
}

pub(super) fn resource_slice_row(o: &Value, age: &str) -> Vec<Value> {
    vec![
        json!(object::name(o)),
        json!(s(o.pointer("/spec/nodeName"))),
        json!(s(o.pointer("/spec/driver"))),
        json!(s(o.pointer("/spec/pool/name"))),
        json!(age),
    ]
}

const NAME_AGE_COLUMNS: &[Column] = &[NAME, AGE];
const RESOURCE_CLAIM_COLUMNS: &[Column] = &[NAME, col("State"), AGE];
const RESOURCE_SLICE_COLUMNS: &[Column] = &[NAME, col("Node"), col("Driver"), col("Pool"), AGE];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    if group != "resource.k8s.io" {
        return None;
    }
    Some(match kind {
        "DeviceClass" | "ResourceClaimTemplate" => (NAME_AGE_COLUMNS, name_age_row),
        "ResourceClaim" => (RESOURCE_CLAIM_COLUMNS, resource_claim_row),
        "ResourceSlice" => (RESOURCE_SLICE_COLUMNS, resource_slice_row),
        _ => return None,
    })
}
