//! JSON objects ⇄ protobuf messages, field by field, from the generated facts.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Number, Value};

use super::table::{Message, Ty};
use super::wire::{self, LEN, Value as W, WireError, Writer, err};
use crate::generated::protobuf::MESSAGES;

/// Deepest message nesting a decoded body may have (recursive schemas, raw extensions).
const MAX_DEPTH: usize = 100;

pub fn message(i: u16) -> &'static Message {
    &MESSAGES[i as usize]
}

// ---------------------------------------------------------------- JSON → protobuf

/// Encodes a JSON object as message `m`. JSON fields the message has no number for
/// (apiVersion and kind, which travel in the envelope) are not written.
pub fn encode_message(m: &Message, obj: &Map<String, Value>, w: &mut Writer) -> Result<(), WireError> {
    for f in m.fields {
        if let Ty::Inline(i) = f.ty {
            let mut sub = Writer::default();
            encode_message(message(i), obj, &mut sub)?;
            w.bytes_field(f.tag, &sub.buf);
            continue;
        }
        let Some(v) = obj.get(f.json).filter(|v| !v.is_null()) else { continue };
        if f.repeated {
            let Some(items) = v.as_array() else { return err(format!("{}: {} must be a list", m.name, f.json)) };
            for item in items {
                encode_value(f.ty, f.tag, item, w).map_err(|e| context(m, f.json, e))?;
            }
        } else {
            encode_value(f.ty, f.tag, v, w).map_err(|e| context(m, f.json, e))?;
        }
    }
    Ok(())
}

fn context(m: &Message, field: &str, e: WireError) -> WireError {
    let short = m.name.rsplit('.').next().unwrap_or(m.name);
    if e.0.starts_with(short) { e } else { WireError(format!("{short}.{field}: {}", e.0)) }
}

fn nested(tag: u32, w: &mut Writer, f: impl FnOnce(&mut Writer) -> Result<(), WireError>) -> Result<(), WireError> {
    let mut sub = Writer::default();
    f(&mut sub)?;
    w.bytes_field(tag, &sub.buf);
    Ok(())
}

fn int_of(v: &Value) -> Result<i64, WireError> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18).map(|f| f as i64))
            .map_or_else(|| err(format!("{n} is not an integer")), Ok),
        other => err(format!("expected an integer, got {other}")),
    }
}

fn encode_value(ty: Ty, tag: u32, v: &Value, w: &mut Writer) -> Result<(), WireError> {
    match ty {
        Ty::Str => match v {
            Value::String(s) => w.bytes_field(tag, s.as_bytes()),
            Value::Number(_) | Value::Bool(_) => w.bytes_field(tag, v.to_string().as_bytes()),
            other => return err(format!("expected a string, got {other}")),
        },
        Ty::I32 => w.varint_field(tag, int_of(v)? as i32 as i64 as u64),
        Ty::I64 => w.varint_field(tag, int_of(v)? as u64),
        Ty::Bool => match v {
            Value::Bool(b) => w.varint_field(tag, *b as u64),
            other => return err(format!("expected a boolean, got {other}")),
        },
        Ty::F64 => match v.as_f64() {
            Some(f) => w.double_field(tag, f),
            None => return err(format!("expected a number, got {v}")),
        },
        Ty::Bytes => {
            let Some(s) = v.as_str() else { return err(format!("expected a base64 string, got {v}")) };
            let b = STANDARD.decode(s).map_err(|e| WireError(format!("invalid base64 data: {e}")))?;
            w.bytes_field(tag, &b);
        }
        Ty::Msg(i) | Ty::Wrapped(i) if message(i).wrap => {
            nested(tag, w, |sub| encode_message(message(i), &wrap_list(message(i), v)?, sub))?
        }
        Ty::Msg(i) => match v {
            Value::Object(o) => nested(tag, w, |sub| encode_message(message(i), o, sub))?,
            other => return err(format!("expected an object, got {other}")),
        },
        Ty::Wrapped(i) => nested(tag, w, |sub| encode_message(message(i), &wrap_list(message(i), v)?, sub))?,
        Ty::Inline(_) => return err("an inline message has no value of its own"),
        Ty::Map(vt) => {
            let Some(o) = v.as_object() else { return err(format!("expected a map, got {v}")) };
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort(); // Go writes map entries in key order
            for k in keys {
                nested(tag, w, |e| {
                    e.bytes_field(1, k.as_bytes());
                    match &o[k.as_str()] {
                        Value::Null => Ok(()),
                        val => encode_value(*vt, 2, val, e).map_err(|x| WireError(format!("[{k}]: {}", x.0))),
                    }
                })?;
            }
        }
        Ty::Time | Ty::MicroTime => {
            let Some(s) = v.as_str() else { return err(format!("expected a time string, got {v}")) };
            let t: jiff::Timestamp = s.parse().map_err(|e| WireError(format!("invalid time {s:?}: {e}")))?;
            nested(tag, w, |sub| {
                sub.varint_field(1, t.as_second() as u64);
                sub.varint_field(2, t.subsec_nanosecond() as i64 as u64);
                Ok(())
            })?;
        }
        Ty::Duration => {
            let Some(s) = v.as_str() else { return err(format!("expected a duration string, got {v}")) };
            let n = parse_go_duration(s)?;
            nested(tag, w, |sub| {
                sub.varint_field(1, n as u64);
                Ok(())
            })?;
        }
        Ty::Quantity => {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => return err(format!("expected a quantity, got {other}")),
            };
            nested(tag, w, |sub| {
                sub.bytes_field(1, s.as_bytes());
                Ok(())
            })?;
        }
        Ty::IntOrString => nested(tag, w, |sub| {
            match v {
                Value::String(s) => {
                    sub.varint_field(1, 1);
                    sub.varint_field(2, 0);
                    sub.bytes_field(3, s.as_bytes());
                }
                other => {
                    sub.varint_field(1, 0);
                    sub.varint_field(2, int_of(other)? as i32 as i64 as u64);
                    sub.bytes_field(3, b"");
                }
            }
            Ok(())
        })?,
        Ty::RawJson => nested(tag, w, |sub| {
            sub.bytes_field(1, &serde_json::to_vec(v).unwrap_or_default());
            Ok(())
        })?,
        Ty::SchemaOrArray(i) => nested(tag, w, |sub| match v {
            Value::Object(o) => nested(1, sub, |s| encode_message(message(i), o, s)),
            Value::Array(items) => {
                for item in items {
                    let Some(o) = item.as_object() else { return err("expected a list of schemas") };
                    nested(2, sub, |s| encode_message(message(i), o, s))?;
                }
                Ok(())
            }
            other => err(format!("expected a schema or a list of schemas, got {other}")),
        })?,
        Ty::SchemaOrBool(i) => nested(tag, w, |sub| match v {
            Value::Bool(b) => {
                sub.varint_field(1, *b as u64);
                Ok(())
            }
            Value::Object(o) => {
                sub.varint_field(1, 1);
                nested(2, sub, |s| encode_message(message(i), o, s))
            }
            other => err(format!("expected a schema or a boolean, got {other}")),
        })?,
        Ty::SchemaOrStringArray(i) => nested(tag, w, |sub| match v {
            Value::Object(o) => nested(1, sub, |s| encode_message(message(i), o, s)),
            Value::Array(items) => {
                for item in items {
                    let Some(s) = item.as_str() else { return err("expected a list of strings") };
                    sub.bytes_field(2, s.as_bytes());
                }
                Ok(())
            }
            other => err(format!("expected a schema or a list of strings, got {other}")),
        })?,
    }
    Ok(())
}

/// A wrapper message's one list field, from the JSON list.
fn wrap_list(m: &Message, v: &Value) -> Result<Map<String, Value>, WireError> {
    if !v.is_array() {
        return err(format!("expected a list, got {v}"));
    }
    let mut o = Map::new();
    if let Some(f) = m.fields.first() {
        o.insert(f.json.to_string(), v.clone());
    }
    Ok(o)
}

// ---------------------------------------------------------------- protobuf → JSON

/// Decodes message `m` into a JSON object. Zero-valued scalars of fields that Go marks
/// omitempty are dropped (see `Field::keep_zero`); unknown field numbers are skipped.
pub fn decode_message(m: &Message, data: &[u8], depth: usize) -> Result<Map<String, Value>, WireError> {
    let mut out = Map::new();
    decode_into(m, data, depth, &mut out)?;
    Ok(out)
}

fn decode_into(m: &Message, data: &[u8], depth: usize, out: &mut Map<String, Value>) -> Result<(), WireError> {
    if depth > MAX_DEPTH {
        return err("the object is nested too deeply");
    }
    let short = m.name.rsplit('.').next().unwrap_or(m.name);
    for (tag, v) in wire::fields(data)? {
        let Some(f) = m.fields.iter().find(|f| f.tag == tag) else { continue };
        let ctx = |e: WireError| {
            if e.0.contains(": ") { e } else { WireError(format!("{short}.{}: {}", f.json, e.0)) }
        };
        match f.ty {
            Ty::Inline(i) => {
                decode_into(message(i), len(v).map_err(ctx)?, depth + 1, out)?;
            }
            Ty::Map(vt) => {
                let entry = len(v).map_err(ctx)?;
                let (mut key, mut val) = (String::new(), None);
                for (t, ev) in wire::fields(entry).map_err(ctx)? {
                    match t {
                        1 => key = string(ev).map_err(ctx)?,
                        2 => val = decode_value(*vt, ev, depth + 1).map_err(ctx)?,
                        _ => {}
                    }
                }
                let val = val.unwrap_or_else(|| zero_of(*vt));
                let map = out.entry(f.json).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(o) = map {
                    o.insert(key, val);
                }
            }
            ty if f.repeated => {
                let mut items = Vec::new();
                match (ty, v) {
                    // Packed numbers: one length-delimited run of values.
                    (Ty::I32 | Ty::I64 | Ty::Bool, W::Len(run)) => {
                        let mut rd = wire::Reader::new(run);
                        while !rd.at_end() {
                            items.push(scalar_varint(ty, rd.varint().map_err(ctx)?));
                        }
                    }
                    (Ty::F64, W::Len(run)) => {
                        if run.len() % 8 != 0 {
                            return Err(ctx(WireError("truncated packed doubles".into())));
                        }
                        for c in run.chunks_exact(8) {
                            let b: [u8; 8] = c.try_into().unwrap_or([0; 8]);
                            items.push(double(f64::from_le_bytes(b)).map_err(ctx)?);
                        }
                    }
                    _ => items.extend(decode_value(ty, v, depth + 1).map_err(ctx)?),
                }
                let list = out.entry(f.json).or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = list {
                    a.extend(items);
                }
            }
            ty => match decode_value(ty, v, depth + 1).map_err(ctx)? {
                Some(val) => {
                    out.insert(f.json.to_string(), val);
                }
                None => {
                    out.remove(f.json);
                }
            },
        }
    }
    for f in m.fields {
        if f.keep_zero || f.repeated || matches!(f.ty, Ty::Map(_)) {
            continue;
        }
        let zero = match (f.ty, out.get(f.json)) {
            (Ty::Str | Ty::Bytes, Some(Value::String(s))) => s.is_empty(),
            (Ty::I32 | Ty::I64 | Ty::F64, Some(Value::Number(n))) => n.as_f64() == Some(0.0),
            (Ty::Bool, Some(Value::Bool(b))) => !b,
            (Ty::IntOrString, Some(Value::Number(n))) => n.as_i64() == Some(0),
            (Ty::IntOrString, Some(Value::String(s))) => s.is_empty(),
            _ => false,
        };
        if zero {
            out.remove(f.json);
        }
    }
    Ok(())
}

fn len(v: W<'_>) -> Result<&[u8], WireError> {
    match v {
        W::Len(b) => Ok(b),
        _ => err(format!("wire type {} where a length-delimited field was expected", wire_type(v))),
    }
}

fn varint(v: W<'_>) -> Result<u64, WireError> {
    match v {
        W::Varint(n) => Ok(n),
        _ => err(format!("wire type {} where a varint was expected", wire_type(v))),
    }
}

fn wire_type(v: W<'_>) -> u8 {
    match v {
        W::Varint(_) => wire::VARINT,
        W::Fixed64(_) => wire::FIXED64,
        W::Len(_) => LEN,
        W::Fixed32(_) => wire::FIXED32,
    }
}

fn string(v: W<'_>) -> Result<String, WireError> {
    Ok(String::from_utf8_lossy(len(v)?).into_owned())
}

fn double(f: f64) -> Result<Value, WireError> {
    Number::from_f64(f).map(Value::Number).map_or_else(|| err(format!("{f} cannot be represented in JSON")), Ok)
}

fn scalar_varint(ty: Ty, n: u64) -> Value {
    match ty {
        Ty::I32 => Value::from(n as i32),
        Ty::Bool => Value::Bool(n != 0),
        _ => Value::from(n as i64),
    }
}

/// The JSON of a map value that the entry leaves out (Go's zero value).
fn zero_of(ty: Ty) -> Value {
    match ty {
        Ty::Str | Ty::Bytes => Value::String(String::new()),
        Ty::I32 | Ty::I64 | Ty::F64 => Value::from(0),
        Ty::Bool => Value::Bool(false),
        Ty::Quantity => Value::String("0".into()),
        Ty::Msg(i) | Ty::Wrapped(i) if message(i).wrap => Value::Array(Vec::new()),
        Ty::Wrapped(_) => Value::Array(Vec::new()),
        _ => Value::Object(Map::new()),
    }
}

/// One value; None when it stands for JSON null (a zero Time, an empty raw extension).
fn decode_value(ty: Ty, v: W<'_>, depth: usize) -> Result<Option<Value>, WireError> {
    if depth > MAX_DEPTH {
        return err("the object is nested too deeply");
    }
    Ok(Some(match ty {
        Ty::Str => Value::String(string(v)?),
        Ty::I32 | Ty::I64 | Ty::Bool => scalar_varint(ty, varint(v)?),
        Ty::F64 => match v {
            W::Fixed64(b) => double(f64::from_bits(b))?,
            _ => return err("a double must be a fixed64 field"),
        },
        Ty::Bytes => Value::String(STANDARD.encode(len(v)?)),
        Ty::Msg(i) | Ty::Wrapped(i) if message(i).wrap => unwrap_list(message(i), len(v)?, depth)?,
        Ty::Msg(i) => Value::Object(decode_message(message(i), len(v)?, depth + 1)?),
        Ty::Wrapped(i) => unwrap_list(message(i), len(v)?, depth)?,
        Ty::Inline(_) | Ty::Map(_) => return err("unexpected nested map or inline message"),
        Ty::Time | Ty::MicroTime => {
            let b = len(v)?;
            if b.is_empty() {
                return Ok(None); // Go writes a zero Time as an empty message: null
            }
            let (mut secs, mut nanos) = (0i64, 0i64);
            for (t, fv) in wire::fields(b)? {
                match t {
                    1 => secs = varint(fv)? as i64,
                    2 => nanos = varint(fv)? as i32 as i64,
                    _ => {}
                }
            }
            Value::String(format_time(secs, nanos, matches!(ty, Ty::MicroTime))?)
        }
        Ty::Duration => {
            let mut n = 0i64;
            for (t, fv) in wire::fields(len(v)?)? {
                if t == 1 {
                    n = varint(fv)? as i64;
                }
            }
            Value::String(format_go_duration(n))
        }
        Ty::Quantity => {
            let mut s = "0".to_string();
            for (t, fv) in wire::fields(len(v)?)? {
                if t == 1 {
                    s = string(fv)?;
                }
            }
            Value::String(s)
        }
        Ty::IntOrString => {
            let (mut kind, mut i, mut s) = (0u64, 0i64, String::new());
            for (t, fv) in wire::fields(len(v)?)? {
                match t {
                    1 => kind = varint(fv)?,
                    2 => i = varint(fv)? as i32 as i64,
                    3 => s = string(fv)?,
                    _ => {}
                }
            }
            if kind == 1 { Value::String(s) } else { Value::from(i) }
        }
        Ty::RawJson => {
            let mut raw: &[u8] = &[];
            for (t, fv) in wire::fields(len(v)?)? {
                if t == 1 {
                    raw = len(fv)?;
                }
            }
            if raw.is_empty() {
                return Ok(None);
            }
            if raw.starts_with(super::MAGIC) {
                super::decode_envelope(raw, depth + 1)?
            } else {
                serde_json::from_slice(raw).map_err(|e| WireError(format!("raw JSON does not parse: {e}")))?
            }
        }
        Ty::SchemaOrArray(i) => {
            let (mut schema, mut list) = (None, Vec::new());
            for (t, fv) in wire::fields(len(v)?)? {
                match t {
                    1 => schema = Some(Value::Object(decode_message(message(i), len(fv)?, depth + 1)?)),
                    2 => list.push(Value::Object(decode_message(message(i), len(fv)?, depth + 1)?)),
                    _ => {}
                }
            }
            match schema {
                Some(s) => s,
                None if !list.is_empty() => Value::Array(list),
                None => return Ok(None),
            }
        }
        Ty::SchemaOrBool(i) => {
            let (mut allows, mut schema) = (false, None);
            for (t, fv) in wire::fields(len(v)?)? {
                match t {
                    1 => allows = varint(fv)? != 0,
                    2 => schema = Some(Value::Object(decode_message(message(i), len(fv)?, depth + 1)?)),
                    _ => {}
                }
            }
            schema.unwrap_or(Value::Bool(allows))
        }
        Ty::SchemaOrStringArray(i) => {
            let (mut schema, mut list) = (None, Vec::new());
            for (t, fv) in wire::fields(len(v)?)? {
                match t {
                    1 => schema = Some(Value::Object(decode_message(message(i), len(fv)?, depth + 1)?)),
                    2 => list.push(Value::String(string(fv)?)),
                    _ => {}
                }
            }
            schema.unwrap_or(Value::Array(list))
        }
    }))
}

fn unwrap_list(m: &Message, data: &[u8], depth: usize) -> Result<Value, WireError> {
    let mut o = decode_message(m, data, depth + 1)?;
    Ok(m.fields.first().and_then(|f| o.remove(f.json)).unwrap_or(Value::Array(Vec::new())))
}

/// metav1.Time as JSON: RFC 3339 in UTC to the second (Go's decoding drops the nanoseconds);
/// MicroTime to the microsecond.
fn format_time(secs: i64, nanos: i64, micro: bool) -> Result<String, WireError> {
    let nanos = if micro { nanos.clamp(0, 999_999_999) } else { 0 };
    let t = jiff::Timestamp::new(secs, nanos as i32).map_err(|e| WireError(format!("invalid time: {e}")))?;
    let base = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    Ok(if micro { format!("{base}.{:06}Z", nanos / 1000) } else { format!("{base}Z") })
}

/// Go's time.Duration.String().
pub fn format_go_duration(n: i64) -> String {
    if n == 0 {
        return "0s".into();
    }
    let sign = if n < 0 { "-" } else { "" };
    let u = n.unsigned_abs();
    let frac = |v: u64, div: u64, width: usize| {
        let (int, f) = (v / div, v % div);
        if f == 0 { int.to_string() } else { format!("{int}.{}", format!("{f:0width$}").trim_end_matches('0')) }
    };
    let body = if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 1_000, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 1_000_000, 6))
    } else {
        let (h, rem) = (u / 3_600_000_000_000, u % 3_600_000_000_000);
        let (m, s) = (rem / 60_000_000_000, rem % 60_000_000_000);
        let mut out = String::new();
        if h > 0 {
            out.push_str(&format!("{h}h"));
        }
        if h > 0 || m > 0 {
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{}s", frac(s, 1_000_000_000, 9)));
        out
    };
    format!("{sign}{body}")
}

/// Go's time.ParseDuration, in nanoseconds.
pub fn parse_go_duration(s: &str) -> Result<i64, WireError> {
    let bad = || WireError(format!("invalid duration {s:?}"));
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let num: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += num * scale;
        rest = &rest[unit_end..];
    }
    if total > i64::MAX as f64 {
        return Err(bad());
    }
    Ok(if neg { -(total.round() as i64) } else { total.round() as i64 })
}
