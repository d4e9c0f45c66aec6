//! x-kubernetes-validations through krate-cel: the `RuleEvaluator` the CRD loop gives
//! custom resources. Rules compile once (cached by their text and message expression);
//! each node's rules share one cost budget, and a rule that exhausts it stops the rest.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::Value;

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::crd::schema::Rule;
use krate_api::crd::validate::RuleEvaluator;
use krate_api::hooks::{RestHooks, Undos};
use krate_api::{ApiError, ApiResult, Cause, Registry, Target};
use krate_cel::CostBudget;
use krate_cel::rule::{self as cel_rule, CompiledRule, Outcome};

#[derive(Default)]
pub struct CelRules {
    compiled: Mutex<HashMap<(String, String), Result<CompiledRule, String>>>,
}

fn join(path: &str, field_path: Option<&str>) -> String {
    match field_path.map(|f| f.trim_start_matches('.')).filter(|f| !f.is_empty()) {
        Some(f) if path.is_empty() => f.to_string(),
        Some(f) => format!("{path}.{f}"),
        None => path.to_string(),
    }
}

impl CelRules {
    fn compile(&self, r: &Rule) -> Result<CompiledRule, String> {
        let key = (r.rule.clone(), r.message_expression.clone().unwrap_or_default());
        let mut cache = self.compiled.lock();
        cache
            .entry(key)
            .or_insert_with(|| {
                let rule = cel_rule::Rule {
                    rule: r.rule.clone(),
                    message: r.message.clone().unwrap_or_default(),
                    message_expression: r.message_expression.clone().unwrap_or_default(),
                    reason: r.reason.clone(),
                    field_path: r.field_path.clone(),
                    optional_old_self: r.optional_old_self,
                };
                cel_rule::compile_rule(&rule).map_err(|e| e.to_string())
            })
            .clone()
    }
}

impl RuleEvaluator for CelRules {
    fn evaluate(&self, path: &str, rules: &[Rule], schema: &Value, value: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut budget = CostBudget::default();
        let mut out = Vec::new();
        let shown = format!("\"{}\"", krate_api::crd::validate::type_name(value));
        for r in rules {
            let compiled = match self.compile(r) {
                Ok(c) => c,
                Err(e) => {
                    out.push(Cause::new("FieldValueInvalid", format!("Invalid value: {shown}: {e}"), path));
                    continue;
                }
            };
            match compiled.evaluate(value, old, schema, &mut budget) {
                Outcome::Valid | Outcome::Skipped => {}
                Outcome::Invalid(v) => {
                    let field = join(path, v.field_path.as_deref());
                    let message = match v.reason.as_str() {
                        "FieldValueForbidden" => format!("Forbidden: {}", v.detail),
                        "FieldValueRequired" => format!("Required value: {}", v.detail),
                        "FieldValueDuplicate" => format!("Duplicate value: {}", v.detail),
                        _ => format!("Invalid value: {shown}: {}", v.detail),
                    };
                    out.push(Cause::new(v.reason, message, field));
                }
                Outcome::Error { detail, stop } => {
                    out.push(Cause::new("FieldValueInvalid", format!("Invalid value: {shown}: {detail}"), path));
                    if stop {
                        break;
                    }
                }
            }
        }
        out
    }
}

/// Refuses CustomResourceDefinitions whose x-kubernetes-validations do not compile, as
/// upstream's CRD validation compiles every rule and messageExpression: one Invalid cause
/// per rule, at the rule's place in the schema.
pub struct RuleCompileCheck {
    pub rules: Arc<CelRules>,
}

impl RuleCompileCheck {
    fn causes(&self, crd: &Value) -> Vec<Cause> {
        let mut out = Vec::new();
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten();
        for (i, v) in versions.enumerate() {
            if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
                self.walk(schema, &format!("spec.versions[{i}].schema.openAPIV3Schema"), &mut out);
            }
        }
        out
    }

    fn walk(&self, node: &Value, path: &str, out: &mut Vec<Cause>) {
        let rules = node.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten();
        for (j, r) in rules.enumerate() {
            let rule = Rule::from_json(r);
            if let Err(error) = self.rules.compile(&rule) {
                let field = if error.starts_with("messageExpression") { "messageExpression" } else { "rule" };
                let value =
                    if field == "rule" { &rule.rule } else { rule.message_expression.as_ref().unwrap_or(&rule.rule) };
                out.push(Cause::invalid(format!("{path}.x-kubernetes-validations[{j}].{field}"), value, error));
            }
        }
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (name, child) in properties {
                self.walk(child, &format!("{path}.properties[{name}]"), out);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child) = node.get(key).filter(|c| c.is_object()) {
                self.walk(child, &format!("{path}.{key}"), out);
            }
        }
    }

    fn check(&self, crd: &Value) -> ApiResult<()> {
        let causes = self.causes(crd);
        if causes.is_empty() {
            return Ok(());
        }
        let name = krate_api::object::name(crd);
        let target = Target::new("apiextensions.k8s.io", "customresourcedefinitions", "CustomResourceDefinition", name);
        Err(ApiError::invalid(&target, causes))
    }
}

#[async_trait]
impl RestHooks for RuleCompileCheck {
    async fn before_create(&self, _: &Registry, obj: &mut Value, _dry_run: bool) -> ApiResult<Undos> {
        self.check(obj).map(|()| Vec::new())
    }
    async fn before_update(&self, _: &Registry, new: &mut Value, _old: &Value, _dry_run: bool) -> ApiResult<Undos> {
        self.check(new).map(|()| Vec::new())
    }
    async fn after_update(&self, _: &Registry, _new: &Value, _old: &Value) {}
    async fn after_delete(&self, _: &Registry, _old: &Value) {}
}
