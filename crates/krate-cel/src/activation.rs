//! The variables an expression is evaluated with, converted from JSON.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube_cel::cel::Value;
use kube_cel::cel::objects::{Key, Map};
use serde_json::Value as Json;

/// Variables by name, ready for evaluation. Also remembers the largest list, map and
/// string seen, which bound how often a comprehension can iterate (see `cost`).
#[derive(Clone, Default)]
pub struct Activation {
    pub(crate) vars: BTreeMap<String, Value>,
    pub(crate) sizes: Sizes,
}

#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Sizes {
    /// Elements of the largest list or map.
    pub collection: u64,
    /// Bytes of the longest string.
    pub string: u64,
}

impl Activation {
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `name` to a JSON value as upstream's unstructured conversion does:
    /// objects become maps keyed by their field names, integers `int`, other
    /// numbers `double`.
    pub fn insert(&mut self, name: &str, value: &Json) -> &mut Self {
        let v = convert(value, None, &mut self.sizes);
        self.vars.insert(name.to_string(), v);
        self
    }

    /// Builder form of [`Activation::insert`].
    pub fn with(mut self, name: &str, value: &Json) -> Self {
        self.insert(name, value);
        self
    }

    /// Binds `name` to a JSON value typed by a structural OpenAPI schema, as CRD
    /// validation rules see it: properties whose names are CEL keywords or hold
    /// `.`, `-`, `/` or `__` are escaped (`__namespace__`, `a__dot__b`), properties
    /// whose names cannot be escaped are left out, and strings of format `date-time`
    /// / `duration` become timestamps / durations.
    pub fn insert_with_schema(&mut self, name: &str, value: &Json, schema: &Json) -> &mut Self {
        let v = convert(value, Some(schema), &mut self.sizes);
        self.vars.insert(name.to_string(), v);
        self
    }

    /// Binds `name` to an already evaluated result (a composited variable).
    pub fn insert_output(&mut self, name: &str, value: &crate::Output) -> &mut Self {
        self.vars.insert(name.to_string(), value.0.clone());
        self
    }

    /// Binds `name` to a map of already evaluated results (the `variables` object of
    /// admission policies).
    pub fn insert_outputs(&mut self, name: &str, values: &BTreeMap<String, crate::Output>) -> &mut Self {
        let map: HashMap<Key, Value> =
            values.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), v.0.clone())).collect();
        self.vars.insert(name.to_string(), Value::Map(Map { map: Arc::new(map) }));
        self
    }

    pub fn contains(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }
}

/// Upstream's property-name escaping for CEL (apiserver's cel/escaping): `None` if
/// the name cannot be reached from CEL at all.
pub fn escape_property_name(name: &str) -> Option<String> {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let mut chars = name.chars();
    let first = chars.next()?;
    let ok_first = first.is_ascii_alphabetic() || matches!(first, '_' | '.' | '-' | '/');
    let ok_rest = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'));
    if !ok_first || !ok_rest {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = r;
            continue;
        }
        let c = rest.chars().next().unwrap_or_default();
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

fn string(s: &str) -> Value {
    Value::String(Arc::new(s.to_string()))
}

pub(crate) fn convert(value: &Json, schema: Option<&Json>, sizes: &mut Sizes) -> Value {
    match value {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => {
            sizes.string = sizes.string.max(s.len() as u64);
            let format = schema.and_then(|s| s.get("format")).and_then(Json::as_str);
            match format {
                Some("date-time") => match chrono_like::timestamp(s) {
                    Some(v) => v,
                    None => string(s),
                },
                Some("duration") => match chrono_like::duration(s) {
                    Some(v) => v,
                    None => string(s),
                },
                _ => string(s),
            }
        }
        Json::Array(items) => {
            sizes.collection = sizes.collection.max(items.len() as u64);
            let item_schema = schema.and_then(|s| s.get("items"));
            Value::List(Arc::new(items.iter().map(|i| convert(i, item_schema, sizes)).collect()))
        }
        Json::Object(fields) => {
            sizes.collection = sizes.collection.max(fields.len() as u64);
            let properties = schema.and_then(|s| s.get("properties")).and_then(Json::as_object);
            let additional = schema.and_then(|s| s.get("additionalProperties")).filter(|a| a.is_object());
            let mut map = HashMap::with_capacity(fields.len());
            for (k, v) in fields {
                sizes.string = sizes.string.max(k.len() as u64);
                let (key, sub) = match (properties, additional) {
                    // A map (additionalProperties): keys are data, not field names.
                    (_, Some(add)) => (Some(k.clone()), Some(add)),
                    (Some(props), None) => (escape_property_name(k), props.get(k)),
                    (None, None) if schema.is_some() => (escape_property_name(k), None),
                    (None, None) => (Some(k.clone()), None),
                };
                if let Some(key) = key {
                    map.insert(Key::String(Arc::new(key)), convert(v, sub, sizes));
                }
            }
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// Timestamps and durations through the CEL library's own parsers, so their values
/// compare with `timestamp('...')` and `duration('...')` in expressions.
mod chrono_like {
    use kube_cel::cel::{Context, Value};

    fn call(function: &str, arg: &str) -> Option<Value> {
        let mut ctx = Context::default();
        ctx.add_variable_from_value("s", arg.to_string());
        let program = kube_cel::cel::Program::compile(&format!("{function}(s)")).ok()?;
        program.execute(&ctx).ok()
    }

    pub fn timestamp(s: &str) -> Option<Value> {
        call("timestamp", s)
    }

    pub fn duration(s: &str) -> Option<Value> {
        call("duration", s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_upstream() {
        assert_eq!(escape_property_name("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape_property_name("foo-bar").as_deref(), Some("foo__dash__bar"));
        assert_eq!(escape_property_name("a.b").as_deref(), Some("a__dot__b"));
        assert_eq!(escape_property_name("x/y").as_deref(), Some("x__slash__y"));
        assert_eq!(escape_property_name("my__field").as_deref(), Some("my__underscores__field"));
        assert_eq!(escape_property_name("plain").as_deref(), Some("plain"));
        assert_eq!(escape_property_name("1abc"), None);
        assert_eq!(escape_property_name("a b"), None);
    }
}
