//! Custom resources: what a CustomResourceDefinition makes the registry serve.
//!
//! - [`schema`]: a version's openAPIV3Schema as a typed tree, and the structural rules;
//! - [`prune`]: unknown fields and schema defaults;
//! - [`validate`]: objects against the schema, with the CEL seam ([`validate::RuleEvaluator`]);
//! - this file: the strategy of a custom resource and the table entries of a CRD.
//!
//! The CRD's own validation lives in `kinds::apiextensions`; the loop that accepts
//! names, establishes CRDs and cleans up after deleted ones runs in the API server.

pub mod prune;
pub mod schema;
pub mod validate;

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::error::Cause;
use crate::fieldvalidation::UnknownField;
use crate::resource::{ResourceInfo, SubresourceInfo};
use crate::strategy::{ScalePaths, Strategy};
use crate::table::PrinterColumn;
use schema::Schema;
use validate::RuleEvaluator;

/// The finalizer that holds a deleted CRD until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Verbs of every custom resource, as upstream serves them.
const VERBS: &[&str] = &["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"];

/// Interned strings, for the `'static` selectable-field labels strategies return: a CRD
/// updated many times interns each distinct path once.
fn intern(s: &str) -> &'static str {
    static SEEN: OnceLock<parking_lot::Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(Default::default).lock();
    if let Some(found) = seen.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    seen.insert(leaked);
    leaked
}

/// A JSONPath like `.spec.replicas` as a JSON pointer.
pub fn json_pointer(path: &str) -> String {
    path.trim_start_matches('.').split('.').map(|p| format!("/{p}")).collect()
}

/// The strategy of one served version of a custom resource.
pub struct CustomResource {
    schema: Option<Schema>,
    raw_schema: Option<Value>,
    storage_api_version: String,
    scale: Option<ScalePaths>,
    columns: Vec<PrinterColumn>,
    selectable: &'static [(&'static str, &'static str)],
    rules: Arc<dyn RuleEvaluator>,
    /// The CRD is being deleted (its Terminating condition is True): no new objects.
    terminating: bool,
}

impl Strategy for CustomResource {
    fn tracks_generation(&self) -> bool {
        true
    }
    fn refuses_creates(&self) -> bool {
        self.terminating
    }
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(s) = &self.schema {
            prune::apply_defaults(s, obj);
        }
    }
    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        if let Some(s) = &self.schema {
            prune::apply_defaults(s, new);
        }
    }
    fn prepare_subresource_update(&self, _subresource: &str, new: &mut Value, _old: &Value) {
        if let Some(s) = &self.schema {
            prune::apply_defaults(s, new);
        }
    }
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        match &self.schema {
            Some(s) => validate::validate(s, obj, None, self.rules.as_ref()),
            None => Vec::new(),
        }
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        match &self.schema {
            Some(s) => validate::transition_rules(s, new, old, self.rules.as_ref()),
            None => Vec::new(),
        }
    }
    fn validate_subresource_update(&self, _subresource: &str, new: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = self.validate(new);
        causes.extend(self.validate_update(new, old));
        causes
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        self.selectable
    }
    fn storage_api_version(&self) -> Option<&str> {
        Some(&self.storage_api_version)
    }
    fn on_read(&self, obj: &mut Value) {
        if let Some(s) = &self.schema {
            prune::apply_defaults(s, obj);
        }
    }
    fn changes_on_read(&self) -> bool {
        true
    }
    fn unknown_fields(&self, obj: &Value) -> Option<Vec<UnknownField>> {
        Some(match &self.schema {
            Some(s) => prune::unknown_fields(s, obj),
            None => Vec::new(),
        })
    }
    fn scale_paths(&self) -> Option<&ScalePaths> {
        self.scale.as_ref()
    }
    fn printer_columns(&self) -> Option<&[PrinterColumn]> {
        Some(&self.columns)
    }
    fn openapi_schema(&self) -> Option<&Value> {
        self.raw_schema.as_ref()
    }
    fn structural_schema(&self) -> Option<&Schema> {
        self.schema.as_ref()
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn strings_at(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// The version whose objects are stored (the one marked storage).
pub fn storage_version(crd: &Value) -> Option<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(String::from)
}

/// The store key prefix of a CRD's objects.
pub fn key_prefix(crd: &Value) -> String {
    format!("/registry/{}/{}/", str_at(crd, "/spec/group"), str_at(crd, "/spec/names/plural"))
}

/// The resources an established CRD serves: one per served version, under its
/// accepted names (status.acceptedNames), with `rules` evaluating CEL validations.
/// Whether the CRD's Terminating condition is True (its objects are being deleted).
pub fn is_terminating(crd: &Value) -> bool {
    crd.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Terminating")
            && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

pub fn resources(crd: &Value, rules: Arc<dyn RuleEvaluator>) -> Vec<ResourceInfo> {
    let group = str_at(crd, "/spec/group").to_string();
    let names = crd.pointer("/status/acceptedNames").unwrap_or(&Value::Null);
    let plural = str_at(names, "/plural").to_string();
    let kind = str_at(names, "/kind").to_string();
    if plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = match str_at(names, "/singular") {
        "" => kind.to_lowercase(),
        s => s.to_string(),
    };
    let storage = storage_version(crd).unwrap_or_default();
    let storage_api_version = format!("{group}/{storage}");
    let namespaced = str_at(crd, "/spec/scope") == "Namespaced";
    let terminating = is_terminating(crd);
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .map(|v| {
            let version = str_at(v, "/name").to_string();
            let mut subresources = Vec::new();
            if v.pointer("/subresources/status").is_some() {
                subresources.push(SubresourceInfo {
                    name: "status".into(),
                    group: group.clone(),
                    version: version.clone(),
                    kind: kind.clone(),
                    verbs: vec!["get".into(), "patch".into(), "update".into()],
                });
            }
            let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
                spec_replicas: json_pointer(str_at(s, "/specReplicasPath")),
                status_replicas: json_pointer(str_at(s, "/statusReplicasPath")),
                label_selector: s.get("labelSelectorPath").and_then(Value::as_str).map(json_pointer),
            });
            if scale.is_some() {
                subresources.push(SubresourceInfo {
                    name: "scale".into(),
                    group: "autoscaling".into(),
                    version: "v1".into(),
                    kind: "Scale".into(),
                    verbs: vec!["get".into(), "patch".into(), "update".into()],
                });
            }
            let mut columns: Vec<PrinterColumn> = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cs| cs.iter().map(PrinterColumn::parse).collect())
                .unwrap_or_default();
            if columns.is_empty() {
                columns.push(PrinterColumn::age());
            }
            let selectable: Vec<(&'static str, &'static str)> = v
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                .map(|p| {
                    let label = intern(p.trim_start_matches('.'));
                    (label, label)
                })
                .collect();
            let strategy = CustomResource {
                schema: v.pointer("/schema/openAPIV3Schema").map(Schema::parse),
                raw_schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                storage_api_version: storage_api_version.clone(),
                scale,
                columns,
                selectable: Box::leak(selectable.into_boxed_slice()),
                rules: rules.clone(),
                terminating,
            };
            ResourceInfo {
                group: group.clone(),
                version,
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                verbs: VERBS.iter().map(|s| s.to_string()).collect(),
                short_names: strings_at(names, "/shortNames"),
                categories: strings_at(names, "/categories"),
                subresources,
                key_prefix: format!("/registry/{group}/{plural}/"),
                strategy: Arc::new(strategy),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1}}}, "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                     "selectableFields": [{"jsonPath": ".spec.color"}]},
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v0", "served": false, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                ]},
            "status": {"acceptedNames": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"]}},
        })
    }

    #[test]
    fn served_versions_become_resources() {
        let rs = resources(&widget_crd(), Arc::new(validate::NoRules));
        assert_eq!(rs.len(), 2);
        let v1 = &rs[0];
        assert_eq!((v1.version.as_str(), v1.plural.as_str(), v1.namespaced), ("v1", "widgets", true));
        assert_eq!(v1.short_names, vec!["wd"]);
        assert!(v1.has_status() && v1.subresource("scale").is_some());
        assert_eq!(v1.key_prefix, rs[1].key_prefix);
        assert_eq!(v1.strategy.storage_api_version(), Some("example.com/v1"));
        assert_eq!(rs[1].strategy.storage_api_version(), Some("example.com/v1"));
        assert_eq!(v1.strategy.selectable_fields(), &[("spec.color", "spec.color")]);
        assert_eq!(v1.strategy.scale_paths().unwrap().spec_replicas, "/spec/replicas");
        let mut obj = json!({"spec": {}});
        v1.strategy.prepare_for_create(&mut obj);
        assert_eq!(obj["spec"]["replicas"], 1);
    }
}
