//! A webhook's matchConditions: CEL expressions over the request (`object`, `oldObject`,
//! `request`) that must all be true for the webhook to be called. Any false skips it;
//! otherwise an error skips it under failurePolicy Ignore and fails the request under Fail.

use std::sync::Arc;

use serde_json::Value;

use krate_cel::{Activation, CostBudget, Program, compile};

/// `authorizer` is declared (upstream's variable) but not bound: expressions using it
/// fail at evaluation, and failurePolicy decides.
const VARIABLES: &[&str] = &["object", "oldObject", "request", "authorizer"];

#[derive(Clone, Debug, Default)]
pub struct MatchConditions(Arc<Vec<(String, Result<Program, String>)>>);

/// What the conditions decided.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Call,
    Skip,
    Error(String),
}

impl MatchConditions {
    pub fn parse(hook: &Value) -> MatchConditions {
        let list = hook.get("matchConditions").and_then(Value::as_array).into_iter().flatten();
        MatchConditions(Arc::new(
            list.map(|c| {
                let name = c.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                let source = c.get("expression").and_then(Value::as_str).unwrap_or_default();
                let program = compile(source, VARIABLES).map_err(|errors| {
                    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    format!("compilation failed: {}", list.join("\n"))
                });
                (name, program)
            })
            .collect(),
        ))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn evaluate(&self, activation: &Activation) -> Verdict {
        let mut budget = CostBudget::default();
        let mut errors = Vec::new();
        for (name, program) in self.0.iter() {
            let result = program.as_ref().map_err(Clone::clone).and_then(|p| {
                p.evaluate(activation, &mut budget)
                    .map_err(|e| format!("expression '{}' resulted in error: {e}", p.source()))
            });
            match result.map(|o| o.as_bool()) {
                Ok(Some(false)) => return Verdict::Skip,
                Ok(Some(true)) => {}
                Ok(None) => errors.push(format!("matchCondition '{name}' did not evaluate to a bool")),
                Err(e) => errors.push(format!("matchCondition '{name}': {e}")),
            }
        }
        if errors.is_empty() { Verdict::Call } else { Verdict::Error(errors.join("; ")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn verdict(conditions: Value, object: Value) -> Verdict {
        let c = MatchConditions::parse(&json!({ "matchConditions": conditions }));
        let mut act = Activation::new();
        act.insert("object", &object);
        act.insert("oldObject", &Value::Null);
        act.insert("request", &json!({"operation": "CREATE"}));
        c.evaluate(&act)
    }

    #[test]
    fn any_false_skips_errors_count_only_without_a_false() {
        let pod = json!({"metadata": {"labels": {"team": "a"}}});
        let yes = json!({"name": "yes", "expression": "request.operation == 'CREATE'"});
        let team_b = json!({"name": "team-b", "expression": "object.metadata.labels.team == 'b'"});
        let broken = json!({"name": "broken", "expression": "object.spec.missing == 1"});
        assert_eq!(verdict(json!([yes]), pod.clone()), Verdict::Call);
        assert_eq!(verdict(json!([yes, team_b]), pod.clone()), Verdict::Skip);
        assert_eq!(verdict(json!([broken, team_b]), pod.clone()), Verdict::Skip);
        let Verdict::Error(e) = verdict(json!([yes, broken]), pod.clone()) else { panic!("an error") };
        assert!(
            e.starts_with("matchCondition 'broken': expression 'object.spec.missing == 1' resulted in error"),
            "{e}"
        );
        let Verdict::Error(e) = verdict(json!([{"name": "bad", "expression": "object.("}]), pod) else { panic!() };
        assert!(e.contains("compilation failed"), "{e}");
    }
}
