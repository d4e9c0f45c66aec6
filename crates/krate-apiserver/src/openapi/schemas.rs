//! The schemas of a document: k8s-openapi's JSON schemas (through schemars) for the
//! definitions the operations name and everything they reach, plus upstream's
//! `x-kubernetes-*` extensions from the generated schema facts.

use std::collections::BTreeSet;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use krate_api::generated::schema::KINDS;
use krate_api::schema;

use super::types::TYPES;

/// Which document the schemas are for: where references point and how a reference
/// with siblings is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// OpenAPI 3.0: `#/components/schemas/…`; a `$ref` with a description or default
    /// becomes `allOf: [{$ref}]`, as upstream's v3 documents write it.
    V3,
    /// Swagger 2.0: `#/definitions/…`, `$ref` beside its description as upstream's v2.
    V2,
}

impl Flavor {
    pub fn reference(self, name: &str) -> String {
        match self {
            Flavor::V3 => format!("#/components/schemas/{name}"),
            Flavor::V2 => format!("#/definitions/{name}"),
        }
    }
}

/// Kinds whose upstream schema requires metadata (k8s-openapi requires it of every
/// kind, since its field is not optional).
const METADATA_REQUIRED: &[&str] = &[
    "io.k8s.api.apiserverinternal.v1alpha1.StorageVersion",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.resource.v1alpha3.ResourcePoolStatusRequest",
];

/// Definitions whose `required` differs in k8s-openapi (which requires the fields its
/// Rust types do not make optional): upstream's list.
const REQUIRED_AS_UPSTREAM: &[(&str, &[&str])] = &[
    ("io.k8s.api.core.v1.ConfigMapEnvSource", &[]),
    ("io.k8s.api.core.v1.ConfigMapKeySelector", &["key"]),
    ("io.k8s.api.core.v1.ConfigMapProjection", &[]),
    ("io.k8s.api.core.v1.ConfigMapVolumeSource", &[]),
    ("io.k8s.api.core.v1.LocalObjectReference", &[]),
    ("io.k8s.api.core.v1.SecretEnvSource", &[]),
    ("io.k8s.api.core.v1.SecretKeySelector", &["key"]),
    ("io.k8s.api.core.v1.SecretProjection", &[]),
    ("io.k8s.api.events.v1.Event", &["eventTime"]),
];

fn type_of(name: &str) -> Option<super::types::AddSchema> {
    TYPES.binary_search_by(|(n, _)| (*n).cmp(name)).ok().map(|i| TYPES[i].1)
}

/// The kind a list definition lists (`io.k8s.api.core.v1.PodList` → its Pod's definition
/// and the list's GVK), when it is a list kind k8s-openapi has no type for.
fn list_element(name: &str) -> Option<&'static str> {
    let (g, v, k, _) = KINDS.iter().find(|(_, _, _, n)| *n == name)?;
    let item = k.strip_suffix("List")?;
    schema::definition_name_of(g, v, item)
}

/// `build`, plus the definitions of custom resources among `resources` (and the
/// metadata definitions they refer to).
pub fn build_with_custom(
    roots: &BTreeSet<String>,
    resources: &[std::sync::Arc<krate_api::ResourceInfo>],
    flavor: Flavor,
) -> Map<String, Value> {
    let custom = super::custom::definitions(resources, flavor);
    if custom.is_empty() {
        return build(roots, flavor);
    }
    let mut roots = roots.clone();
    roots.retain(|r| !custom.contains_key(r));
    let mut defs = build(&roots, flavor);
    // ObjectMeta and ListMeta, reached from custom definitions only by name.
    let settings = match flavor {
        Flavor::V3 => SchemaSettings::openapi3().with(|s| s.meta_schema = None),
        Flavor::V2 => SchemaSettings::draft07().with(|s| {
            s.meta_schema = None;
            s.transforms.clear();
            s.definitions_path = "/definitions".into();
        }),
    };
    let mut generator = settings.into_generator();
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>();
    for (name, mut def) in generator.take_definitions(true) {
        if !defs.contains_key(&name) {
            decorate(&name, &mut def);
            defs.insert(name, def);
        }
    }
    defs.extend(custom);
    defs
}

/// Every schema reachable from `roots`, keyed by definition name, with extensions.
pub fn build(roots: &BTreeSet<String>, flavor: Flavor) -> Map<String, Value> {
    let settings = match flavor {
        Flavor::V3 => SchemaSettings::openapi3().with(|s| s.meta_schema = None),
        Flavor::V2 => SchemaSettings::draft07().with(|s| {
            s.meta_schema = None;
            s.transforms.clear();
            s.definitions_path = "/definitions".into();
        }),
    };
    let mut generator = settings.into_generator();
    let mut lists = Vec::new();
    for name in roots {
        if let Some(add) = type_of(name) {
            add(&mut generator);
        } else if let Some(item) = list_element(name)
            && let Some(add) = type_of(item)
        {
            add(&mut generator);
            lists.push((name.clone(), item));
        }
    }
    // Lists are built here, not by schemars: what they reach is added by hand.
    if !lists.is_empty() {
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>();
    }
    let mut defs = generator.take_definitions(true);
    for (name, item) in lists {
        defs.insert(name.clone(), list_schema(&name, item, flavor));
    }
    for (name, def) in defs.iter_mut() {
        decorate(name, def);
    }
    defs
}

const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// A list kind's schema, as upstream's (k8s-openapi's `List<T>` is generic).
fn list_schema(name: &str, item: &str, flavor: Flavor) -> Value {
    let kind = name.rsplit('.').next().unwrap_or(name);
    let item_kind = item.rsplit('.').next().unwrap_or(item);
    let meta_ref = json!({"$ref": flavor.reference(LIST_META)});
    let meta_description = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
    let metadata = match flavor {
        Flavor::V3 => json!({"allOf": [meta_ref], "default": {}, "description": meta_description}),
        Flavor::V2 => json!({"$ref": flavor.reference(LIST_META), "description": meta_description}),
    };
    json!({
        "description": format!("{kind} is a list of {item_kind} objects."),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"},
            "items": {"type": "array", "description": format!("items is a list of {item_kind} objects."), "items": {"$ref": flavor.reference(item)}},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"},
            "metadata": metadata,
        },
    })
}

/// Adds upstream's extensions to one definition.
fn decorate(name: &str, def: &mut Value) {
    let Some(obj) = def.as_object_mut() else { return };
    let gvks: Vec<Value> = KINDS
        .iter()
        .filter(|(_, _, _, n)| *n == name)
        .map(|(g, v, k, _)| json!({"group": g, "kind": k, "version": v}))
        .collect();
    if !gvks.is_empty() {
        obj.insert("x-kubernetes-group-version-kind".into(), Value::Array(gvks));
        if !METADATA_REQUIRED.contains(&name)
            && let Some(Value::Array(required)) = obj.get_mut("required")
        {
            required.retain(|r| r != "metadata");
            if required.is_empty() {
                obj.remove("required");
            }
        }
    }
    if let Some((_, required)) = REQUIRED_AS_UPSTREAM.iter().find(|(n, _)| *n == name) {
        match required.is_empty() {
            true => obj.remove("required"),
            false => obj.insert("required".into(), json!(required)),
        };
    }
    let Some(facts) = schema::definition(name) else { return };
    if let Some(mt) = facts.map_type {
        obj.insert("x-kubernetes-map-type".into(), json!(mt));
    }
    let Some(Value::Object(props)) = obj.get_mut("properties") else { return };
    for field in facts.fields {
        let Some(Value::Object(prop)) = props.get_mut(field.name) else { continue };
        if let Some(lt) = field.list_type {
            prop.insert("x-kubernetes-list-type".into(), json!(lt));
        }
        if !field.list_map_keys.is_empty() {
            prop.insert("x-kubernetes-list-map-keys".into(), json!(field.list_map_keys));
        }
        if let Some(mt) = field.map_type {
            prop.insert("x-kubernetes-map-type".into(), json!(mt));
        }
        if let Some(ps) = field.patch_strategy {
            prop.insert("x-kubernetes-patch-strategy".into(), json!(ps));
        }
        if let Some(mk) = field.merge_key {
            prop.insert("x-kubernetes-patch-merge-key".into(), json!(mk));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_schemas_carry_upstream_extensions() {
        let roots: BTreeSet<String> =
            ["io.k8s.api.core.v1.Pod".to_string(), "io.k8s.api.core.v1.PodList".to_string()].into();
        let defs = build(&roots, Flavor::V3);
        let spec = &defs["io.k8s.api.core.v1.PodSpec"];
        let containers = &spec["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-list-type"], "map");
        assert_eq!(containers["items"]["$ref"], "#/components/schemas/io.k8s.api.core.v1.Container");
        let pod = &defs["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
        assert!(pod.get("required").is_none(), "{pod}");
        // A reference with a description is wrapped, as upstream's v3.
        assert_eq!(pod["properties"]["spec"]["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.core.v1.PodSpec");
        assert_eq!(
            defs["io.k8s.api.core.v1.PodList"]["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Pod"
        );
        assert!(defs.contains_key(LIST_META));
        let v2 = build(&roots, Flavor::V2);
        assert_eq!(
            v2["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
    }
}
