//! The files of configMap, secret and downwardAPI volumes (and of the same sources in
//! a projected volume), as upstream's MakePayload/CollectData: every key as a file, or
//! only the listed items at their paths; item modes over the default mode; a missing
//! key is an error unless the source is optional. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret};

use super::atomic_writer::{FileProjection, Payload};
use crate::runtime::downward_api;

/// The API's default for defaultMode (0644).
pub const DEFAULT_MODE: i32 = 0o644;

fn mode(m: i32) -> u32 {
    (m as u32) & 0o7777
}

/// Keys to files: all keys at their own names, or the items at their paths.
fn key_payload(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
    missing_key: impl Fn(&str) -> String,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (key, bytes) in data {
                payload.insert(key.clone(), FileProjection { data: bytes.clone(), mode: mode(default_mode) });
            }
        }
        Some(items) => {
            for item in items {
                let Some(bytes) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(missing_key(&item.key));
                };
                let m = item.mode.unwrap_or(default_mode);
                payload.insert(item.path.clone(), FileProjection { data: bytes.clone(), mode: mode(m) });
            }
        }
    }
    Ok(payload)
}

/// A config map's data and binaryData; None (missing, optional) is empty.
pub fn config_map(
    cm: Option<&ConfigMap>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    if let Some(cm) = cm {
        for (k, v) in cm.data.iter().flatten() {
            data.insert(k.clone(), v.as_bytes().to_vec());
        }
        for (k, v) in cm.binary_data.iter().flatten() {
            data.entry(k.clone()).or_insert_with(|| v.0.clone());
        }
    }
    key_payload(&data, items, default_mode, optional, |k| format!("configmap references non-existent config key: {k}"))
}

pub fn secret(
    secret: Option<&Secret>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let data: BTreeMap<String, Vec<u8>> =
        secret.iter().flat_map(|s| s.data.iter().flatten()).map(|(k, v)| (k.clone(), v.0.clone())).collect();
    key_payload(&data, items, default_mode, optional, |k| format!("references non-existent secret key: {k}"))
}

/// downwardAPI items: metadata fields and container resources, one file each.
pub fn downward_api(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
    allocatable: &BTreeMap<String, String>,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            downward_api::metadata_field(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            downward_api::pod_container_resource(pod, r, allocatable)
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                let m = item.mode.unwrap_or(default_mode);
                payload.insert(item.path.clone(), FileProjection { data: v.into_bytes(), mode: mode(m) });
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(payload) } else { Err(aggregate(errors)) }
}

/// upstream's aggregate error text: one message as is, several as `[a, b]`.
pub fn aggregate(errors: Vec<String>) -> String {
    if errors.len() == 1 { errors.into_iter().next().unwrap_or_default() } else { format!("[{}]", errors.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm"},
            "data": {"a": "alpha", "b": "beta"},
            "binaryData": {"bin": "AAEC"},
        }))
        .unwrap()
    }

    fn items(v: serde_json::Value) -> Vec<KeyToPath> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn all_keys_or_listed_items_with_modes() {
        let all = config_map(Some(&cm()), None, 0o644, false).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), vec!["a", "b", "bin"]);
        assert_eq!(all["bin"].data, vec![0, 1, 2]);
        assert!(all.values().all(|f| f.mode == 0o644));

        let listed = items(
            serde_json::json!([{"key": "a", "path": "dir/first"}, {"key": "b", "path": "second", "mode": 0o400}]),
        );
        let some = config_map(Some(&cm()), Some(&listed), 0o440, false).unwrap();
        assert_eq!(some.keys().collect::<Vec<_>>(), vec!["dir/first", "second"]);
        assert_eq!((some["dir/first"].mode, some["second"].mode), (0o440, 0o400));
        assert_eq!(some["second"].data, b"beta");
    }

    #[test]
    fn missing_keys_fail_unless_optional() {
        let listed = items(serde_json::json!([{"key": "nope", "path": "x"}]));
        assert_eq!(
            config_map(Some(&cm()), Some(&listed), 0o644, false),
            Err("configmap references non-existent config key: nope".into())
        );
        assert_eq!(config_map(Some(&cm()), Some(&listed), 0o644, true), Ok(Payload::new()));
        assert_eq!(config_map(None, None, 0o644, true), Ok(Payload::new()));
        let s: Secret =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}, "data": {"k": "dg=="}})).unwrap();
        assert_eq!(secret(Some(&s), None, 0o600, false).unwrap()["k"].data, b"v");
        assert_eq!(
            secret(Some(&s), Some(&listed), 0o644, false),
            Err("references non-existent secret key: nope".into())
        );
    }

    #[test]
    fn downward_items_read_the_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi"}}}]},
        }))
        .unwrap();
        let files: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o600},
            {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
        ]))
        .unwrap();
        let p = downward_api(&pod, &files, 0o644, &BTreeMap::new()).unwrap();
        assert_eq!(p["labels"].data, b"app=\"web\"");
        assert_eq!((p["name"].data.as_slice(), p["name"].mode), (b"p".as_slice(), 0o600));
        assert_eq!(p["mem"].data, b"64");
        let bad: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "x", "fieldRef": {"fieldPath": "spec.nodeName"}},
            {"path": "y", "fieldRef": {"fieldPath": "status.podIP"}},
        ]))
        .unwrap();
        assert_eq!(
            downward_api(&pod, &bad, 0o644, &BTreeMap::new()),
            Err("[unsupported fieldPath: spec.nodeName, unsupported fieldPath: status.podIP]".into())
        );
    }
}
