//! Leases (coordination.k8s.io/v1) and PriorityClasses (scheduling.k8s.io/v1).

use serde_json::{Value, json};

use super::{int_of, set_default, str_of};
use crate::error::Cause;
use crate::validation::{IMMUTABLE_MSG, invalid_int, invalid_str};

// ---- Lease

pub fn validate_lease(lease: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let spec = lease.get("spec").unwrap_or(&Value::Null);
    if let Some(d) = int_of(spec, "leaseDurationSeconds")
        && d <= 0
    {
        c.push(invalid_int("spec.leaseDurationSeconds", d, "must be greater than 0"));
    }
    if let Some(t) = int_of(spec, "leaseTransitions")
        && t < 0
    {
        c.push(invalid_int("spec.leaseTransitions", t, "must be greater than or equal to 0"));
    }
    if !str_of(spec, "preferredHolder").is_empty() && str_of(spec, "strategy").is_empty() {
        c.push(Cause::forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"));
    }
    c
}

// ---- PriorityClass

/// The highest priority a user-defined class may have.
pub const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;
const SYSTEM_CLASSES: [(&str, i64); 2] =
    [("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];

pub fn default_priority_class(pc: &mut Value) {
    set_default(pc, "preemptionPolicy", json!("PreemptLowerPriority"));
}

pub fn validate_priority_class(pc: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let name = crate::object::name(pc);
    let value = int_of(pc, "value").unwrap_or(0);
    if name.starts_with("system-") {
        let err = match SYSTEM_CLASSES.iter().find(|(n, _)| *n == name) {
            None => Some(format!("{name} is not a known system priority class")),
            Some((n, v)) if *v != value => Some(format!("value of {n} PriorityClass must be {v}")),
            Some((n, _)) if pc.get("globalDefault") == Some(&Value::Bool(true)) => {
                Some(format!("globalDefault of {n} PriorityClass must be false"))
            }
            Some(_) => None,
        };
        if let Some(e) = err {
            c.push(Cause::forbidden(
                "metadata.name",
                format!("priority class names with 'system-' prefix are reserved for system use only. error: {e}"),
            ));
        }
    } else if value > HIGHEST_USER_PRIORITY {
        c.push(Cause::forbidden(
            "value",
            format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        ));
    }
    if let Some(p) = pc.get("preemptionPolicy").and_then(Value::as_str) {
        match p {
            "" => c.push(Cause::required("preemptionPolicy", "")),
            "PreemptLowerPriority" | "Never" => {}
            other => c.push(Cause::not_supported("preemptionPolicy", other, &["PreemptLowerPriority", "Never"])),
        }
    }
    c
}

pub fn validate_priority_class_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    if int_of(new, "value").unwrap_or(0) != int_of(old, "value").unwrap_or(0) {
        c.push(Cause::forbidden("value", "may not be changed in an update."));
    }
    if new.get("preemptionPolicy") != old.get("preemptionPolicy") {
        c.push(invalid_str("preemptionPolicy", str_of(new, "preemptionPolicy"), IMMUTABLE_MSG));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(c: &[Cause]) -> Vec<String> {
        c.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn leases() {
        assert!(validate_lease(&json!({"spec": {"leaseDurationSeconds": 15}})).is_empty());
        assert_eq!(
            msgs(&validate_lease(&json!({"spec": {"leaseDurationSeconds": 0, "preferredHolder": "a"}}))),
            vec![
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"
            ]
        );
    }

    #[test]
    fn priority_classes() {
        let mut pc = json!({"metadata": {"name": "high"}, "value": 1_000_000});
        default_priority_class(&mut pc);
        assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");
        assert!(validate_priority_class(&pc).is_empty());
        let too_high = json!({"metadata": {"name": "high"}, "value": 2_000_000_000i64});
        assert_eq!(
            msgs(&validate_priority_class(&too_high)),
            vec!["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
        );
        let system = json!({"metadata": {"name": "system-mine"}, "value": 1});
        assert!(
            msgs(&validate_priority_class(&system))[0]
                .ends_with("error: system-mine is not a known system priority class")
        );
        let known = json!({"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000i64, "preemptionPolicy": "PreemptLowerPriority"});
        assert!(validate_priority_class(&known).is_empty());
        let mut changed = pc.clone();
        changed["value"] = json!(5);
        changed["preemptionPolicy"] = json!("Never");
        assert_eq!(
            msgs(&validate_priority_class_update(&changed, &pc)),
            vec![
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable"
            ]
        );
    }
}
