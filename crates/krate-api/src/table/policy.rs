//! policy.

use serde_json::{Value, json};

use super::*;
use crate::object;

/// MIN AVAILABLE / MAX UNAVAILABLE as set (an int or a percentage), "N/A" when unset.
pub(super) fn pdb_row(o: &Value, age: &str) -> Vec<Value> {
    let bound = |p: &str| o.pointer(p).filter(|v| !v.is_null()).map_or_else(|| "N/A".to_string(), int_or_string);
    vec![
        json!(object::name(o)),
        json!(bound("/spec/minAvailable")),
        json!(bound("/spec/maxUnavailable")),
        json!(n(o, "/status/disruptionsAllowed")),
        json!(age),
    ]
}

const PDB_COLUMNS: &[Column] = &[NAME, col("Min Available"), col("Max Unavailable"), int("Allowed Disruptions"), AGE];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    match (group, kind) {
        ("policy", "PodDisruptionBudget") => Some((PDB_COLUMNS, pdb_row)),
        _ => None,
    }
}
