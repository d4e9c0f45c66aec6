//! autoscaling. HorizontalPodAutoscalers are stored as autoscaling/v2 and autoscaling/v1
//! serves the same storage, so one table serves both; an object still in the v1 shape
//! (targetCPUUtilizationPercentage, no metrics) prints as the CPU metric it converts to.

use serde_json::{Value, json};

use super::*;
use crate::object;

/// One metric as formatHPAMetrics prints it: "current/target", resources prefixed with their
/// name, averages of Object and External metrics suffixed " (avg)"; a quantity the metric
/// lacks prints as Go prints a nil *Quantity, "<nil>".
fn hpa_metric(spec: &Value, status: Option<&Value>) -> String {
    let q = |v: Option<&Value>| quantity(v);
    let ty = s(spec.get("type"));
    let current = |path: &str| -> String {
        let v = status.and_then(|st| st.pointer(path)).filter(|v| !v.is_null());
        v.map_or_else(|| "<unknown>".to_string(), |v| q(Some(v)))
    };
    match ty.as_str() {
        "External" | "Object" => {
            let key = if ty == "External" { "external" } else { "object" };
            let target = spec.get(key).and_then(|m| m.get("target"));
            match target.and_then(|t| t.get("averageValue")).filter(|v| !v.is_null()) {
                Some(avg) => format!("{}/{} (avg)", current(&format!("/{key}/current/averageValue")), q(Some(avg))),
                None => {
                    // Upstream prints the status's value whenever the metric has a status.
                    let cur = match status.and_then(|st| st.get(key)).filter(|v| v.is_object()) {
                        Some(m) => {
                            let v = q(m.pointer("/current/value"));
                            if v.is_empty() { "<nil>".into() } else { v }
                        }
                        None => "<unknown>".into(),
                    };
                    let target = q(target.and_then(|t| t.get("value")));
                    format!("{cur}/{}", if target.is_empty() { "<nil>" } else { &target })
                }
            }
        }
        "Pods" => {
            let cur = match status.and_then(|st| st.get("pods")).filter(|v| v.is_object()) {
                Some(m) => {
                    let v = q(m.pointer("/current/averageValue"));
                    if v.is_empty() { "<nil>".into() } else { v }
                }
                None => "<unknown>".into(),
            };
            let target = q(spec.pointer("/pods/target/averageValue"));
            format!("{cur}/{}", if target.is_empty() { "<nil>" } else { &target })
        }
        "Resource" | "ContainerResource" => {
            let key = if ty == "Resource" { "resource" } else { "containerResource" };
            let m = spec.get(key);
            let name = s(m.and_then(|m| m.get("name")));
            let status_m = status.and_then(|st| st.get(key)).filter(|v| v.is_object());
            match m.and_then(|m| m.pointer("/target/averageValue")).filter(|v| !v.is_null()) {
                Some(avg) => {
                    let cur = status_m.map_or_else(
                        || "<unknown>".to_string(),
                        |m| {
                            let v = q(m.pointer("/current/averageValue"));
                            if v.is_empty() { "<nil>".into() } else { v }
                        },
                    );
                    format!("{name}: {cur}/{}", q(Some(avg)))
                }
                None => {
                    let cur = status_m
                        .and_then(|m| m.pointer("/current/averageUtilization"))
                        .and_then(Value::as_i64)
                        .map_or_else(|| "<unknown>".to_string(), |u| format!("{u}%"));
                    let target = m
                        .and_then(|m| m.pointer("/target/averageUtilization"))
                        .and_then(Value::as_i64)
                        .map_or_else(|| "<auto>".to_string(), |u| format!("{u}%"));
                    format!("{name}: {cur}/{target}")
                }
            }
        }
        _ => "<unknown type>".into(),
    }
}

/// formatHPAMetrics: the first two metrics joined ", ", then " + N more..."; "<none>" without any.
fn hpa_targets(o: &Value) -> String {
    let mut specs: Vec<Value> = items(o, "/spec/metrics").cloned().collect();
    let mut statuses: Vec<Value> = items(o, "/status/currentMetrics").cloned().collect();
    if specs.is_empty() {
        // The v1 shape: its single CPU target converts to a Resource metric.
        if let Some(t) = o.pointer("/spec/targetCPUUtilizationPercentage").and_then(Value::as_i64) {
            specs.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": t}}}));
            if let Some(c) = o.pointer("/status/currentCPUUtilizationPercentage").and_then(Value::as_i64) {
                statuses = vec![
                    json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": c}}}),
                ];
            }
        }
    }
    if specs.is_empty() {
        return "<none>".into();
    }
    let list: Vec<String> = specs.iter().enumerate().map(|(i, spec)| hpa_metric(spec, statuses.get(i))).collect();
    if list.len() > 2 { format!("{} + {} more...", list[..2].join(", "), list.len() - 2) } else { list.join(", ") }
}

pub(super) fn hpa_row(o: &Value, age: &str) -> Vec<Value> {
    let reference =
        format!("{}/{}", s(o.pointer("/spec/scaleTargetRef/kind")), s(o.pointer("/spec/scaleTargetRef/name")));
    let min =
        o.pointer("/spec/minReplicas").and_then(Value::as_i64).map_or_else(|| "<unset>".to_string(), |m| m.to_string());
    vec![
        json!(object::name(o)),
        json!(reference),
        json!(hpa_targets(o)),
        json!(min),
        json!(n(o, "/spec/maxReplicas")),
        json!(n(o, "/status/currentReplicas")),
        json!(age),
    ]
}

const HPA_COLUMNS: &[Column] =
    &[NAME, col("Reference"), col("Targets"), col("MinPods"), col("MaxPods"), col("Replicas"), AGE];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    match (group, kind) {
        ("autoscaling", "HorizontalPodAutoscaler") => Some((HPA_COLUMNS, hpa_row)),
        _ => None,
    }
}
