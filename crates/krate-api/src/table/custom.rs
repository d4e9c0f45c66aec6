//! Tables of custom resources: Name, then the version's additionalPrinterColumns (or
//! Age), with cells read through each column's JSONPath, as upstream's CRD table
//! convertor does.

use serde_json::{Value, json};

use crate::object;

/// One additionalPrinterColumns entry.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// integer, number, string, boolean or date.
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

impl PrinterColumn {
    /// Reads an additionalPrinterColumns item.
    pub fn parse(v: &Value) -> PrinterColumn {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        PrinterColumn {
            name: s("name"),
            kind: s("type"),
            format: s("format"),
            description: s("description"),
            priority: v.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: s("jsonPath"),
        }
    }

    /// Upstream's default when a version declares none: the creation timestamp as Age.
    pub fn age() -> PrinterColumn {
        PrinterColumn {
            name: "Age".into(),
            kind: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }
    }
}

/// Column definitions: Name first, as upstream.
pub fn definitions(columns: &[PrinterColumn]) -> Vec<Value> {
    let mut out = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0})];
    out.extend(columns.iter().map(|c| {
        json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority})
    }));
    out
}

/// A row's cells: the name, then each column's value (null when the path finds nothing;
/// dates as their age).
pub fn cells(columns: &[PrinterColumn], obj: &Value) -> Vec<Value> {
    let mut out = vec![json!(object::name(obj))];
    for c in columns {
        let found = jsonpath(obj, &c.json_path);
        let cell = match (found, c.kind.as_str()) {
            (None, _) => Value::Null,
            (Some(Value::String(t)), "date") => match t.parse::<jiff::Timestamp>() {
                Ok(ts) => json!(super::human_duration((jiff::Timestamp::now() - ts).get_seconds())),
                Err(_) => json!(t),
            },
            (Some(v @ (Value::Array(_) | Value::Object(_))), _) => json!(v.to_string()),
            (Some(v), _) => v,
        };
        out.push(cell);
    }
    out
}

/// The value at a simple JSONPath: `.a.b`, `.a[0].b`, `.a[?(@.type=="Ready")].status`.
/// Several matches print space-separated, as kubectl's JSONPath does.
pub fn jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    let mut current: Vec<&Value> = vec![obj];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            current = current.into_iter().filter_map(|v| v.get(key)).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let sel = &r[..end];
            rest = &r[end + 1..];
            if sel == "*" {
                current = current.into_iter().filter_map(Value::as_array).flatten().collect();
            } else if let Ok(i) = sel.parse::<usize>() {
                current = current.into_iter().filter_map(|v| v.get(i)).collect();
            } else if let Some(filter) = sel.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                let field = field.trim();
                current = current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| {
                        item.get(field).is_some_and(|v| match v {
                            Value::String(s) => s == want,
                            other => serde_json::from_str::<Value>(want).ok().as_ref() == Some(other),
                        })
                    })
                    .collect();
            } else {
                return None;
            }
        } else {
            return None;
        }
    }
    match current.as_slice() {
        [] => None,
        [one] => Some((*one).clone()),
        many => Some(json!(
            many.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), String::from)).collect::<Vec<_>>().join(" ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpaths_find_fields_indexes_and_filters() {
        let obj = json!({"spec": {"replicas": 3, "list": [{"a": 1}, {"a": 2}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Other", "status": "False"}]}});
        assert_eq!(jsonpath(&obj, ".spec.replicas"), Some(json!(3)));
        assert_eq!(jsonpath(&obj, ".spec.list[1].a"), Some(json!(2)));
        assert_eq!(jsonpath(&obj, ".status.conditions[?(@.type==\"Ready\")].status"), Some(json!("True")));
        assert_eq!(jsonpath(&obj, ".spec.missing"), None);
    }

    #[test]
    fn cells_follow_columns() {
        let cols =
            vec![PrinterColumn::parse(&json!({"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}))];
        let obj = json!({"metadata": {"name": "w"}, "spec": {"replicas": 2}});
        assert_eq!(cells(&cols, &obj), vec![json!("w"), json!(2)]);
        assert_eq!(definitions(&cols)[1]["name"], "Replicas");
    }
}
