//! The Swagger 2.0 document of every served group-version, as upstream's /openapi/v2.

use serde_json::{Map, Value, json};

use super::ops::{Operation, Param, PathItem, Payload};
use super::schemas::{self, Flavor};

fn schema(p: &Payload) -> Value {
    p.schema(Flavor::V2)
}

/// A parameter; `kind` names what `name` is the name of ("name of the Pod").
fn parameter(p: Param, kind: &str) -> Value {
    let s = p.spec();
    let named = format!("name of the {kind}");
    let description = if p == Param::Name { named.as_str() } else { s.description };
    let mut v =
        json!({"name": s.name, "in": s.location, "description": description, "type": s.ty, "uniqueItems": true});
    if s.location == "path" {
        v["required"] = json!(true);
    }
    v
}

fn operation(op: &Operation) -> Value {
    let mut params: Vec<Value> = Vec::new();
    if let Some((payload, required)) = &op.body {
        let mut body = json!({"name": "body", "in": "body", "schema": schema(payload)});
        if *required {
            body["required"] = json!(true);
        }
        params.push(body);
    }
    params.extend(op.params.iter().map(|p| parameter(*p, &op.gvk.kind)));
    let mut responses = Map::new();
    for (code, description, payload) in &op.responses {
        responses.insert(code.to_string(), json!({"description": description, "schema": schema(payload)}));
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    let consumes: Vec<&str> = if op.patch { super::ops::PATCH_TYPES.to_vec() } else { vec!["*/*"] };
    let text = op.responses.iter().any(|(_, _, p)| *p == Payload::Text);
    let produces: &[&str] = if text { &["*/*"] } else { &["application/json", "application/yaml"] };
    let mut v = json!({
        "tags": [op.tag],
        "description": op.description,
        "operationId": op.id,
        "consumes": consumes,
        "produces": produces,
        "schemes": ["https"],
        "responses": responses,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": {"group": op.gvk.group, "version": op.gvk.version, "kind": op.gvk.kind},
    });
    if !params.is_empty() {
        v["parameters"] = Value::Array(params);
    }
    v
}

pub fn document(paths: &[PathItem], resources: &[std::sync::Arc<krate_api::ResourceInfo>]) -> Value {
    let out = super::ops::path_items(paths, operation, parameter);
    let definitions = schemas::build_with_custom(&super::ops::referenced(paths), resources, Flavor::V2);
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": out,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}
