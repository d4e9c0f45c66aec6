//! x-kubernetes-validations through krate-cel: the `RuleEvaluator` the CRD loop gives
//! custom resources. Rules compile once (cached by their text and message expression);
//! each node's rules share one cost budget, and a rule that exhausts it stops the rest.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::Value;

use krate_api::Cause;
use krate_api::crd::schema::Rule;
use krate_api::crd::validate::RuleEvaluator;
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
