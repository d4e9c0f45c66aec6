//! Server-side printing: the meta.k8s.io/v1 Table kubectl asks for, with upstream's columns
//! (pkg/printers/internalversion/printers.go) for every built-in kind it prints specially, and
//! the default Name / Created At table for the rest (Roles, ClusterRoles, LimitRanges, CRDs…).
//!
//! Each API area has its own file holding, per kind, a columns const and a row fn; this file
//! holds the shared machinery and upstream's formatting helpers. As upstream's server-side
//! convertor does, every row carries all cells (wide ones too); kubectl hides priority-1
//! columns unless asked for `-o wide`. Row fns never panic: a missing field prints upstream's
//! placeholder for it.

use serde_json::{Value, json};

use crate::object;

mod admission;
mod apps;
mod autoscaling;
mod batch;
mod cluster;
mod core;
mod custom;
mod networking;
mod policy;
mod rbac;
mod resource;
mod storage;

pub use self::core::pod_status;
pub use self::custom::{PrinterColumn, jsonpath};

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

const fn int(name: &'static str) -> Column {
    Column { name, kind: "integer", format: "", wide: false }
}

const fn boolean(name: &'static str) -> Column {
    Column { name, kind: "boolean", format: "", wide: false }
}

const fn wide(name: &'static str) -> Column {
    Column { name, kind: "string", format: "", wide: true }
}

const NAME: Column = Column { name: "Name", kind: "string", format: "name", wide: false };
const AGE: Column = col("Age");

type Row = fn(&Value, &str) -> Vec<Value>;

/// A kind's columns and how to fill a row (given the object and its age).
pub struct TableDef {
    pub columns: &'static [Column],
    pub row: Row,
}

/// What an area file answers for a kind it prints.
type Entry = (&'static [Column], Row);

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

/// A field as text ("" when absent), as Go prints a zero-valued string field.
fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A string field, or `placeholder` when absent or empty (upstream's "<none>", "<unset>"…).
fn or(v: Option<&Value>, placeholder: &str) -> String {
    let v = s(v);
    if v.is_empty() { placeholder.to_string() } else { v }
}

fn count(v: Option<&Value>) -> usize {
    v.and_then(Value::as_object).map_or(0, |m| m.len())
}

fn len(v: Option<&Value>) -> usize {
    v.and_then(Value::as_array).map_or(0, Vec::len)
}

fn items<'a>(o: &'a Value, p: &str) -> impl Iterator<Item = &'a Value> {
    o.pointer(p).and_then(Value::as_array).into_iter().flatten()
}

/// A bool field, or upstream's default for it when unset.
fn flag(o: &Value, p: &str, default: bool) -> Value {
    json!(o.pointer(p).and_then(Value::as_bool).unwrap_or(default))
}

fn default_row(obj: &Value, _age: &str) -> Vec<Value> {
    vec![json!(object::name(obj)), json!(object::meta_str(obj, "creationTimestamp").unwrap_or(""))]
}

fn containers_and_images(template_spec: Option<&Value>) -> (String, String) {
    let cs: Vec<&Value> =
        template_spec.and_then(|t| t.get("containers")).and_then(Value::as_array).into_iter().flatten().collect();
    let names = cs.iter().map(|c| s(c.get("name"))).collect::<Vec<_>>().join(",");
    let images = cs.iter().map(|c| s(c.get("image"))).collect::<Vec<_>>().join(",");
    (names, images)
}

fn n(o: &Value, p: &str) -> i64 {
    o.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

fn age_of(ts: Option<&Value>) -> Option<String> {
    let t = ts?.as_str()?.parse::<jiff::Timestamp>().ok()?;
    Some(human_duration((jiff::Timestamp::now() - t).get_seconds()))
}

/// labels.FormatLabels: "k=v,k2=v2" sorted by key, "<none>" when empty.
fn format_labels(m: Option<&Value>) -> String {
    let mut pairs: Vec<String> = m
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    if pairs.is_empty() { "<none>".into() } else { pairs.join(",") }
}

/// A LabelSelector as labels.Selector's String(): requirements sorted by key, set values
/// sorted ("a=b,env in (dev,prod),!legacy"); "" when it selects by nothing.
fn selector_string(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), format!("{k}={}", s(Some(v)))))
        .collect();
    for e in items(sel, "/matchExpressions") {
        let key = s(e.get("key"));
        let mut values: Vec<String> = items(e, "/values").map(|v| s(Some(v))).collect();
        values.sort();
        values.dedup();
        let req = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key, req));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter().map(|(_, r)| r).collect::<Vec<_>>().join(",")
}

/// metav1.FormatLabelSelector: the selector's string form, "<none>" when it selects by nothing.
fn format_selector(sel: Option<&Value>) -> String {
    let v = sel.filter(|v| v.is_object()).map(selector_string).unwrap_or_default();
    if v.is_empty() { "<none>".into() } else { v }
}

/// listWithMoreString: the first `max` entries, then " + N more..."; "<unset>" when empty.
fn list_with_more(list: &[String], max: usize) -> String {
    match list.len() {
        0 => "<unset>".into(),
        n if n > max => format!("{} + {} more...", list[..max].join(","), n - max),
        _ => list.join(","),
    }
}

/// A resource.Quantity as upstream prints it (its canonical form); raw text if unparsable.
fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(q @ (Value::String(_) | Value::Number(_))) => {
            crate::kinds::quantity::Quantity::from_json(q).map(|q| q.canonical()).unwrap_or_else(|_| s(Some(q)))
        }
        _ => String::new(),
    }
}

/// An intstr.IntOrString as upstream's String() prints it.
fn int_or_string(v: &Value) -> String {
    s(Some(v))
}

const DEFAULT_COLUMNS: &[Column] = &[NAME, Column { name: "Created At", kind: "date", format: "", wide: false }];

/// The table definition for a kind.
pub fn for_kind(group: &str, kind: &str) -> TableDef {
    let (columns, row) = core::lookup(group, kind)
        .or_else(|| apps::lookup(group, kind))
        .or_else(|| batch::lookup(group, kind))
        .or_else(|| networking::lookup(group, kind))
        .or_else(|| storage::lookup(group, kind))
        .or_else(|| rbac::lookup(group, kind))
        .or_else(|| policy::lookup(group, kind))
        .or_else(|| autoscaling::lookup(group, kind))
        .or_else(|| admission::lookup(group, kind))
        .or_else(|| cluster::lookup(group, kind))
        .or_else(|| resource::lookup(group, kind))
        .unwrap_or((DEFAULT_COLUMNS, default_row));
    TableDef { columns, row }
}

/// A Table of a resource's `objects`: the kind's own printer columns when its strategy
/// declares them (custom resources), else `table`'s.
pub fn table_of(
    r: &crate::resource::ResourceInfo,
    objects: &[Value],
    resource_version: Option<&str>,
    include: &str,
) -> Value {
    let Some(columns) = r.strategy.printer_columns() else {
        return table(&r.group, &r.kind, objects, resource_version, include);
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": custom::cells(columns, o)});
            if let Some(obj) = row_object(o, include) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = resource_version {
        meta["resourceVersion"] = json!(rv);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
        "columnDefinitions": custom::definitions(columns), "rows": rows})
}

/// What a row carries of its object: nothing, the object, or its metadata (default).
fn row_object(o: &Value, include: &str) -> Option<Value> {
    match include {
        "None" => None,
        "Object" => Some(o.clone()),
        _ => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
        })),
    }
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
            if (group, kind) == ("", "Pod")
                && let Some(conditions) = core::pod_row_conditions(o)
            {
                row["conditions"] = conditions;
            }
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
mod tests;
