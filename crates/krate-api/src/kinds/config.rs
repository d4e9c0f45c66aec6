//! ConfigMaps and Secrets: key rules, the 1 MiB size limit, Secret types and their
//! required keys, `stringData` folded into `data`, and the `immutable` flag.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::{set_default_str, str_of};
use crate::error::Cause;
use crate::validation::{IMMUTABLE_MSG, config_key_errors, invalid_str};

/// Upstream's MaxSecretSize (ConfigMaps share it).
pub const MAX_SIZE: usize = 1024 * 1024;
const REDACTED: &str = "<secret contents redacted>";

/// Decodes base64 as Go's `encoding/json` does for `[]byte` (standard alphabet,
/// padded; carriage returns and newlines are ignored), with Go's error message.
pub fn decode_base64(s: &str) -> Result<Vec<u8>, String> {
    let cleaned: String = s.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    STANDARD.decode(cleaned.as_bytes()).map_err(|e| {
        let at = match e {
            base64::DecodeError::InvalidByte(i, _) | base64::DecodeError::InvalidLastSymbol(i, _) => i,
            base64::DecodeError::InvalidLength(n) => n - n % 4,
            base64::DecodeError::InvalidPadding => cleaned.find('=').unwrap_or(cleaned.len()),
        };
        format!("illegal base64 data at input byte {at}")
    })
}

fn map_of<'a>(v: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    v.get(key).and_then(Value::as_object)
}

// ---- ConfigMap

pub fn validate_config_map(cm: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let mut total = 0;
    let binary = map_of(cm, "binaryData");
    for (key, value) in map_of(cm, "data").into_iter().flatten() {
        for msg in config_key_errors(key) {
            c.push(invalid_str(format!("data[{key}]"), key, msg));
        }
        if binary.is_some_and(|b| b.contains_key(key)) {
            c.push(invalid_str(format!("data[{key}]"), key, "duplicate of key present in binaryData"));
        }
        total += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.into_iter().flatten() {
        for msg in config_key_errors(key) {
            c.push(invalid_str(format!("binaryData[{key}]"), key, msg));
        }
        match decode_base64(value.as_str().unwrap_or("")) {
            Ok(bytes) => total += bytes.len(),
            Err(e) => c.push(invalid_str(format!("binaryData[{key}]"), "<binary data>", e)),
        }
    }
    if total > MAX_SIZE {
        c.push(Cause::too_long("", MAX_SIZE));
    }
    c
}

/// With `immutable` set, neither the flag nor the data may change.
pub fn validate_config_map_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    if old.get("immutable") == Some(&Value::Bool(true)) {
        if new.get("immutable") != Some(&Value::Bool(true)) {
            c.push(Cause::forbidden("immutable", "field is immutable when `immutable` is set"));
        }
        for f in ["data", "binaryData"] {
            if !super::semantic_eq(new.get(f).unwrap_or(&Value::Null), old.get(f).unwrap_or(&Value::Null)) {
                c.push(Cause::forbidden(f, "field is immutable when `immutable` is set"));
            }
        }
    }
    c
}

// ---- Secret

/// `SetDefaults_Secret` and the v1 conversion: the type defaults to Opaque and
/// `stringData` is written into `data` (overwriting), then dropped.
pub fn default_secret(secret: &mut Value) {
    set_default_str(secret, "type", "Opaque");
    let Some(obj) = secret.as_object_mut() else { return };
    let Some(string_data) = obj.remove("stringData") else { return };
    if let Some(sd) = string_data.as_object().filter(|m| !m.is_empty()) {
        let data = obj.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        for (k, v) in sd {
            data[k] = json!(STANDARD.encode(v.as_str().unwrap_or("")));
        }
    }
}

pub fn validate_secret(secret: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let mut total = 0;
    let data = map_of(secret, "data");
    let mut decoded: Map<String, Value> = Map::new();
    for (key, value) in data.into_iter().flatten() {
        for msg in config_key_errors(key) {
            c.push(invalid_str(format!("data[{key}]"), key, msg));
        }
        match decode_base64(value.as_str().unwrap_or("")) {
            Ok(bytes) => {
                total += bytes.len();
                decoded.insert(key.clone(), json!(bytes.len()));
            }
            Err(e) => {
                c.push(invalid_str(format!("data[{key}]"), REDACTED, e));
                decoded.insert(key.clone(), json!(0));
            }
        }
    }
    if total > MAX_SIZE {
        c.push(Cause::too_long("data", MAX_SIZE));
    }
    let present = |k: &str| decoded.contains_key(k);
    let json_key = |k: &str, c: &mut Vec<Cause>| {
        if !present(k) {
            c.push(Cause::required(format!("data[{k}]"), ""));
            return;
        }
        let raw = data.and_then(|d| d.get(k)).and_then(Value::as_str).unwrap_or("");
        if let Ok(bytes) = decode_base64(raw)
            && let Err(e) = serde_json::from_slice::<Map<String, Value>>(&bytes)
        {
            c.push(invalid_str(format!("data[{k}]"), REDACTED, e.to_string()));
        }
    };
    match str_of(secret, "type") {
        "kubernetes.io/service-account-token" => {
            let sa =
                secret.pointer("/metadata/annotations/kubernetes.io~1service-account.name").and_then(Value::as_str);
            if sa.is_none_or(str::is_empty) {
                c.push(Cause::required("metadata.annotations[kubernetes.io/service-account.name]", ""));
            }
        }
        "kubernetes.io/dockercfg" => json_key(".dockercfg", &mut c),
        "kubernetes.io/dockerconfigjson" => json_key(".dockerconfigjson", &mut c),
        "kubernetes.io/basic-auth" if !present("username") && !present("password") => {
            c.push(Cause::required("data[username]", ""));
            c.push(Cause::required("data[password]", ""));
        }
        "kubernetes.io/ssh-auth" if decoded.get("ssh-privatekey").and_then(Value::as_u64).unwrap_or(0) == 0 => {
            c.push(Cause::required("data[ssh-privatekey]", ""));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !present(k) {
                    c.push(Cause::required(format!("data[{k}]"), ""));
                }
            }
        }
        _ => {}
    }
    c
}

/// The type never changes; with `immutable` set, neither the flag nor the data may.
pub fn validate_secret_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    if new.get("type") != old.get("type") {
        c.push(invalid_str("type", str_of(new, "type"), IMMUTABLE_MSG));
    }
    if old.get("immutable") == Some(&Value::Bool(true)) {
        if new.get("immutable") != Some(&Value::Bool(true)) {
            c.push(Cause::forbidden("immutable", "field is immutable when `immutable` is set"));
        }
        if !super::semantic_eq(new.get("data").unwrap_or(&Value::Null), old.get("data").unwrap_or(&Value::Null)) {
            c.push(Cause::forbidden("data", "field is immutable when `immutable` is set"));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(c: &[Cause]) -> Vec<String> {
        c.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn config_map_keys_and_size() {
        let cm = json!({"data": {"ok.key": "v", "bad key": "v", "..x": "v", "both": "v"}, "binaryData": {"both": "AA==", "bin": "not base64!"}});
        let m = msgs(&validate_config_map(&cm));
        for want in [
            "data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            "data[..x]: Invalid value: \"..x\": must not start with '..'",
            "data[both]: Invalid value: \"both\": duplicate of key present in binaryData",
            "binaryData[bin]: Invalid value: \"<binary data>\": illegal base64 data at input byte 3",
        ] {
            assert!(m.contains(&want.to_string()), "missing {want}\nin {m:#?}");
        }
        let big = json!({"data": {"a": "x".repeat(MAX_SIZE + 1)}});
        assert_eq!(msgs(&validate_config_map(&big)), vec![": Too long: may not be more than 1048576 bytes"]);
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let new = json!({"data": {"a": "2"}});
        assert_eq!(
            msgs(&validate_config_map_update(&new, &old)),
            vec![
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set"
            ]
        );
    }

    #[test]
    fn secrets() {
        let mut s = json!({"stringData": {"password": "hunter2"}, "data": {"user": "YWRtaW4="}});
        default_secret(&mut s);
        assert_eq!(s["type"], "Opaque");
        assert_eq!(s["data"], json!({"user": "YWRtaW4=", "password": "aHVudGVyMg=="}));
        assert!(s.get("stringData").is_none());
        assert!(validate_secret(&s).is_empty());
        let tls = json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "AA=="}});
        assert_eq!(msgs(&validate_secret(&tls)), vec!["data[tls.key]: Required value"]);
        let docker = json!({"type": "kubernetes.io/dockerconfigjson", "data": {}});
        assert_eq!(msgs(&validate_secret(&docker)), vec!["data[.dockerconfigjson]: Required value"]);
        let sa = json!({"type": "kubernetes.io/service-account-token"});
        assert_eq!(
            msgs(&validate_secret(&sa)),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"]
        );
        let basic = json!({"type": "kubernetes.io/basic-auth", "data": {"other": "AA=="}});
        assert_eq!(
            msgs(&validate_secret(&basic)),
            vec!["data[username]: Required value", "data[password]: Required value"]
        );
        let ssh = json!({"type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": ""}});
        assert_eq!(msgs(&validate_secret(&ssh)), vec!["data[ssh-privatekey]: Required value"]);
        let bad = json!({"data": {"k": "%%%"}});
        assert_eq!(
            msgs(&validate_secret(&bad)),
            vec!["data[k]: Invalid value: \"<secret contents redacted>\": illegal base64 data at input byte 0"]
        );
        let old = json!({"type": "Opaque", "immutable": true, "data": {"k": "AA=="}});
        let mut new = old.clone();
        new["type"] = json!("kubernetes.io/tls");
        new["data"] = json!({});
        assert_eq!(
            msgs(&validate_secret_update(&new, &old)),
            vec![
                "type: Invalid value: \"kubernetes.io/tls\": field is immutable",
                "data: Forbidden: field is immutable when `immutable` is set"
            ]
        );
    }
}
