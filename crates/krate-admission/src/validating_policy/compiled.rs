//! A ValidatingAdmissionPolicy with its expressions compiled once per version.

use serde_json::Value;

use krate_cel::{CompileError, Program, compile};

/// The variables every policy expression may use.
pub const VARIABLES: &[&str] =
    &["object", "oldObject", "request", "params", "namespaceObject", "authorizer", "variables"];

/// An expression compiled, or why not (upstream reports compile errors when the
/// expression is evaluated, as "compilation error: ...").
pub type Compiled = Result<Program, String>;

fn compile_one(src: &str) -> Compiled {
    compile(src, VARIABLES).map_err(|errors| {
        let list: Vec<String> = errors.iter().map(CompileError::to_string).collect();
        format!("compilation error: compilation failed: {}", list.join("\n"))
    })
}

pub struct Validation {
    pub expression: String,
    pub program: Compiled,
    pub message: String,
    pub message_expression: Option<Compiled>,
    pub reason: Option<String>,
}

pub struct AuditAnnotation {
    pub key: String,
    pub value_expression: String,
    pub program: Compiled,
}

pub struct Policy {
    pub name: String,
    pub resource_version: String,
    pub fail_closed: bool,
    pub param_kind: Option<(String, String)>,
    pub match_constraints: Option<Value>,
    pub match_conditions: Vec<(String, Compiled)>,
    pub variables: Vec<(String, Compiled)>,
    pub validations: Vec<Validation>,
    pub audit_annotations: Vec<AuditAnnotation>,
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn items<'a>(v: &'a Value, k: &str) -> impl Iterator<Item = &'a Value> {
    v.get(k).and_then(Value::as_array).into_iter().flatten()
}

impl Policy {
    pub fn compile(obj: &Value) -> Policy {
        let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
        let param_kind = spec
            .get("paramKind")
            .filter(|p| !p.is_null())
            .map(|p| (s(p, "apiVersion").to_string(), s(p, "kind").to_string()));
        Policy {
            name: obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string(),
            resource_version: obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            fail_closed: s(&spec, "failurePolicy") != "Ignore",
            param_kind,
            match_constraints: spec.get("matchConstraints").cloned(),
            match_conditions: items(&spec, "matchConditions")
                .map(|c| (s(c, "name").to_string(), compile_one(s(c, "expression"))))
                .collect(),
            variables: items(&spec, "variables")
                .map(|c| (s(c, "name").to_string(), compile_one(s(c, "expression"))))
                .collect(),
            validations: items(&spec, "validations")
                .map(|v| Validation {
                    expression: s(v, "expression").to_string(),
                    program: compile_one(s(v, "expression")),
                    message: s(v, "message").to_string(),
                    message_expression: Some(s(v, "messageExpression"))
                        .filter(|m| !m.trim().is_empty())
                        .map(compile_one),
                    reason: v.get("reason").and_then(Value::as_str).map(str::to_string),
                })
                .collect(),
            audit_annotations: items(&spec, "auditAnnotations")
                .map(|a| AuditAnnotation {
                    key: s(a, "key").to_string(),
                    value_expression: s(a, "valueExpression").to_string(),
                    program: compile_one(s(a, "valueExpression")),
                })
                .collect(),
        }
    }
}
