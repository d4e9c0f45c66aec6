//! CustomResourceDefinition (apiextensions.k8s.io/v1): defaults, validation and the
//! deletion that waits for the CRD's objects, as upstream's apiextensions-apiserver.

use serde_json::{Value, json};

use crate::crd::{self, schema};
use crate::error::Cause;
use crate::validation::{NameRule, invalid_str, name_errors};

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Upstream's defaults for v1 CRDs: conversion strategy None, listKind and singular
/// from kind, and status.storedVersions gaining the storage version.
pub fn default_crd(obj: &mut Value) {
    if obj.pointer("/spec/conversion/strategy").is_none() && obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    let kind = s(obj, "/spec/names/kind").to_string();
    if !kind.is_empty() && obj.get("spec").and_then(|sp| sp.get("names")).is_some_and(Value::is_object) {
        if s(obj, "/spec/names/listKind").is_empty() {
            obj["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
        }
        if s(obj, "/spec/names/singular").is_empty() {
            obj["spec"]["names"]["singular"] = json!(kind.to_lowercase());
        }
    }
}

/// On create: status starts with the storage version as the only stored version.
pub fn prepare_crd_create(obj: &mut Value) {
    let stored: Vec<String> = crd::storage_version(obj).into_iter().collect();
    obj["status"] = json!({"storedVersions": stored, "conditions": [], "acceptedNames": {"plural": "", "kind": ""}});
}

/// On update: a new storage version joins status.storedVersions.
pub fn prepare_crd_update(new: &mut Value, _old: &Value) {
    add_stored_version(new);
}

fn add_stored_version(obj: &mut Value) {
    let Some(v) = crd::storage_version(obj) else { return };
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    let stored = &mut obj["status"]["storedVersions"];
    if !stored.is_array() {
        *stored = json!([]);
    }
    let list = stored.as_array_mut().expect("just made an array");
    if !list.iter().any(|x| x.as_str() == Some(v.as_str())) {
        list.push(json!(v));
    }
}

const COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];

/// Upstream's ValidateCustomResourceDefinition for v1 objects.
pub fn validate_crd(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let group = s(obj, "/spec/group");
    let plural = s(obj, "/spec/names/plural");
    let name = s(obj, "/metadata/name");
    if name != format!("{plural}.{group}") {
        causes.push(invalid_str("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"));
    }
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    } else {
        for msg in name_errors(NameRule::Subdomain, group) {
            causes.push(invalid_str("spec.group", group, msg));
        }
        if !group.contains('.') {
            causes.push(invalid_str("spec.group", group, "should be a domain with at least one dot"));
        }
    }
    match s(obj, "/spec/scope") {
        "Cluster" | "Namespaced" => {}
        "" => causes.push(Cause::required("spec.scope", "")),
        other => causes.push(Cause::not_supported("spec.scope", other, &["Cluster", "Namespaced"])),
    }
    causes.extend(validate_names(obj.pointer("/spec/names").unwrap_or(&Value::Null), "spec.names"));
    causes.extend(validate_versions(obj));
    match s(obj, "/spec/conversion/strategy") {
        "" | "None" => {}
        "Webhook" => {
            if obj.pointer("/spec/conversion/webhook/clientConfig").is_none() {
                causes.push(Cause::required("spec.conversion.webhook", "required when strategy is set to Webhook"));
            }
        }
        other => causes.push(Cause::not_supported("spec.conversion.strategy", other, &["None", "Webhook"])),
    }
    causes
}

fn validate_names(names: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in ["plural", "singular"] {
        let v = s(names, &format!("/{field}"));
        if v.is_empty() {
            if field == "plural" {
                causes.push(Cause::required(format!("{path}.{field}"), ""));
            }
            continue;
        }
        for msg in name_errors(NameRule::Label, v) {
            causes.push(invalid_str(format!("{path}.{field}"), v, msg));
        }
    }
    for (i, short) in names.get("shortNames").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let v = short.as_str().unwrap_or("");
        for msg in name_errors(NameRule::Label, v) {
            causes.push(invalid_str(format!("{path}.shortNames[{i}]"), v, msg));
        }
    }
    for (i, cat) in names.get("categories").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let v = cat.as_str().unwrap_or("");
        for msg in name_errors(NameRule::Label, v) {
            causes.push(invalid_str(format!("{path}.categories[{i}]"), v, msg));
        }
    }
    let kind = s(names, "/kind");
    let list_kind = s(names, "/listKind");
    let kind_ok = |k: &str| {
        let b = k.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphabetic()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
            && b[b.len() - 1].is_ascii_alphanumeric()
    };
    for (field, v) in [("kind", kind), ("listKind", list_kind)] {
        if v.is_empty() {
            causes.push(Cause::required(format!("{path}.{field}"), ""));
        } else if !kind_ok(v) {
            causes.push(invalid_str(
                format!("{path}.{field}"),
                v,
                "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
            ));
        }
    }
    if !kind.is_empty() && kind == list_kind {
        causes.push(invalid_str(format!("{path}.listKind"), list_kind, "kind and listKind may not be the same"));
    }
    causes
}

fn validate_versions(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let versions = obj.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::invalid("spec.versions", "null", "must have exactly one version marked as storage version"));
        return causes;
    }
    let storage = versions.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true)).count();
    if storage != 1 {
        causes.push(Cause::invalid(
            "spec.versions",
            "[...]",
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions.iter().any(|v| v.get("served").and_then(Value::as_bool) == Some(true)) {
        causes.push(Cause::invalid("spec.versions", "[...]", "must have at least one version marked as served"));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, v) in versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        let name = s(v, "/name");
        if name.is_empty() {
            causes.push(Cause::required(format!("{at}.name"), ""));
        } else {
            for msg in name_errors(NameRule::Dns1035Label, name) {
                causes.push(invalid_str(format!("{at}.name"), name, msg));
            }
            if !seen.insert(name.to_string()) {
                causes.push(Cause::invalid(format!("spec.versions[{i}].name"), name, "must be unique"));
            }
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => {
                causes.push(Cause::required(format!("{at}.schema.openAPIV3Schema"), "schemas are required"));
            }
            Some(raw) => {
                for p in schema::problems(raw, &format!("{at}.schema.openAPIV3Schema")) {
                    causes.push(match p.kind {
                        "Required" => Cause::required(p.field, p.detail),
                        "Forbidden" => Cause::forbidden(p.field, p.detail),
                        "NotSupported" => Cause::new("FieldValueNotSupported", p.detail, p.field),
                        _ => Cause::new("FieldValueInvalid", format!("Invalid value: \"\": {}", p.detail), p.field),
                    });
                }
            }
        }
        if let Some(scale) = v.pointer("/subresources/scale") {
            let sp = s(scale, "/specReplicasPath");
            if sp.is_empty() {
                causes.push(Cause::required(format!("{at}.subresources.scale.specReplicasPath"), ""));
            } else if !sp.starts_with(".spec.") {
                causes.push(invalid_str(
                    format!("{at}.subresources.scale.specReplicasPath"),
                    sp,
                    "should be a json path under .spec",
                ));
            }
            let st = s(scale, "/statusReplicasPath");
            if st.is_empty() {
                causes.push(Cause::required(format!("{at}.subresources.scale.statusReplicasPath"), ""));
            } else if !st.starts_with(".status.") {
                causes.push(invalid_str(
                    format!("{at}.subresources.scale.statusReplicasPath"),
                    st,
                    "should be a json path under .status",
                ));
            }
            if let Some(sel) = scale.get("labelSelectorPath").and_then(Value::as_str)
                && !(sel.starts_with(".spec.") || sel.starts_with(".status."))
            {
                causes.push(invalid_str(
                    format!("{at}.subresources.scale.labelSelectorPath"),
                    sel,
                    "should be a json path under either .spec or .status",
                ));
            }
        }
        for (j, c) in v.get("additionalPrinterColumns").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let cat = format!("{at}.additionalPrinterColumns[{j}]");
            if s(c, "/name").is_empty() {
                causes.push(Cause::required(format!("{cat}.name"), ""));
            }
            let ty = s(c, "/type");
            if !COLUMN_TYPES.contains(&ty) {
                causes.push(Cause::not_supported(format!("{cat}.type"), ty, COLUMN_TYPES));
            }
            if s(c, "/jsonPath").is_empty() {
                causes.push(Cause::required(format!("{cat}.jsonPath"), ""));
            }
        }
        let selectable = v.get("selectableFields").and_then(Value::as_array).cloned().unwrap_or_default();
        if selectable.len() > 8 {
            causes.push(Cause::new(
                "FieldValueTooMany",
                format!("Too many: {}: must have at most 8 items", selectable.len()),
                format!("{at}.selectableFields"),
            ));
        }
        let root = v.pointer("/schema/openAPIV3Schema").map(schema::Schema::parse);
        for (j, f) in selectable.iter().enumerate() {
            let path = s(f, "/jsonPath");
            let fat = format!("{at}.selectableFields[{j}].jsonPath");
            if path.is_empty() {
                causes.push(Cause::required(fat, ""));
                continue;
            }
            let found = root.as_ref().and_then(|r| {
                path.trim_start_matches('.').split('.').try_fold(r, |node, part| node.properties.get(part))
            });
            match found {
                None => causes.push(invalid_str(fat, path, "is an invalid path: does not refer to a valid field")),
                Some(node) if !matches!(node.type_.as_str(), "string" | "integer" | "boolean") => causes
                    .push(invalid_str(fat, path, "selectable field type must be one of: string, integer, boolean")),
                Some(_) => {}
            }
        }
    }
    causes
}

/// Upstream's ValidateCustomResourceDefinitionUpdate: group and scope are fixed, and a
/// version still stored may not go away.
pub fn validate_crd_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (field, pointer) in [("spec.group", "/spec/group"), ("spec.scope", "/spec/scope")] {
        if old.pointer(pointer) != new.pointer(pointer) {
            causes.push(invalid_str(field, s(new, pointer), "field is immutable"));
        }
    }
    let versions: Vec<&str> = new
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .collect();
    for (i, stored) in new.pointer("/status/storedVersions").and_then(Value::as_array).into_iter().flatten().enumerate()
    {
        let v = stored.as_str().unwrap_or("");
        if !versions.contains(&v) {
            causes.push(invalid_str(format!("status.storedVersions[{i}]"), v, "must appear in spec.versions"));
        }
    }
    causes
}

/// Upstream's CRD REST delete: the first delete marks the CRD Terminating and adds the
/// cleanup finalizer, so the CRD stays until its objects are gone.
pub fn on_delete(obj: &mut Value) -> crate::strategy::DeleteAction {
    use crate::strategy::DeleteAction;
    let finalizers = crate::object::finalizers(obj);
    let has_cleanup = finalizers.iter().any(|f| f == crd::CLEANUP_FINALIZER);
    if crate::object::is_deleting(obj) {
        return if has_cleanup { DeleteAction::Keep } else { DeleteAction::Remove };
    }
    let mut finalizers = finalizers;
    if !has_cleanup {
        finalizers.push(crd::CLEANUP_FINALIZER.to_string());
    }
    crate::object::set_finalizers(obj, &finalizers);
    set_condition(
        obj,
        "Terminating",
        "True",
        "InstanceDeletionPending",
        "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
    );
    DeleteAction::Keep
}

/// Sets a status condition, keeping lastTransitionTime when the status is unchanged.
pub fn set_condition(obj: &mut Value, ty: &str, status: &str, reason: &str, message: &str) {
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    let conditions = &mut obj["status"]["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("just made an array");
    let now = crate::object::now_rfc3339();
    match list.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some(ty)) {
        Some(c) => {
            if c.get("status").and_then(Value::as_str) != Some(status) {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(status);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
        }
        None => list.push(
            json!({"type": ty, "status": status, "lastTransitionTime": now, "reason": reason, "message": message}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"color": {"type": "string"}}}}}},
                "selectableFields": [{"jsonPath": ".spec.color"}]}]}})
    }

    fn messages(obj: &Value) -> Vec<String> {
        validate_crd(obj).into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn a_good_crd_passes_after_defaults() {
        let mut obj = crd();
        default_crd(&mut obj);
        assert_eq!(obj["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(obj["spec"]["names"]["singular"], "widget");
        assert_eq!(messages(&obj), Vec::<String>::new());
        prepare_crd_create(&mut obj);
        assert_eq!(obj["status"]["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn upstream_messages() {
        let mut obj = crd();
        default_crd(&mut obj);
        obj["metadata"]["name"] = json!("wrong.example.com");
        obj["spec"]["versions"][0]["storage"] = json!(false);
        obj["spec"]["scope"] = json!("Global");
        obj["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = json!({});
        let m = messages(&obj);
        for want in [
            "metadata.name: Invalid value: \"wrong.example.com\": must be spec.names.plural+\".\"+spec.group",
            "spec.versions: Invalid value: [...]: must have exactly one version marked as storage version",
            "spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\"",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value: must not be empty for specified object fields",
        ] {
            assert!(m.iter().any(|x| x == want), "missing {want:?} in {m:#?}");
        }
    }

    #[test]
    fn first_delete_adds_the_cleanup_finalizer() {
        let mut obj = crd();
        assert_eq!(on_delete(&mut obj), crate::strategy::DeleteAction::Keep);
        assert_eq!(crate::object::finalizers(&obj), vec![crd::CLEANUP_FINALIZER.to_string()]);
        assert_eq!(obj["status"]["conditions"][0]["reason"], "InstanceDeletionPending");
    }
}
