//! Definitions of custom resources, from their CRD's openAPIV3Schema: named as upstream
//! names them (the group reversed, then version and kind: `com.example.v1.Widget`),
//! with apiVersion, kind and metadata filled in and the kind's GVK, plus the list kind.

use serde_json::{Map, Value, json};

use krate_api::ResourceInfo;

use super::schemas::Flavor;

pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

const API_VERSION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The definition name of a custom kind (or its list, with `kind` = "WidgetList").
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

fn reference(flavor: Flavor, name: &str, description: &str) -> Value {
    match flavor {
        Flavor::V3 => json!({"allOf": [{"$ref": flavor.reference(name)}], "description": description}),
        Flavor::V2 => json!({"$ref": flavor.reference(name), "description": description}),
    }
}

/// The kind and list definitions of the resources with a schema of their own.
pub fn definitions(resources: &[std::sync::Arc<ResourceInfo>], flavor: Flavor) -> Map<String, Value> {
    let mut out = Map::new();
    for r in resources {
        let Some(schema) = r.strategy.openapi_schema() else { continue };
        let gvk = json!([{"group": r.group, "kind": r.kind, "version": r.version}]);
        let mut kind = schema.clone();
        if !kind.is_object() {
            kind = json!({"type": "object"});
        }
        if !kind.get("properties").is_some_and(Value::is_object) {
            kind["properties"] = json!({});
        }
        kind["properties"]["apiVersion"] = json!({"type": "string", "description": API_VERSION});
        kind["properties"]["kind"] = json!({"type": "string", "description": KIND});
        kind["properties"]["metadata"] = reference(flavor, OBJECT_META, METADATA);
        kind["x-kubernetes-group-version-kind"] = gvk.clone();
        let name = definition_name(&r.group, &r.version, &r.kind);
        let list_kind = format!("{}List", r.kind);
        let list = json!({
            "description": format!("{list_kind} is a list of {}", r.kind),
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string", "description": API_VERSION},
                "items": {"type": "array", "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", r.plural), "items": {"$ref": flavor.reference(&name)}},
                "kind": {"type": "string", "description": KIND},
                "metadata": reference(flavor, LIST_META, "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"),
            },
            "x-kubernetes-group-version-kind": [{"group": r.group, "kind": list_kind, "version": r.version}],
        });
        out.insert(definition_name(&r.group, &r.version, &list_kind), list);
        out.insert(name, kind);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reverse_the_group() {
        assert_eq!(definition_name("stable.example.com", "v1", "CronTab"), "com.example.stable.v1.CronTab");
    }
}
