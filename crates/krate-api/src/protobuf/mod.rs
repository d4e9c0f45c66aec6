//! `application/vnd.kubernetes.protobuf` for built-in kinds: a transcoder between the
//! JSON objects the registry works on and upstream's protobuf wire format, from facts
//! generated out of upstream's generated.proto (`generated::protobuf`,
//! hack/gen-protobuf-facts.py).
//!
//! - An object is the 4-byte magic `k8s\0` and a `runtime.Unknown` message: typeMeta = 1
//!   {apiVersion = 1, kind = 2}, raw = 2 (the object's own message), contentEncoding = 3,
//!   contentType = 4 (upstream's `protobuf.Serializer`).
//! - A watch stream (`;stream=watch`) is a run of frames, each a 4-byte big-endian length
//!   and a `metav1.WatchEvent` {type = 1, object = 2 RawExtension{raw = 1}} written without
//!   the envelope (upstream's `RawSerializer` and length-delimited framer); the event's raw
//!   object is itself an enveloped object.

pub mod table;
pub mod transcode;
pub mod wire;

use serde_json::{Map, Value};

use self::table::Message;
use self::wire::{WireError, Writer};
use crate::generated::protobuf::{KINDS, MESSAGES};

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
pub const MAGIC: &[u8] = b"k8s\0";

pub use wire::WireError as Error;

/// The message of a built-in kind, if it has one (custom resources do not).
pub fn message_for(group: &str, version: &str, kind: &str) -> Option<&'static Message> {
    KINDS
        .binary_search_by(|(g, v, k, _)| (*g, *v, *k).cmp(&(group, version, kind)))
        .ok()
        .map(|i| &MESSAGES[KINDS[i].3 as usize])
}

/// Whether objects of this kind can be written as protobuf.
pub fn supports(group: &str, version: &str, kind: &str) -> bool {
    message_for(group, version, kind).is_some()
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// Encodes a JSON object (with apiVersion and kind) as an enveloped protobuf object.
pub fn encode(value: &Value) -> Result<Vec<u8>, Error> {
    let Some(obj) = value.as_object() else { return wire::err("only objects can be encoded") };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = split_api_version(api_version);
    let Some(m) = message_for(group, version, kind) else {
        return wire::err(format!("{kind} ({api_version}) has no protobuf encoding"));
    };
    let mut raw = Writer::default();
    transcode::encode_message(m, obj, &mut raw)?;
    let mut type_meta = Writer::default();
    type_meta.bytes_field(1, api_version.as_bytes());
    type_meta.bytes_field(2, kind.as_bytes());
    let mut out = Writer { buf: MAGIC.to_vec() };
    out.bytes_field(1, &type_meta.buf);
    out.bytes_field(2, &raw.buf);
    out.bytes_field(3, b"");
    out.bytes_field(4, b"");
    Ok(out.buf)
}

/// Decodes an enveloped protobuf object into JSON (apiVersion and kind first).
pub fn decode(bytes: &[u8]) -> Result<Value, Error> {
    decode_envelope(bytes, 0)
}

pub(crate) fn decode_envelope(bytes: &[u8], depth: usize) -> Result<Value, Error> {
    let Some(body) = bytes.strip_prefix(MAGIC) else {
        return wire::err("the protobuf body does not start with the k8s\\0 prefix");
    };
    let (mut api_version, mut kind, mut raw, mut encoding) = (String::new(), String::new(), &[][..], String::new());
    for (tag, v) in wire::fields(body)? {
        let wire::Value::Len(b) = v else { continue };
        match tag {
            1 => {
                for (t, tv) in wire::fields(b)? {
                    if let wire::Value::Len(s) = tv {
                        match t {
                            1 => api_version = String::from_utf8_lossy(s).into_owned(),
                            2 => kind = String::from_utf8_lossy(s).into_owned(),
                            _ => {}
                        }
                    }
                }
            }
            2 => raw = b,
            3 => encoding = String::from_utf8_lossy(b).into_owned(),
            _ => {}
        }
    }
    if !encoding.is_empty() {
        return wire::err(format!("unsupported content encoding {encoding:?}"));
    }
    let (group, version) = split_api_version(&api_version);
    let Some(m) = message_for(group, version, &kind) else {
        return wire::err(format!("no kind {kind:?} is registered for version {api_version:?}"));
    };
    let fields = transcode::decode_message(m, raw, depth + 1)?;
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(kind));
    out.insert("apiVersion".into(), Value::String(api_version));
    out.extend(fields);
    Ok(Value::Object(out))
}

/// One watch frame: the length, then the WatchEvent whose object is `object`, enveloped.
pub fn watch_frame(event_type: &str, object: &Value) -> Result<Vec<u8>, Error> {
    let inner = encode(object)?;
    let mut raw_ext = Writer::default();
    raw_ext.bytes_field(1, &inner);
    let mut event = Writer::default();
    event.bytes_field(1, event_type.as_bytes());
    event.bytes_field(2, &raw_ext.buf);
    let len = u32::try_from(event.buf.len()).map_err(|_| WireError("watch event too large".into()))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(&event.buf);
    Ok(out)
}

/// Splits a watch stream into (type, object) events (for clients and tests).
pub fn read_watch_frames(mut stream: &[u8]) -> Result<Vec<(String, Value)>, Error> {
    let mut events = Vec::new();
    while !stream.is_empty() {
        let Some((len, rest)) = stream.split_first_chunk::<4>() else { return wire::err("truncated frame length") };
        let n = u32::from_be_bytes(*len) as usize;
        if rest.len() < n {
            return wire::err("truncated watch frame");
        }
        let (frame, rest) = rest.split_at(n);
        let (mut ty, mut obj) = (String::new(), Value::Null);
        for (tag, v) in wire::fields(frame)? {
            match (tag, v) {
                (1, wire::Value::Len(b)) => ty = String::from_utf8_lossy(b).into_owned(),
                (2, wire::Value::Len(b)) => {
                    for (t, rv) in wire::fields(b)? {
                        if let (1, wire::Value::Len(raw)) = (t, rv) {
                            obj = decode(raw)?;
                        }
                    }
                }
                _ => {}
            }
        }
        events.push((ty, obj));
        stream = rest;
    }
    Ok(events)
}

#[cfg(test)]
mod tests;
