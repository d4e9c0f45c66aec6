//! Where a pod may run: node and pod (anti-)affinity and topology spread constraints —
//! their validation as upstream's `validateAffinity` / `validateTopologySpreadConstraints`,
//! and the merge of `matchLabelKeys` / `mismatchLabelKeys` into label selectors that
//! upstream's pod strategy performs when a pod is created.

use serde_json::{Map, Value, json};

use super::{array_of, has, int_of, str_of};
use crate::error::Cause;
use crate::validation::{
    dns1123_label_errors, duplicate_str, invalid_int, invalid_str, label_value_errors, qualified_name_errors,
    validate_label_selector,
};

const WHEN_UNSATISFIABLE: &[&str] = &["DoNotSchedule", "ScheduleAnyway"];
const INCLUSION_POLICIES: &[&str] = &["Honor", "Ignore"];

/// `spec.affinity` and `spec.topologySpreadConstraints` of a pod spec at `path`.
pub fn validate_placement(spec: &Value, path: &str, c: &mut Vec<Cause>) {
    if let Some(a) = spec.get("affinity").filter(|a| a.is_object()) {
        validate_affinity(a, &format!("{path}.affinity"), c);
    }
    validate_topology_spread(
        array_of(spec, "topologySpreadConstraints"),
        &format!("{path}.topologySpreadConstraints"),
        c,
    );
}

fn validate_affinity(a: &Value, path: &str, c: &mut Vec<Cause>) {
    if let Some(na) = a.get("nodeAffinity").filter(|v| v.is_object()) {
        let at = format!("{path}.nodeAffinity");
        if let Some(req) = na.get("requiredDuringSchedulingIgnoredDuringExecution").filter(|v| v.is_object()) {
            let terms_at = format!("{at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
            let terms = array_of(req, "nodeSelectorTerms");
            if terms.is_empty() {
                c.push(Cause::required(&terms_at, "must have at least one node selector term"));
            }
            for (i, t) in terms.iter().enumerate() {
                validate_node_selector_term(t, &format!("{terms_at}[{i}]"), c);
            }
        }
        let pref_at = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in array_of(na, "preferredDuringSchedulingIgnoredDuringExecution").iter().enumerate() {
            validate_weight(t, &format!("{pref_at}[{i}]"), c);
            if let Some(p) = t.get("preference") {
                validate_node_selector_term(p, &format!("{pref_at}[{i}].preference"), c);
            }
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(pa) = a.get(kind).filter(|v| v.is_object()) else { continue };
        let at = format!("{path}.{kind}");
        let req_at = format!("{at}.requiredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in array_of(pa, "requiredDuringSchedulingIgnoredDuringExecution").iter().enumerate() {
            validate_pod_affinity_term(t, &format!("{req_at}[{i}]"), c);
        }
        let pref_at = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in array_of(pa, "preferredDuringSchedulingIgnoredDuringExecution").iter().enumerate() {
            validate_weight(t, &format!("{pref_at}[{i}]"), c);
            let term = t.get("podAffinityTerm").cloned().unwrap_or(json!({}));
            validate_pod_affinity_term(&term, &format!("{pref_at}[{i}].podAffinityTerm"), c);
        }
    }
}

fn validate_weight(t: &Value, at: &str, c: &mut Vec<Cause>) {
    let w = int_of(t, "weight").unwrap_or(0);
    if !(1..=100).contains(&w) {
        c.push(invalid_int(format!("{at}.weight"), w, "must be in the range 1-100"));
    }
}

fn validate_node_selector_term(term: &Value, at: &str, c: &mut Vec<Cause>) {
    for (j, rq) in array_of(term, "matchExpressions").iter().enumerate() {
        let rq_at = format!("{at}.matchExpressions[{j}]");
        let values = array_of(rq, "values");
        match str_of(rq, "operator") {
            "In" | "NotIn" => {
                if values.is_empty() {
                    c.push(Cause::required(
                        format!("{rq_at}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
                for (k, v) in values.iter().enumerate() {
                    let v = v.as_str().unwrap_or("");
                    for msg in label_value_errors(v) {
                        c.push(invalid_str(format!("{rq_at}.values[{k}]"), v, msg));
                    }
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    c.push(Cause::forbidden(
                        format!("{rq_at}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            "Gt" | "Lt" => {
                if values.len() != 1 {
                    c.push(Cause::required(
                        format!("{rq_at}.values"),
                        "must be specified single value when `operator` is 'Lt' or 'Gt'",
                    ));
                }
            }
            other => c.push(invalid_str(format!("{rq_at}.operator"), other, "not a valid selector operator")),
        }
        let key = str_of(rq, "key");
        for msg in qualified_name_errors(key) {
            c.push(invalid_str(format!("{rq_at}.key"), key, msg));
        }
    }
    for (j, rq) in array_of(term, "matchFields").iter().enumerate() {
        let rq_at = format!("{at}.matchFields[{j}]");
        let values = array_of(rq, "values");
        match str_of(rq, "operator") {
            "In" | "NotIn" => {
                if values.len() != 1 {
                    c.push(Cause::required(
                        format!("{rq_at}.values"),
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    ));
                }
            }
            other => c.push(invalid_str(format!("{rq_at}.operator"), other, "not a valid selector operator")),
        }
        let key = str_of(rq, "key");
        if key != "metadata.name" {
            c.push(invalid_str(format!("{rq_at}.key"), key, "not a valid field selector key"));
            continue;
        }
        for (k, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or("");
            for msg in crate::validation::dns1123_subdomain_errors(v) {
                c.push(invalid_str(format!("{rq_at}.values[{k}]"), v, msg));
            }
        }
    }
}

fn validate_pod_affinity_term(t: &Value, at: &str, c: &mut Vec<Cause>) {
    for key in ["labelSelector", "namespaceSelector"] {
        if let Some(sel) = t.get(key).filter(|s| s.is_object()) {
            c.extend(validate_label_selector(sel, &format!("{at}.{key}")));
        }
    }
    for ns in array_of(t, "namespaces") {
        let ns = ns.as_str().unwrap_or("");
        // Upstream reports these at ".namespace".
        for msg in dns1123_label_errors(ns) {
            c.push(invalid_str(format!("{at}.namespace"), ns, msg));
        }
    }
    let selector = t.get("labelSelector").filter(|s| s.is_object());
    let match_keys = strings(t, "matchLabelKeys");
    let mismatch_keys = strings(t, "mismatchLabelKeys");
    validate_label_keys(&match_keys, selector, &format!("{at}.matchLabelKeys"), c);
    validate_label_keys(&mismatch_keys, selector, &format!("{at}.mismatchLabelKeys"), c);
    if let Some(sel) = selector {
        duplicated_after_merge(&match_keys, sel, at, c);
    }
    for (i, k) in match_keys.iter().enumerate() {
        if mismatch_keys.contains(k) {
            c.push(invalid_str(
                format!("{at}.matchLabelKeys[{i}]"),
                k,
                "exists in both matchLabelKeys and mismatchLabelKeys",
            ));
        }
    }
    let topology_key = str_of(t, "topologyKey");
    if topology_key.is_empty() {
        c.push(Cause::required(format!("{at}.topologyKey"), "can not be empty"));
    }
    for msg in qualified_name_errors(topology_key) {
        c.push(invalid_str(format!("{at}.topologyKey"), topology_key, msg));
    }
}

/// Label keys named by matchLabelKeys / mismatchLabelKeys must be label names and need
/// a labelSelector to merge into.
fn validate_label_keys(keys: &[String], selector: Option<&Value>, at: &str, c: &mut Vec<Cause>) {
    if keys.is_empty() {
        return;
    }
    if selector.is_none() {
        c.push(Cause::forbidden(at, "must not be specified when labelSelector is not set"));
    }
    for (i, k) in keys.iter().enumerate() {
        for msg in qualified_name_errors(k) {
            c.push(invalid_str(format!("{at}[{i}]"), k, msg));
        }
    }
}

/// After creation merged matchLabelKeys into the selector, a key the user had also put
/// in the selector shows up twice: upstream rejects that (`at` is where it reports it:
/// the term, indexed by the key's position in matchLabelKeys).
fn duplicated_after_merge(match_keys: &[String], selector: &Value, at: &str, c: &mut Vec<Cause>) {
    let mut seen: Vec<&str> =
        selector.get("matchLabels").and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k.as_str()).collect();
    for e in array_of(selector, "matchExpressions") {
        let key = str_of(e, "key");
        if let Some(i) = match_keys.iter().position(|k| k == key)
            && seen.contains(&key)
        {
            c.push(invalid_str(format!("{at}[{i}]"), key, "exists in both matchLabelKeys and labelSelector"));
        }
        seen.push(key);
    }
}

fn validate_topology_spread(constraints: &[Value], path: &str, c: &mut Vec<Cause>) {
    for (i, t) in constraints.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let skew = int_of(t, "maxSkew").unwrap_or(0);
        if skew <= 0 {
            c.push(invalid_int(format!("{at}.maxSkew"), skew, "must be greater than zero"));
        }
        let key = str_of(t, "topologyKey");
        if key.is_empty() {
            c.push(Cause::required(format!("{at}.topologyKey"), "can not be empty"));
        }
        let when = str_of(t, "whenUnsatisfiable");
        if !WHEN_UNSATISFIABLE.contains(&when) {
            c.push(Cause::not_supported(format!("{at}.whenUnsatisfiable"), when, WHEN_UNSATISFIABLE));
        }
        // {topologyKey, whenUnsatisfiable} names one kind of constraint.
        if constraints[i + 1..]
            .iter()
            .any(|o| str_of(o, "topologyKey") == key && str_of(o, "whenUnsatisfiable") == when)
        {
            c.push(duplicate_str(format!("{at}.{{topologyKey, whenUnsatisfiable}}"), &format!("{{{key}, {when}}}")));
        }
        if has(t, "minDomains") {
            let min = int_of(t, "minDomains").unwrap_or(0);
            if min <= 0 {
                c.push(invalid_int(format!("{at}.minDomains"), min, "must be greater than zero"));
            }
            if when != "DoNotSchedule" {
                c.push(invalid_int(
                    format!("{at}.minDomains"),
                    min,
                    format!("can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {when}"),
                ));
            }
        }
        for policy in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
            if let Some(p) = t.get(policy).and_then(Value::as_str)
                && !INCLUSION_POLICIES.contains(&p)
            {
                c.push(Cause::not_supported(format!("{at}.{policy}"), p, INCLUSION_POLICIES));
            }
        }
        let selector = t.get("labelSelector").filter(|s| s.is_object());
        let match_keys = strings(t, "matchLabelKeys");
        validate_label_keys(&match_keys, selector, &format!("{at}.matchLabelKeys"), c);
        if let Some(sel) = selector {
            duplicated_after_merge(&match_keys, sel, &format!("{at}.matchLabelKeys"), c);
            c.extend(validate_label_selector(sel, &format!("{at}.labelSelector")));
        }
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    array_of(v, key).iter().filter_map(Value::as_str).map(String::from).collect()
}

/// What upstream does to a new pod's constraints: each matchLabelKeys key the pod has
/// becomes `key In (value)` in the term's labelSelector, each mismatchLabelKeys key
/// `key NotIn (value)`, so the scheduler needs no pod labels to evaluate them later.
pub fn merge_label_keys(pod: &mut Value) {
    let labels = pod.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
    let Some(spec) = pod.get_mut("spec") else { return };
    if let Some(affinity) = spec.get_mut("affinity") {
        for kind in ["podAffinity", "podAntiAffinity"] {
            let Some(pa) = affinity.get_mut(kind) else { continue };
            if let Some(Value::Array(terms)) = pa.get_mut("requiredDuringSchedulingIgnoredDuringExecution") {
                terms.iter_mut().for_each(|t| merge_term(t, &labels, true));
            }
            if let Some(Value::Array(terms)) = pa.get_mut("preferredDuringSchedulingIgnoredDuringExecution") {
                for t in terms {
                    if let Some(term) = t.get_mut("podAffinityTerm") {
                        merge_term(term, &labels, true);
                    }
                }
            }
        }
    }
    if let Some(Value::Array(constraints)) = spec.get_mut("topologySpreadConstraints") {
        constraints.iter_mut().for_each(|t| merge_term(t, &labels, false));
    }
}

fn merge_term(term: &mut Value, labels: &Map<String, Value>, with_mismatch: bool) {
    let mut add = Vec::new();
    for (key, op) in [("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")] {
        if op == "NotIn" && !with_mismatch {
            continue;
        }
        for k in strings(term, key) {
            if let Some(v) = labels.get(&k).and_then(Value::as_str) {
                add.push(json!({"key": k, "operator": op, "values": [v]}));
            }
        }
    }
    let Some(sel) = term.get_mut("labelSelector").filter(|s| s.is_object()) else { return };
    if add.is_empty() {
        return;
    }
    match sel.get_mut("matchExpressions") {
        Some(Value::Array(exprs)) => exprs.extend(add),
        _ => sel["matchExpressions"] = Value::Array(add),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(spec: Value) -> Vec<(String, String)> {
        let mut c = Vec::new();
        validate_placement(&spec, "spec", &mut c);
        c.into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn node_affinity_terms() {
        let errs = errors(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [
                    {"key": "zone", "operator": "In"},
                    {"key": "gpu", "operator": "Exists", "values": ["x"]},
                    {"key": "cores", "operator": "Gt", "values": ["1", "2"]},
                    {"key": "bad key", "operator": "Near", "values": ["1"]}
                ],
                "matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["a"]}]
            }]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]
        }}}));
        let fields: Vec<&str> = errors_fields(&errs);
        let base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
        assert!(fields.contains(&format!("{base}.matchExpressions[0].values").as_str()), "{errs:?}");
        assert!(fields.contains(&format!("{base}.matchExpressions[1].values").as_str()));
        assert!(fields.contains(&format!("{base}.matchExpressions[2].values").as_str()));
        assert!(fields.contains(&format!("{base}.matchExpressions[3].operator").as_str()));
        assert!(fields.contains(&format!("{base}.matchExpressions[3].key").as_str()));
        assert!(fields.contains(&format!("{base}.matchFields[0].key").as_str()));
        assert!(
            fields.contains(&"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight")
        );
        assert_eq!(errs.len(), 7, "{errs:?}");

        let empty = errors(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}));
        assert_eq!(empty[0].1, "Required value: must have at least one node selector term");
    }

    fn errors_fields(errs: &[(String, String)]) -> Vec<&str> {
        errs.iter().map(|(f, _)| f.as_str()).collect()
    }

    #[test]
    fn pod_affinity_terms() {
        let ok = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname",
             "matchLabelKeys": ["pod-template-hash"]}]}}});
        assert_eq!(errors(ok), vec![]);
        let errs = errors(json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "", "matchLabelKeys": ["a"], "namespaces": ["Bad_NS"]}],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 101, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone",
                  "matchLabelKeys": ["k"], "mismatchLabelKeys": ["k"]}}]
        }}}));
        let req = "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]";
        let pref = "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]";
        assert!(errs.contains(&(format!("{req}.topologyKey"), "Required value: can not be empty".into())), "{errs:?}");
        assert!(errs.contains(&(
            format!("{req}.matchLabelKeys"),
            "Forbidden: must not be specified when labelSelector is not set".into()
        )));
        assert!(errors_fields(&errs).contains(&format!("{req}.namespace").as_str()));
        assert!(errs.contains(&(format!("{pref}.weight"), "Invalid value: 101: must be in the range 1-100".into())));
        assert!(errs.contains(&(
            format!("{pref}.podAffinityTerm.matchLabelKeys[0]"),
            "Invalid value: \"k\": exists in both matchLabelKeys and mismatchLabelKeys".into()
        )));
    }

    #[test]
    fn topology_spread_constraints() {
        let ok = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3, "nodeAffinityPolicy": "Honor",
            "nodeTaintsPolicy": "Ignore", "labelSelector": {"matchLabels": {"app": "a"}},
            "matchLabelKeys": ["pod-template-hash"]}]});
        assert_eq!(errors(ok), vec![]);
        let errs = errors(json!({"topologySpreadConstraints": [
            {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 0,
             "nodeAffinityPolicy": "Sometimes"},
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "matchLabelKeys": ["x"]},
            {"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "Maybe"}
        ]}));
        let p = "spec.topologySpreadConstraints";
        let want = [
            (format!("{p}[0].maxSkew"), "Invalid value: 0: must be greater than zero"),
            (format!("{p}[0].{{topologyKey, whenUnsatisfiable}}"), "Duplicate value: \"{zone, ScheduleAnyway}\""),
            (format!("{p}[0].minDomains"), "Invalid value: 0: must be greater than zero"),
            (
                format!("{p}[0].minDomains"),
                "Invalid value: 0: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
            ),
            (
                format!("{p}[0].nodeAffinityPolicy"),
                "Unsupported value: \"Sometimes\": supported values: \"Honor\", \"Ignore\"",
            ),
            (format!("{p}[1].matchLabelKeys"), "Forbidden: must not be specified when labelSelector is not set"),
            (format!("{p}[2].topologyKey"), "Required value: can not be empty"),
            (
                format!("{p}[2].whenUnsatisfiable"),
                "Unsupported value: \"Maybe\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
            ),
        ];
        let got: Vec<(String, &str)> = errs.iter().map(|(f, m)| (f.clone(), m.as_str())).collect();
        assert_eq!(got, want.iter().map(|(f, m)| (f.clone(), *m)).collect::<Vec<_>>());
    }

    #[test]
    fn match_label_keys_merge_into_selectors_at_creation() {
        let mut pod = json!({
            "metadata": {"labels": {"app": "web", "pod-template-hash": "abc", "tenant": "t1"}},
            "spec": {
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname",
                     "matchLabelKeys": ["pod-template-hash", "missing"], "mismatchLabelKeys": ["tenant"]}]}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}},
                    "matchLabelKeys": ["pod-template-hash"]}]
            }
        });
        merge_label_keys(&mut pod);
        let term = &pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(
            term["labelSelector"]["matchExpressions"],
            json!([
                {"key": "pod-template-hash", "operator": "In", "values": ["abc"]},
                {"key": "tenant", "operator": "NotIn", "values": ["t1"]}
            ])
        );
        let spread = &pod["spec"]["topologySpreadConstraints"][0];
        assert_eq!(
            spread["labelSelector"]["matchExpressions"],
            json!([{"key": "pod-template-hash", "operator": "In", "values": ["abc"]}])
        );
        // Valid after the merge (and on later updates of the stored pod).
        assert_eq!(errors(pod["spec"].clone()), vec![]);

        // A key also written in the selector by the user appears twice once merged.
        let mut dup = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["app"]}]}});
        merge_label_keys(&mut dup);
        assert_eq!(
            errors(dup["spec"].clone()),
            vec![(
                "spec.topologySpreadConstraints[0].matchLabelKeys[0]".to_string(),
                "Invalid value: \"app\": exists in both matchLabelKeys and labelSelector".to_string()
            )]
        );
    }
}
