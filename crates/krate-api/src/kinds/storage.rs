//! PersistentVolumeClaims and StorageClasses.

use serde_json::{Value, json};

use super::quantity::Quantity;
use super::{array_of, obj_mut, set_default, set_default_str, str_of};
use crate::error::Cause;
use crate::validation::{
    IMMUTABLE_MSG, dns1123_subdomain_errors, invalid_str, qualified_name_errors, validate_label_selector,
};

const NULL: Value = Value::Null;

/// `SetDefaults_PersistentVolumeClaimSpec` and the canonical resource quantities.
pub fn default_pvc_spec(spec: &mut Value) {
    set_default_str(spec, "volumeMode", "Filesystem");
    if let Some(r) = spec.get_mut("resources") {
        for k in ["requests", "limits"] {
            if let Some(l) = r.get_mut(k) {
                super::pod::default_resource_list(l);
            }
        }
    }
}

/// The defaults of a claim (also the volumeClaimTemplates of StatefulSets).
pub fn default_pvc(pvc: &mut Value) {
    default_pvc_spec(obj_mut(pvc, "spec"));
}

/// A new claim starts Pending.
pub fn prepare_pvc_create(pvc: &mut Value) {
    default_pvc(pvc);
    pvc["status"] = json!({"phase": "Pending"});
}

/// `ValidatePersistentVolumeClaimSpec` at `path`.
pub fn validate_pvc_spec(spec: &Value, path: &str) -> Vec<Cause> {
    let mut c = Vec::new();
    let modes = array_of(spec, "accessModes");
    if modes.is_empty() {
        c.push(Cause::required(format!("{path}.accessModes"), "at least 1 access mode is required"));
    }
    if let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) {
        c.extend(validate_label_selector(sel, &format!("{path}.selector")));
    }
    const MODES: [&str; 4] = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];
    let (mut rwop, mut other) = (false, false);
    for m in modes {
        let m = m.as_str().unwrap_or("");
        if !MODES.contains(&m) {
            c.push(Cause::not_supported(format!("{path}.accessModes"), m, &MODES));
        } else if m == "ReadWriteOncePod" {
            rwop = true;
        } else {
            other = true;
        }
    }
    if rwop && other {
        c.push(Cause::forbidden(format!("{path}.accessModes"), "may not use ReadWriteOncePod with other access modes"));
    }
    let storage_path = format!("{path}.resources[storage]");
    match spec.pointer("/resources/requests/storage") {
        None | Some(Value::Null) => c.push(Cause::required(&storage_path, "")),
        Some(v) => match Quantity::from_json(v) {
            Err(msg) => c.push(invalid_str(&storage_path, v.as_str().unwrap_or(""), msg)),
            Ok(q) if q.is_zero() || q.is_negative() => {
                c.push(invalid_str(&storage_path, &q.canonical(), "must be greater than zero"))
            }
            Ok(_) => {}
        },
    }
    if let Some(class) = spec.get("storageClassName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        for msg in dns1123_subdomain_errors(class) {
            c.push(invalid_str(format!("{path}.storageClassName"), class, msg));
        }
    }
    if let Some(mode) = spec.get("volumeMode").and_then(Value::as_str)
        && mode != "Block"
        && mode != "Filesystem"
    {
        c.push(Cause::not_supported(format!("{path}.volumeMode"), mode, &["Block", "Filesystem"]));
    }
    c
}

pub fn validate_pvc(pvc: &Value) -> Vec<Cause> {
    validate_pvc_spec(pvc.get("spec").unwrap_or(&NULL), "spec")
}

/// Claims are immutable after creation but for the volume name and the class (each set
/// once), and the storage request and attributes class of bound claims.
pub fn validate_pvc_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let mut new_spec = new.get("spec").cloned().unwrap_or(json!({}));
    let mut old_spec = old.get("spec").cloned().unwrap_or(json!({}));
    if str_of(&old_spec, "volumeName").is_empty() {
        if let Some(m) = new_spec.as_object_mut() {
            m.remove("volumeName");
        }
        if let Some(m) = old_spec.as_object_mut() {
            m.remove("volumeName");
        }
    }
    // A claim without a class may be given one (upstream's retroactive default
    // StorageClass assignment, GA since 1.28).
    if old_spec.get("storageClassName").is_none_or(Value::is_null) {
        for s in [&mut new_spec, &mut old_spec] {
            if let Some(m) = s.as_object_mut() {
                m.remove("storageClassName");
            }
        }
    }
    if new.pointer("/status/phase").and_then(Value::as_str) == Some("Bound") {
        for s in [&mut new_spec, &mut old_spec] {
            if let Some(r) = s.pointer_mut("/resources/requests").and_then(Value::as_object_mut) {
                r.remove("storage");
            }
            if let Some(m) = s.as_object_mut() {
                m.remove("volumeAttributesClassName");
            }
        }
    }
    if new_spec != old_spec {
        c.push(Cause::forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n",
        ));
    }
    c
}

// ---- StorageClass

pub fn default_storage_class(sc: &mut Value) {
    set_default(sc, "reclaimPolicy", json!("Delete"));
    set_default(sc, "volumeBindingMode", json!("Immediate"));
}

pub fn validate_storage_class(sc: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let prov = str_of(sc, "provisioner");
    if prov.is_empty() {
        c.push(Cause::required("provisioner", ""));
    } else {
        let lower = prov.to_lowercase();
        for msg in qualified_name_errors(&lower) {
            c.push(invalid_str("provisioner", &lower, msg));
        }
    }
    if let Some(params) = sc.get("parameters").and_then(Value::as_object) {
        if params.len() > 512 {
            c.push(Cause::too_long("parameters", 512));
        } else {
            let mut total = 0;
            for (k, v) in params {
                if k.is_empty() {
                    c.push(invalid_str("parameters", k, "field can not be empty."));
                }
                total += k.len() + v.as_str().map_or(0, str::len);
            }
            if total > 256 * 1024 {
                c.push(Cause::too_long("parameters", 256 * 1024));
            }
        }
    }
    if let Some(p) = sc.get("reclaimPolicy").and_then(Value::as_str)
        && !p.is_empty()
        && p != "Delete"
        && p != "Retain"
    {
        c.push(Cause::not_supported("reclaimPolicy", p, &["Delete", "Retain"]));
    }
    match sc.get("volumeBindingMode").and_then(Value::as_str) {
        None => c.push(Cause::required("volumeBindingMode", "")),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(m) => c.push(Cause::not_supported("volumeBindingMode", m, &["Immediate", "WaitForFirstConsumer"])),
    }
    c
}

pub fn validate_storage_class_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let params = |v: &Value| v.get("parameters").filter(|p| p.as_object().is_some_and(|m| !m.is_empty())).cloned();
    if params(new) != params(old) {
        c.push(Cause::forbidden("parameters", "updates to parameters are forbidden."));
    }
    if str_of(new, "provisioner") != str_of(old, "provisioner") {
        c.push(Cause::forbidden("provisioner", "updates to provisioner are forbidden."));
    }
    if str_of(new, "reclaimPolicy") != str_of(old, "reclaimPolicy") {
        c.push(Cause::forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."));
    }
    if new.get("volumeBindingMode") != old.get("volumeBindingMode") {
        c.push(invalid_str("volumeBindingMode", str_of(new, "volumeBindingMode"), IMMUTABLE_MSG));
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
    fn claims_need_access_modes_and_storage() {
        let mut pvc = json!({"spec": {}});
        prepare_pvc_create(&mut pvc);
        assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
        assert_eq!(pvc["status"]["phase"], "Pending");
        assert_eq!(
            msgs(&validate_pvc(&pvc)),
            vec![
                "spec.accessModes: Required value: at least 1 access mode is required",
                "spec.resources[storage]: Required value"
            ]
        );
        let mut ok =
            json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1024Mi"}}}});
        prepare_pvc_create(&mut ok);
        assert_eq!(ok["spec"]["resources"]["requests"]["storage"], "1Gi");
        assert!(validate_pvc(&ok).is_empty());
        let mut changed = ok.clone();
        changed["spec"]["accessModes"] = json!(["ReadWriteMany"]);
        assert_eq!(validate_pvc_update(&changed, &ok).len(), 1);
        let mut bound = ok.clone();
        bound["spec"]["volumeName"] = json!("pv-1");
        assert!(validate_pvc_update(&bound, &ok).is_empty(), "the volume name may be set once");
        let mut classed = ok.clone();
        classed["spec"]["storageClassName"] = json!("standard");
        assert!(validate_pvc_update(&classed, &ok).is_empty(), "a class may be given to a claim without one");
        let mut reclassed = classed.clone();
        reclassed["spec"]["storageClassName"] = json!("fast");
        assert_eq!(validate_pvc_update(&reclassed, &classed).len(), 1, "but not changed");
    }

    #[test]
    fn storage_classes() {
        let mut sc = json!({"metadata": {"name": "fast"}});
        default_storage_class(&mut sc);
        assert_eq!(sc["reclaimPolicy"], "Delete");
        assert_eq!(sc["volumeBindingMode"], "Immediate");
        assert_eq!(msgs(&validate_storage_class(&sc)), vec!["provisioner: Required value"]);
        sc["provisioner"] = json!("example.com/disk");
        assert!(validate_storage_class(&sc).is_empty());
        let mut changed = sc.clone();
        changed["provisioner"] = json!("other.io/disk");
        changed["parameters"] = json!({"a": "b"});
        assert_eq!(
            msgs(&validate_storage_class_update(&changed, &sc)),
            vec![
                "parameters: Forbidden: updates to parameters are forbidden.",
                "provisioner: Forbidden: updates to provisioner are forbidden."
            ]
        );
    }
}
