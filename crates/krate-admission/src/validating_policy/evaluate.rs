//! One policy evaluated for one request and one param (upstream's validator):
//! matchConditions, variables, validations with their messages, audit annotations.

use std::collections::BTreeMap;

use serde_json::Value;

use krate_cel::{Activation, CostBudget, EvalError, Output, Program};

use super::compiled::{Compiled, Policy};

/// What a validation decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Admit,
    /// A failed validation (`error: false`) or an error under failurePolicy Fail.
    Deny {
        message: String,
        reason: Option<String>,
        error: bool,
    },
}

#[derive(Debug, Default)]
pub struct Outcome {
    /// Each validation's decision, by its index in spec.validations.
    pub decisions: Vec<(usize, Decision)>,
    /// Audit annotations to publish (key without the policy prefix).
    pub annotations: Vec<(String, String)>,
    /// Audit annotation errors under failurePolicy Fail: these deny.
    pub annotation_errors: Vec<String>,
}

fn error_decision(policy: &Policy, message: String) -> Option<Decision> {
    policy.fail_closed.then_some(Decision::Deny { message, reason: None, error: true })
}

fn runtime_error(expression: &str, e: &EvalError) -> String {
    match e {
        EvalError::BudgetExhausted => e.to_string(),
        e => format!("expression '{expression}' resulted in error: {e}"),
    }
}

/// The composited variables evaluated in order, each seeing the ones before it.
struct Variables {
    values: BTreeMap<String, Output>,
    errors: BTreeMap<String, String>,
}

fn eval(program: &Compiled, expression: &str, act: &Activation, budget: &mut CostBudget) -> Result<Output, String> {
    let program: &Program = program.as_ref().map_err(Clone::clone)?;
    program.evaluate(act, budget).map_err(|e| runtime_error(expression, &e))
}

/// Fails an expression that uses a variable whose own evaluation failed, with that error.
fn variable_error(program: &Compiled, vars: &Variables) -> Option<String> {
    let p = program.as_ref().ok()?;
    vars.errors.iter().find(|(name, _)| p.references_field("variables", name)).map(|(_, e)| e.clone())
}

pub fn validate(policy: &Policy, base: &Activation, budget: &mut CostBudget) -> Outcome {
    let mut out = Outcome::default();
    let mut act = base.clone();
    act.insert_outputs("variables", &BTreeMap::new());

    // matchConditions: any false skips the policy; errors follow failurePolicy.
    let mut errors = Vec::new();
    for (name, program) in &policy.match_conditions {
        let src = program.as_ref().map(|p| p.source().to_string()).unwrap_or_else(|_| name.clone());
        match eval(program, &src, &act, budget) {
            Ok(o) if o.as_bool() == Some(false) => return out,
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        let message = if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) };
        if let Some(d) = error_decision(policy, message) {
            out.decisions.push((0, d));
        }
        return out;
    }

    let mut vars = Variables { values: BTreeMap::new(), errors: BTreeMap::new() };
    for (name, program) in &policy.variables {
        act.insert_outputs("variables", &vars.values);
        let src = program.as_ref().map(|p| p.source().to_string()).unwrap_or_default();
        let result = match variable_error(program, &vars) {
            Some(e) => Err(e),
            None => eval(program, &src, &act, budget),
        };
        match result {
            Ok(v) => {
                vars.values.insert(name.clone(), v);
            }
            Err(e) => {
                vars.errors.insert(name.clone(), e);
            }
        }
    }
    act.insert_outputs("variables", &vars.values);

    for (i, v) in policy.validations.iter().enumerate() {
        let result = match variable_error(&v.program, &vars) {
            Some(e) => Err(e),
            None => eval(&v.program, &v.expression, &act, budget),
        };
        let decision = match result {
            Ok(o) if o.as_bool() == Some(true) => Some(Decision::Admit),
            Ok(_) => {
                let from_expression = v.message_expression.as_ref().and_then(|m| {
                    let m = eval(m, "", &act, budget).ok()?;
                    let s = m.as_str()?.trim();
                    (!s.is_empty() && s.len() <= 5 * 1024 && !s.contains('\n')).then(|| s.to_string())
                });
                let message = from_expression
                    .or_else(|| Some(v.message.trim().to_string()).filter(|m| !m.is_empty()))
                    .unwrap_or_else(|| format!("failed expression: {}", v.expression.trim()));
                Some(Decision::Deny { message, reason: v.reason.clone(), error: false })
            }
            Err(e) => error_decision(policy, e),
        };
        if let Some(d) = decision {
            out.decisions.push((i, d));
        }
        if budget.remaining() == 0 {
            break;
        }
    }

    for a in &policy.audit_annotations {
        match eval(&a.program, &a.value_expression, &act, budget) {
            Ok(o) => match (o.as_str(), o.kind()) {
                (Some(s), _) if !s.trim().is_empty() => out.annotations.push((a.key.clone(), s.trim().to_string())),
                (Some(_), _) | (None, krate_cel::ValueKind::Null) => {}
                (None, kind) => {
                    if policy.fail_closed {
                        out.annotation_errors.push(format!(
                            "valueExpression '{}' resulted in unsupported return type: {kind}. Return type must be either string or null.",
                            a.value_expression
                        ));
                    }
                }
            },
            Err(e) => {
                if policy.fail_closed {
                    out.annotation_errors.push(e);
                }
            }
        }
    }
    out
}

/// The `request` variable: upstream's AdmissionRequest without the objects, every
/// field present (typed fields read as their zero values upstream).
pub fn request_value(attrs: &krate_api::admission::Attributes<'_>, operation: &str, name: &str) -> Value {
    let r = attrs.resource;
    let options_kind = match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        "DELETE" => "DeleteOptions",
        _ => "",
    };
    let options = if options_kind.is_empty() {
        Value::Null
    } else {
        serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": options_kind})
    };
    let kind = serde_json::json!({"group": r.group, "version": r.version, "kind": r.kind});
    let resource = serde_json::json!({"group": r.group, "version": r.version, "resource": r.plural});
    serde_json::json!({
        "uid": "",
        "kind": kind,
        "resource": resource,
        "subResource": attrs.subresource.unwrap_or(""),
        "requestKind": kind,
        "requestResource": resource,
        "requestSubResource": attrs.subresource.unwrap_or(""),
        "name": name,
        "namespace": attrs.namespace.unwrap_or(""),
        "operation": operation,
        "userInfo": {
            "username": attrs.user.name,
            "uid": attrs.user.uid,
            "groups": attrs.user.groups,
            "extra": attrs.user.extra,
        },
        "dryRun": attrs.dry_run,
        "options": options,
    })
}

/// The `namespaceObject` variable: the namespace with the metadata upstream exposes.
pub fn namespace_value(ns: &Value) -> Value {
    let mut meta = serde_json::Map::new();
    if let Some(m) = ns.get("metadata").and_then(Value::as_object) {
        for k in [
            "name",
            "generateName",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "labels",
            "annotations",
            "finalizers",
        ] {
            if let Some(v) = m.get(k) {
                meta.insert(k.into(), v.clone());
            }
        }
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta,
        "spec": ns.get("spec").cloned().unwrap_or(serde_json::json!({})),
        "status": ns.get("status").cloned().unwrap_or(serde_json::json!({})),
    })
}
