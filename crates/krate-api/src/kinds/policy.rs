//! PodDisruptionBudgets (policy/v1).

use serde_json::Value;

use super::{has, validate_int_or_percent};
use crate::error::Cause;
use crate::validation::{invalid_raw, validate_label_selector};

pub fn validate_pdb(pdb: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let spec = pdb.get("spec").unwrap_or(&Value::Null);
    if has(spec, "minAvailable") && has(spec, "maxUnavailable") {
        c.push(invalid_raw(
            "spec",
            "policy.PodDisruptionBudgetSpec{...}",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for f in ["minAvailable", "maxUnavailable"] {
        if let Some(v) = spec.get(f).filter(|v| !v.is_null()) {
            c.extend(validate_int_or_percent(v, &format!("spec.{f}"), true));
        }
    }
    if let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) {
        c.extend(validate_label_selector(sel, "spec.selector"));
    }
    if let Some(p) = spec.get("unhealthyPodEvictionPolicy").and_then(Value::as_str)
        && p != "IfHealthyBudget"
        && p != "AlwaysAllow"
    {
        c.push(Cause::not_supported("spec.unhealthyPodEvictionPolicy", p, &["AlwaysAllow", "IfHealthyBudget"]));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn budgets() {
        assert!(
            validate_pdb(&json!({"spec": {"minAvailable": "50%", "selector": {"matchLabels": {"a": "b"}}}})).is_empty()
        );
        let both = validate_pdb(&json!({"spec": {"minAvailable": 1, "maxUnavailable": "150%"}}));
        let m: Vec<String> = both.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert_eq!(
            m,
            vec![
                "spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and maxUnavailable cannot be both set",
                "spec.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%"
            ]
        );
        let neg = validate_pdb(&json!({"spec": {"minAvailable": -1, "unhealthyPodEvictionPolicy": "Never"}}));
        assert_eq!(neg.len(), 2);
        assert_eq!(neg[0].message, "Invalid value: -1: must be greater than or equal to 0");
    }
}
