//! An evaluation's result, without exposing the interpreter's value type.

use kube_cel::cel::Value;
use serde_json::Value as Json;

/// The CEL type of a result, named as upstream names them in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    List,
    Map,
    Null,
    Duration,
    Timestamp,
    Optional,
    Other,
}

impl ValueKind {
    /// Upstream's type names (`bool`, `string`, `list`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Bool => "bool",
            ValueKind::Int => "int",
            ValueKind::Uint => "uint",
            ValueKind::Double => "double",
            ValueKind::String => "string",
            ValueKind::Bytes => "bytes",
            ValueKind::List => "list",
            ValueKind::Map => "map",
            ValueKind::Null => "null_type",
            ValueKind::Duration => "google.protobuf.Duration",
            ValueKind::Timestamp => "google.protobuf.Timestamp",
            ValueKind::Optional => "optional_type",
            ValueKind::Other => "dyn",
        }
    }
}

impl std::fmt::Display for ValueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The value an expression evaluated to.
#[derive(Clone, Debug)]
pub struct Output(pub(crate) Value);

impl Output {
    pub fn kind(&self) -> ValueKind {
        match &self.0 {
            Value::Bool(_) => ValueKind::Bool,
            Value::Int(_) => ValueKind::Int,
            Value::UInt(_) => ValueKind::Uint,
            Value::Float(_) => ValueKind::Double,
            Value::String(_) => ValueKind::String,
            Value::Bytes(_) => ValueKind::Bytes,
            Value::List(_) => ValueKind::List,
            Value::Map(_) => ValueKind::Map,
            Value::Null => ValueKind::Null,
            Value::Duration(_) => ValueKind::Duration,
            Value::Timestamp(_) => ValueKind::Timestamp,
            Value::Opaque(o) if o.runtime_type_name() == "optional_type" => ValueKind::Optional,
            _ => ValueKind::Other,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match &self.0 {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.0 {
            Value::String(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// The result as JSON, for results that have a JSON form (timestamps and
    /// durations become their string forms, bytes base64-less lists of numbers are
    /// not produced: bytes and opaque values give `None`).
    pub fn to_json(&self) -> Option<Json> {
        to_json(&self.0)
    }
}

fn to_json(v: &Value) -> Option<Json> {
    Some(match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::UInt(u) => Json::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f).map(Json::Number)?,
        Value::String(s) => Json::String(s.to_string()),
        Value::List(items) => Json::Array(items.iter().map(to_json).collect::<Option<Vec<_>>>()?),
        Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let key = match k {
                    kube_cel::cel::objects::Key::String(s) => s.to_string(),
                    kube_cel::cel::objects::Key::Int(i) => i.to_string(),
                    kube_cel::cel::objects::Key::Uint(u) => u.to_string(),
                    kube_cel::cel::objects::Key::Bool(b) => b.to_string(),
                };
                out.insert(key, to_json(v)?);
            }
            Json::Object(out)
        }
        Value::Timestamp(t) => Json::String(t.to_rfc3339()),
        Value::Duration(d) => Json::String(format!("{}s", d.num_milliseconds() as f64 / 1000.0)),
        _ => return None,
    })
}
