//! Conversion between the versions of a kind served in more than one: objects are
//! stored in one version and converted on the way in and out, as upstream does through
//! its internal types.
//!
//! - HorizontalPodAutoscaler: stored as autoscaling/v2; autoscaling/v1 has only a CPU
//!   target, so what v1 cannot express travels in the annotations upstream uses.
//! - Event: stored as core v1; events.k8s.io/v1 renames and regroups fields.

use serde_json::{Map, Value, json};

const HPA_METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const HPA_CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const HPA_CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const HPA_BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// The apiVersion objects of this kind are stored in, when it is served in several.
pub fn storage_version(group: &str, kind: &str) -> Option<&'static str> {
    match (group, kind) {
        ("autoscaling", "HorizontalPodAutoscaler") => Some("autoscaling/v2"),
        ("" | "events.k8s.io", "Event") => Some("v1"),
        _ => None,
    }
}

/// Converts `obj` to `api_version` (a no-op when it already is).
pub fn convert(obj: Value, api_version: &str) -> Value {
    let from = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    if from == api_version {
        return obj;
    }
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let mut out = match (kind, from.as_str(), api_version) {
        ("HorizontalPodAutoscaler", "autoscaling/v2", "autoscaling/v1") => hpa_v2_to_v1(obj),
        ("HorizontalPodAutoscaler", "autoscaling/v1", "autoscaling/v2") => hpa_v1_to_v2(obj),
        ("Event", "v1", "events.k8s.io/v1") => event_core_to_events(obj),
        ("Event", "events.k8s.io/v1", "v1") => event_events_to_core(obj),
        _ => obj,
    };
    out["apiVersion"] = json!(api_version);
    out
}

fn take(m: &mut Map<String, Value>, k: &str) -> Option<Value> {
    m.remove(k).filter(|v| !v.is_null())
}

fn annotations(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"].as_object_mut().expect("just made an object")
}

fn is_cpu_utilization(m: &Value) -> bool {
    m.get("type").and_then(Value::as_str) == Some("Resource")
        && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && m.pointer("/resource/target/type").and_then(Value::as_str) == Some("Utilization")
}

fn hpa_v2_to_v1(mut obj: Value) -> Value {
    let mut spec = obj.get("spec").and_then(Value::as_object).cloned().unwrap_or_default();
    let metrics = take(&mut spec, "metrics").and_then(|m| m.as_array().cloned()).unwrap_or_default();
    let behavior = take(&mut spec, "behavior");
    let (cpu, others): (Vec<Value>, Vec<Value>) = metrics.into_iter().partition(is_cpu_utilization);
    if let Some(u) = cpu.first().and_then(|m| m.pointer("/resource/target/averageUtilization")) {
        spec.insert("targetCPUUtilizationPercentage".into(), u.clone());
    }
    let mut status = obj.get("status").and_then(Value::as_object).cloned().unwrap_or_default();
    let current = take(&mut status, "currentMetrics").and_then(|m| m.as_array().cloned()).unwrap_or_default();
    let conditions = take(&mut status, "conditions");
    if let Some(u) = current
        .iter()
        .find(|m| m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu"))
        .and_then(|m| m.pointer("/resource/current/averageUtilization"))
    {
        status.insert("currentCPUUtilizationPercentage".into(), u.clone());
    }
    obj["spec"] = Value::Object(spec);
    if obj.get("status").is_some() {
        obj["status"] = Value::Object(status);
    }
    let notes: Vec<(&str, Option<Value>)> = vec![
        (HPA_METRICS, (!others.is_empty()).then_some(Value::Array(others))),
        (HPA_CURRENT_METRICS, (!current.is_empty()).then_some(Value::Array(current))),
        (HPA_CONDITIONS, conditions),
        (HPA_BEHAVIOR, behavior),
    ];
    if notes.iter().any(|(_, v)| v.is_some()) {
        let a = annotations(&mut obj);
        for (k, v) in notes {
            if let Some(v) = v {
                a.insert(k.into(), json!(v.to_string()));
            }
        }
    }
    obj
}

fn hpa_v1_to_v2(mut obj: Value) -> Value {
    let mut spec = obj.get("spec").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut from_note = |key: &str| -> Option<Value> {
        let a = obj.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut)?;
        let raw = a.remove(key)?;
        serde_json::from_str(raw.as_str()?).ok()
    };
    let mut metrics: Vec<Value> = from_note(HPA_METRICS).and_then(|v| v.as_array().cloned()).unwrap_or_default();
    let current: Vec<Value> = from_note(HPA_CURRENT_METRICS).and_then(|v| v.as_array().cloned()).unwrap_or_default();
    let conditions = from_note(HPA_CONDITIONS);
    let behavior = from_note(HPA_BEHAVIOR);
    if let Some(u) = take(&mut spec, "targetCPUUtilizationPercentage") {
        metrics.insert(0, json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": u}}}));
    }
    if !metrics.is_empty() {
        spec.insert("metrics".into(), Value::Array(metrics));
    }
    if let Some(b) = behavior {
        spec.insert("behavior".into(), b);
    }
    obj["spec"] = Value::Object(spec);
    if let Some(mut status) = obj.get("status").and_then(Value::as_object).cloned() {
        let cpu = take(&mut status, "currentCPUUtilizationPercentage");
        let mut current = current;
        if current.is_empty()
            && let Some(u) = cpu
        {
            current
                .push(json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": u}}}));
        }
        if !current.is_empty() {
            status.insert("currentMetrics".into(), Value::Array(current));
        }
        if let Some(c) = conditions {
            status.insert("conditions".into(), c);
        }
        obj["status"] = Value::Object(status);
    }
    if obj.pointer("/metadata/annotations").and_then(Value::as_object).is_some_and(Map::is_empty) {
        obj["metadata"].as_object_mut().map(|m| m.remove("annotations"));
    }
    obj
}

/// (core v1 field, events.k8s.io/v1 field) pairs that only change name.
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

fn rename(obj: Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) -> Value {
    let Value::Object(mut m) = obj else { return obj };
    for (from, to) in pairs {
        if let Some(v) = m.remove(from) {
            m.insert(to.into(), v);
        }
    }
    Value::Object(m)
}

fn event_core_to_events(obj: Value) -> Value {
    rename(obj, EVENT_RENAMES.iter().copied())
}

fn event_events_to_core(obj: Value) -> Value {
    rename(obj, EVENT_RENAMES.iter().map(|(a, b)| (*b, *a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpa_round_trips_through_v1() {
        let v2 = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}, "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}},
        });
        let v1 = convert(v2.clone(), "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
        assert!(v1["spec"].get("metrics").is_none());
        assert!(v1["metadata"]["annotations"][HPA_METRICS].as_str().unwrap().contains("qps"));
        let back = convert(v1, "autoscaling/v2");
        assert_eq!(back["spec"], v2["spec"], "nothing is lost going through v1");
        assert!(back["metadata"].get("annotations").is_none());
    }

    #[test]
    fn events_rename_fields_both_ways() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "hi", "reason": "Started", "count": 2, "reportingComponent": "kubelet"});
        let ev = convert(core.clone(), "events.k8s.io/v1");
        assert_eq!(ev["regarding"]["name"], "p");
        assert_eq!(
            (ev["note"].as_str(), ev["deprecatedCount"].as_i64(), ev["reportingController"].as_str()),
            (Some("hi"), Some(2), Some("kubelet"))
        );
        assert_eq!(convert(ev, "v1"), core);
    }
}
