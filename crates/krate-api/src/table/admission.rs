//! admissionregistration.k8s.io.

use serde_json::{Value, json};

use super::*;
use crate::object;

pub(super) fn webhook_configuration_row(o: &Value, age: &str) -> Vec<Value> {
    vec![json!(object::name(o)), json!(len(o.get("webhooks"))), json!(age)]
}

fn param_kind(o: &Value) -> String {
    match o.pointer("/spec/paramKind").filter(|p| p.is_object()) {
        Some(p) => format!("{}/{}", s(p.get("apiVersion")), s(p.get("kind"))),
        None => "<unset>".into(),
    }
}

/// The number of validations (or mutations) and the parameter kind.
pub(super) fn policy_row(o: &Value, age: &str) -> Vec<Value> {
    let rules = len(o.pointer("/spec/validations")).max(len(o.pointer("/spec/mutations")));
    vec![json!(object::name(o)), json!(rules), json!(param_kind(o)), json!(age)]
}

/// Go's generated String() of a LabelSelector, which upstream prints for a paramRef selector.
fn go_selector_string(sel: &Value) -> String {
    let mut labels: Vec<(&String, &Value)> =
        sel.get("matchLabels").and_then(Value::as_object).into_iter().flatten().collect();
    labels.sort_by(|a, b| a.0.cmp(b.0));
    let labels: String = labels.iter().map(|(k, v)| format!("{k}: {},", s(Some(v)))).collect();
    let exprs: String = items(sel, "/matchExpressions")
        .map(|e| {
            let values: Vec<String> = items(e, "/values").map(|v| s(Some(v))).collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                s(e.get("key")),
                s(e.get("operator")),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}

/// PARAMREF: "namespace/name", "*/name" when the namespace is unset (it may be cluster-scoped),
/// else the selector; "<unset>" without a paramRef.
pub(super) fn binding_row(o: &Value, age: &str) -> Vec<Value> {
    let param = match o.pointer("/spec/paramRef").filter(|p| p.is_object()) {
        None => "<unset>".to_string(),
        Some(p) => {
            let (name, ns) = (s(p.get("name")), s(p.get("namespace")));
            match p.get("selector").filter(|v| v.is_object()) {
                _ if !name.is_empty() && !ns.is_empty() => format!("{ns}/{name}"),
                _ if !name.is_empty() => format!("*/{name}"),
                Some(sel) => go_selector_string(sel),
                None => "<unset>".into(),
            }
        }
    };
    vec![json!(object::name(o)), json!(s(o.pointer("/spec/policyName"))), json!(param), json!(age)]
}

const WEBHOOK_COLUMNS: &[Column] = &[NAME, int("Webhooks"), AGE];
const VALIDATING_POLICY_COLUMNS: &[Column] = &[NAME, int("Validations"), col("ParamKind"), AGE];
const MUTATING_POLICY_COLUMNS: &[Column] = &[NAME, int("Mutations"), col("ParamKind"), AGE];
const BINDING_COLUMNS: &[Column] = &[NAME, col("PolicyName"), col("ParamRef"), AGE];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    if group != "admissionregistration.k8s.io" {
        return None;
    }
    Some(match kind {
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            (WEBHOOK_COLUMNS, webhook_configuration_row)
        }
        "ValidatingAdmissionPolicy" => (VALIDATING_POLICY_COLUMNS, policy_row),
        "MutatingAdmissionPolicy" => (MUTATING_POLICY_COLUMNS, policy_row),
        "ValidatingAdmissionPolicyBinding" | "MutatingAdmissionPolicyBinding" => (BINDING_COLUMNS, binding_row),
        _ => return None,
    })
}
