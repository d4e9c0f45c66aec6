//! Defaulting and validation of the built-in kinds, as upstream's scheme defaults
//! (`pkg/apis/*/v1/defaults.go`) and validation (`pkg/apis/*/validation`) do them.
//!
//! Objects are the JSON of the request's version. Each module offers `default_*`
//! functions (what upstream's decoding applies to every create and update body),
//! `validate_*` functions (one [`Cause`] per offending field, with upstream's field
//! paths and messages) and `validate_*_update` functions (immutability). The
//! strategies in [`crate::strategy`] call them.
//!
//! Where upstream prints a Go value in a message (`%#v` of a map, a selector, an
//! IntOrString) the value is rendered the same way; structs too large to render
//! faithfully print as `type{...}`.

pub mod apiextensions;
pub mod apps;
pub mod batch;
pub mod certificates;
pub mod config;
pub mod misc;
pub mod networking;
pub mod placement;
pub mod pod;
pub mod policy;
pub mod quantity;
pub mod rbac;
pub mod storage;
pub mod warnings;
pub mod webhooks;

use serde_json::{Map, Value, json};

/// The object at `key`, created (or replaced, if not an object) when missing.
pub(crate) fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    if !v.is_object() {
        *v = json!({});
    }
    let m = v.as_object_mut().expect("an object");
    let slot = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot
}

/// Sets `key` to `value` when it is absent or null (`v` must be an object).
pub(crate) fn set_default(v: &mut Value, key: &str, value: Value) {
    if let Some(m) = v.as_object_mut() {
        match m.get(key) {
            None | Some(Value::Null) => {
                m.insert(key.to_string(), value);
            }
            Some(_) => {}
        }
    }
}

/// Sets `key` to `value` when it is absent, null or the empty string.
pub(crate) fn set_default_str(v: &mut Value, key: &str, value: &str) {
    if let Some(m) = v.as_object_mut()
        && m.get(key).and_then(Value::as_str).is_none_or(str::is_empty)
    {
        m.insert(key.to_string(), Value::String(value.to_string()));
    }
}

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn int_of(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

pub(crate) fn array_of<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// Whether `key` is present with a non-null value.
pub(crate) fn has(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(|x| !x.is_null())
}

/// Mutable access to the elements of the array at `key`, if any.
pub(crate) fn each_mut<'a>(v: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten()
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn normalize(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter_map(|(k, v)| {
                    let n = normalize(v);
                    (!is_empty_value(&n)).then(|| (k.clone(), n))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

/// Upstream's semantic equality, for JSON: null, empty maps and empty lists are the
/// same as absent (Go's nil and empty maps and slices compare equal).
pub(crate) fn semantic_eq(a: &Value, b: &Value) -> bool {
    let top = |v: &Value| {
        let n = normalize(v);
        if is_empty_value(&n) { Value::Null } else { n }
    };
    top(a) == top(b)
}

/// `%#v` of a `map[string]string`: `map[string]string{"a":"b", "c":"d"}`, or
/// `map[string]string(nil)` when absent.
pub(crate) fn go_string_map(m: Option<&Map<String, Value>>) -> String {
    match m {
        None => "map[string]string(nil)".into(),
        Some(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        crate::validation::go_quote(k),
                        crate::validation::go_quote(v.as_str().unwrap_or(""))
                    )
                })
                .collect();
            format!("map[string]string{{{}}}", items.join(", "))
        }
    }
}

/// `%#v` of a `[]string`.
pub(crate) fn go_string_slice(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => "[]string(nil)".into(),
        Some(a) => {
            let items: Vec<String> = a.iter().map(|s| crate::validation::go_quote(s.as_str().unwrap_or(""))).collect();
            format!("[]string{{{}}}", items.join(", "))
        }
    }
}

/// `%#v` of a `metav1.LabelSelector` (as upstream prints selectors in messages).
pub(crate) fn go_label_selector(sel: &Value) -> String {
    let labels = go_string_map(sel.get("matchLabels").and_then(Value::as_object));
    let exprs = match sel.get("matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
        Some(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|e| {
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        crate::validation::go_quote(str_of(e, "key")),
                        crate::validation::go_quote(str_of(e, "operator")),
                        go_string_slice(e.get("values")),
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{exprs}}}")
}

/// `%#v` of an `intstr.IntOrString`.
pub(crate) fn go_int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => {
            format!("intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}", crate::validation::go_quote(s))
        }
        other => format!("intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}", other.as_i64().unwrap_or(0)),
    }
}

/// The value of an IntOrString that is an integer or a valid percentage, as upstream's
/// `getIntOrPercentValue` reads it (0 when neither).
pub(crate) fn int_or_percent_value(v: &Value) -> i64 {
    match v {
        Value::String(s) => s
            .strip_suffix('%')
            .filter(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        other => other.as_i64().unwrap_or(0),
    }
}

/// Upstream's `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent` for an
/// IntOrString at `field`.
pub(crate) fn validate_int_or_percent(v: &Value, field: &str, not_over_100: bool) -> Vec<crate::error::Cause> {
    use crate::validation::{invalid_raw, nonnegative, percent_errors};
    let mut causes = Vec::new();
    match v {
        Value::String(s) => {
            for msg in percent_errors(s) {
                causes.push(invalid_raw(field, go_int_or_string(v), msg));
            }
            if not_over_100 && percent_errors(s).is_empty() && int_or_percent_value(v) > 100 {
                causes.push(invalid_raw(field, go_int_or_string(v), "must not be greater than 100%"));
            }
        }
        Value::Number(_) => causes.extend(nonnegative(field, v.as_i64().unwrap_or(0))),
        _ => causes.push(invalid_raw(field, go_int_or_string(v), "must be an integer or percentage (e.g '5%%')")),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_renderings_match_upstream() {
        let labels = json!({"b": "2", "a": "1"});
        assert_eq!(go_string_map(labels.as_object()), r#"map[string]string{"a":"1", "b":"2"}"#);
        assert_eq!(go_string_map(None), "map[string]string(nil)");
        let sel = json!({"matchLabels": {"app": "web"}});
        assert_eq!(
            go_label_selector(&sel),
            r#"v1.LabelSelector{MatchLabels:map[string]string{"app":"web"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"#
        );
        assert_eq!(go_int_or_string(&json!("25%")), r#"intstr.IntOrString{Type:1, IntVal:0, StrVal:"25%"}"#);
        assert_eq!(go_int_or_string(&json!(0)), r#"intstr.IntOrString{Type:0, IntVal:0, StrVal:""}"#);
    }

    #[test]
    fn int_or_percent() {
        assert_eq!(int_or_percent_value(&json!("25%")), 25);
        assert_eq!(int_or_percent_value(&json!(3)), 3);
        assert!(validate_int_or_percent(&json!("150%"), "x", true)[0].message.contains("greater than 100%"));
        assert!(validate_int_or_percent(&json!(-1), "x", true)[0].message.contains("greater than or equal to 0"));
        assert!(validate_int_or_percent(&json!("a%"), "x", true)[0].message.contains("valid percent"));
        let mut v = json!({});
        set_default(&mut v, "a", json!(1));
        set_default(&mut v, "a", json!(2));
        assert_eq!(v["a"], 1);
    }
}
