//! OpenAPI v3 documents: one per group-version, as upstream's /openapi/v3/apis/G/V.

use serde_json::{Map, Value, json};

use super::ops::{Operation, Param, PathItem, Payload};
use super::schemas::{self, Flavor};

const MEDIA: &[&str] = &["application/json", "application/yaml"];

fn schema(p: &Payload) -> Value {
    p.schema(Flavor::V3)
}

/// A parameter; `kind` names what `name` is the name of ("name of the Pod").
fn parameter(p: Param, kind: &str) -> Value {
    let s = p.spec();
    let named = format!("name of the {kind}");
    let description = if p == Param::Name { named.as_str() } else { s.description };
    let mut v = json!({
        "name": s.name,
        "in": s.location,
        "description": description,
        "schema": {"type": s.ty, "uniqueItems": true},
    });
    if s.location == "path" {
        v["required"] = json!(true);
    }
    v
}

fn operation(op: &Operation) -> Value {
    let mut v = json!({
        "tags": [op.tag],
        "description": op.description,
        "operationId": op.id,
    });
    if !op.params.is_empty() {
        v["parameters"] = op.params.iter().map(|p| parameter(*p, &op.gvk.kind)).collect();
    }
    if let Some((payload, required)) = &op.body {
        let types: &[&str] = if op.patch { super::ops::PATCH_TYPES } else { &["*/*"] };
        let content: Map<String, Value> =
            types.iter().map(|t| (t.to_string(), json!({"schema": schema(payload)}))).collect();
        v["requestBody"] = json!({"content": content});
        if *required {
            v["requestBody"]["required"] = json!(true);
        }
    }
    let mut responses = Map::new();
    for (code, description, payload) in &op.responses {
        let media: &[&str] = if *payload == Payload::Text { &["*/*"] } else { MEDIA };
        let content: Map<String, Value> =
            media.iter().map(|t| (t.to_string(), json!({"schema": schema(payload)}))).collect();
        responses.insert(code.to_string(), json!({"description": description, "content": content}));
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    v["responses"] = Value::Object(responses);
    v["x-kubernetes-action"] = json!(op.action);
    v["x-kubernetes-group-version-kind"] =
        json!({"group": op.gvk.group, "version": op.gvk.version, "kind": op.gvk.kind});
    v
}

pub fn document(paths: &[PathItem], resources: &[std::sync::Arc<krate_api::ResourceInfo>]) -> Value {
    let out = super::ops::path_items(paths, operation, parameter);
    let schemas = schemas::build_with_custom(&super::ops::referenced(paths), resources, Flavor::V3);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": out,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        },
        "security": [{"BearerToken": []}],
    })
}
