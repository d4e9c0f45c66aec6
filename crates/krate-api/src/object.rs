//! Access to the metadata of objects held as JSON, and the values the server assigns
//! (uids, timestamps, generated names).

use bytes::Bytes;
use rand::Rng;
use serde_json::{Map, Value, json};

use krate_store::Revision;

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// The metadata map, created if missing.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("metadata is an object")
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str).filter(|s| !s.is_empty())
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    meta(obj).and_then(|m| m.get("labels")).and_then(Value::as_object)
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let m = meta_mut(obj);
    if finalizers.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(finalizers));
    }
}

pub fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

pub fn set_resource_version(obj: &mut Value, rev: Revision) {
    meta_mut(obj).insert("resourceVersion".into(), Value::String(rev.to_string()));
}

/// The stored form: no resourceVersion (the store's revision is the truth).
pub fn to_storage(obj: &Value) -> Bytes {
    let mut obj = obj.clone();
    meta_mut(&mut obj).remove("resourceVersion");
    Bytes::from(serde_json::to_vec(&obj).expect("a JSON value serializes"))
}

/// An object read from the store, with its resourceVersion.
pub fn from_storage(data: &[u8], rev: Revision) -> Result<Value, String> {
    let mut obj: Value = serde_json::from_slice(data).map_err(|e| format!("stored object is not JSON: {e}"))?;
    set_resource_version(&mut obj, rev);
    Ok(obj)
}

/// RFC 3339 in seconds, UTC, as Kubernetes writes metav1.Time.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn rfc3339_after(seconds: i64) -> String {
    let t = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// After a second delete shortened an object's grace period (from `before`'s), moves its
/// deletionTimestamp as upstream does: the deadline is the first request's time plus
/// the new period, so the remaining wait shrinks by the difference.
pub fn shorten_deletion(obj: &mut Value, before: &Value) {
    let grace = |o: &Value| o.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
    let (Some(old), Some(new)) = (grace(before), grace(obj)) else { return };
    let deadline = before.pointer("/metadata/deletionTimestamp").and_then(Value::as_str);
    let Some(deadline) = deadline.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else { return };
    if new >= old {
        return;
    }
    let moved = deadline - jiff::SignedDuration::from_secs(old - new);
    meta_mut(obj).insert("deletionTimestamp".into(), Value::from(moved.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
}

/// A random (version 4) UUID.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!("{}-{}-{}-{}-{}", h(0..4), h(4..6), h(6..8), h(8..10), h(10..16))
}

/// The suffix upstream appends to generateName: 5 characters from an alphabet without
/// vowels or look-alike characters.
pub fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// Everything but metadata and status: a change here bumps metadata.generation.
pub fn spec_changed(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(new) != strip(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_and_names() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(new_uid(), u);
        let s = generate_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c)));
    }

    #[test]
    fn storage_round_trip_sets_resource_version() {
        let obj = json!({"metadata": {"name": "a", "resourceVersion": "5"}, "data": {"k": "v"}});
        let stored = to_storage(&obj);
        assert!(!String::from_utf8_lossy(&stored).contains("resourceVersion"));
        let back = from_storage(&stored, 9).unwrap();
        assert_eq!(back["metadata"]["resourceVersion"], "9");
        assert!(spec_changed(&json!({"spec": 1}), &json!({"spec": 2})));
        assert!(!spec_changed(&json!({"spec": 1, "status": 1}), &json!({"spec": 1, "status": 2})));
    }
}
