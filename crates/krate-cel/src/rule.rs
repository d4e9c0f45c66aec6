//! CRD `x-kubernetes-validations` rules, evaluated as upstream's apiextensions
//! validator does: `self` (and `oldSelf` for transition rules) typed by the
//! structural schema of the node the rule sits on.

use serde_json::Value as Json;

use crate::{Activation, CompileError, CostBudget, EvalError, Output, Program, compile};

/// One entry of `x-kubernetes-validations`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rule {
    pub rule: String,
    pub message: String,
    pub message_expression: String,
    /// FieldValueInvalid (default), FieldValueForbidden, FieldValueRequired, FieldValueDuplicate.
    pub reason: Option<String>,
    pub field_path: Option<String>,
    pub optional_old_self: bool,
}

impl Rule {
    /// Reads an entry as the API carries it (`rule`, `message`, `messageExpression`,
    /// `reason`, `fieldPath`, `optionalOldSelf`).
    pub fn from_json(v: &Json) -> Rule {
        let s = |k: &str| v.get(k).and_then(Json::as_str).unwrap_or_default().to_string();
        Rule {
            rule: s("rule"),
            message: s("message"),
            message_expression: s("messageExpression"),
            reason: v.get("reason").and_then(Json::as_str).map(str::to_string),
            field_path: v.get("fieldPath").and_then(Json::as_str).map(str::to_string),
            optional_old_self: v.get("optionalOldSelf").and_then(Json::as_bool).unwrap_or(false),
        }
    }

    /// Upstream's ruleErrorString: the message if there is one, else the rule.
    pub fn error_string(&self) -> &str {
        if self.message.trim().is_empty() { self.rule.trim() } else { self.message.trim() }
    }

    /// Upstream's ruleMessageOrDefault.
    pub fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.error_string())
        } else {
            self.message.trim().to_string()
        }
    }
}

/// Why a rule does not compile; `Display` is upstream's wording for the CRD's
/// validation error detail.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleCompileError {
    #[error("compilation failed: {}", join(.0))]
    Rule(Vec<CompileError>),
    #[error("messageExpression compilation failed: {}", join(.0))]
    MessageExpression(Vec<CompileError>),
}

fn join(errors: &[CompileError]) -> String {
    errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
}

/// A rule compiled once (per CRD version), evaluated per object.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    pub rule: Rule,
    program: Program,
    message: Option<Program>,
    uses_old_self: bool,
}

/// The field error a failed rule becomes, relative to the node the rule sits on.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// `fieldPath` of the rule, to append to the node's path (for example `.spec.x`).
    pub field_path: Option<String>,
    /// FieldValueInvalid, FieldValueForbidden, FieldValueRequired or FieldValueDuplicate.
    pub reason: String,
    pub detail: String,
}

/// The outcome of one rule on one value.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Valid,
    /// A transition rule with no old value (and no optionalOldSelf): not evaluated.
    Skipped,
    Invalid(Violation),
    /// The rule could not be evaluated: an Invalid field error with this detail on
    /// the node's path. `stop` means no further rules may run (cost exhausted).
    Error {
        detail: String,
        stop: bool,
    },
}

/// Compiles a rule with `self` and `oldSelf` declared.
pub fn compile_rule(rule: &Rule) -> Result<CompiledRule, RuleCompileError> {
    let program = compile(&rule.rule, &["self", "oldSelf"]).map_err(RuleCompileError::Rule)?;
    let message = if rule.message_expression.trim().is_empty() {
        None
    } else {
        Some(compile(&rule.message_expression, &["self", "oldSelf"]).map_err(RuleCompileError::MessageExpression)?)
    };
    let uses_old_self = program.references("oldSelf");
    Ok(CompiledRule { rule: rule.clone(), program, message, uses_old_self })
}

/// The largest messageExpression result upstream accepts.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

impl CompiledRule {
    /// Whether the rule references `oldSelf` (a transition rule).
    pub fn is_transition_rule(&self) -> bool {
        self.uses_old_self
    }

    /// Evaluates the rule on `value` (with `old` on updates when the node existed
    /// before), `schema` being the node's structural schema.
    pub fn evaluate(&self, value: &Json, old: Option<&Json>, schema: &Json, budget: &mut CostBudget) -> Outcome {
        if self.uses_old_self && old.is_none() && !self.rule.optional_old_self {
            return Outcome::Skipped;
        }
        let mut act = Activation::new();
        act.insert_with_schema("self", value, schema);
        if let Some(old) = old {
            act.insert_with_schema("oldSelf", old, schema);
        }
        let mut rule_act = act.clone();
        if self.rule.optional_old_self {
            let wrapped = optional(old.map(|o| {
                let mut a = Activation::new();
                a.insert_with_schema("o", o, schema);
                a
            }));
            rule_act.vars.insert("oldSelf".into(), wrapped);
        }
        let es = self.rule.error_string();
        match self.program.evaluate(&rule_act, budget) {
            Ok(out) if out.as_bool() == Some(true) => Outcome::Valid,
            Ok(out) if out.as_bool() == Some(false) => {
                let detail = match &self.message {
                    Some(m) => match self.message(m, &act, budget) {
                        Ok(Some(d)) => d,
                        Ok(None) => self.rule.message_or_default(),
                        Err(stop) => return stop,
                    },
                    None => self.rule.message_or_default(),
                };
                Outcome::Invalid(Violation {
                    field_path: self.rule.field_path.clone(),
                    reason: self.rule.reason.clone().unwrap_or_else(|| "FieldValueInvalid".into()),
                    detail,
                })
            }
            Ok(out) => Outcome::Error {
                detail: format!("validation rule result is {} not bool evaluating rule: {es}", out.kind()),
                stop: false,
            },
            Err(EvalError::BudgetExhausted) => {
                Outcome::Error { detail: EvalError::BudgetExhausted.to_string(), stop: true }
            }
            Err(e @ EvalError::CostLimitExceeded { .. }) => Outcome::Error {
                detail: format!(
                    "'{e}': no further validation rules will be run due to call cost exceeds limit for rule: {es}"
                ),
                stop: true,
            },
            Err(EvalError::Runtime(e)) if e.starts_with("no such overload") => Outcome::Error {
                detail: format!(
                    "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {es}"
                ),
                stop: false,
            },
            Err(EvalError::Runtime(e)) => Outcome::Error { detail: format!("{e} evaluating rule: {es}"), stop: false },
        }
    }

    /// The messageExpression's message; `Ok(None)` when it fails in a way upstream
    /// falls back to `message` for, `Err` when evaluation must stop.
    fn message(&self, m: &Program, act: &Activation, budget: &mut CostBudget) -> Result<Option<String>, Outcome> {
        match m.evaluate(act, budget) {
            Ok(out) => {
                let Some(s) = out.as_str() else { return Ok(None) };
                let s = s.trim();
                if s.is_empty() || s.len() > MAX_MESSAGE_BYTES || s.contains('\n') {
                    return Ok(None);
                }
                Ok(Some(s.to_string()))
            }
            Err(EvalError::BudgetExhausted) => Err(Outcome::Error {
                detail: "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run"
                    .into(),
                stop: true,
            }),
            Err(EvalError::CostLimitExceeded { .. }) => Err(Outcome::Error {
                detail: format!(
                    "no further validation rules will be run due to call cost exceeds limit for messageExpression: {:?}",
                    self.rule.message_expression
                ),
                stop: true,
            }),
            Err(EvalError::Runtime(_)) => Ok(None),
        }
    }
}

/// `optional.of(old)` or `optional.none()`, built through the interpreter so the
/// value is the library's own optional type.
fn optional(old: Option<Activation>) -> kube_cel::cel::Value {
    let (src, act) = match old {
        Some(a) => ("optional.of(o)", a),
        None => ("optional.none()", Activation::new()),
    };
    compile(src, &["o"])
        .ok()
        .and_then(|p| p.evaluate(&act, &mut CostBudget::default()).ok())
        .map(|o: Output| o.0)
        .unwrap_or(kube_cel::cel::Value::Null)
}
