//! Workload controllers: Deployments, ReplicaSets, DaemonSets, StatefulSets (apps/v1),
//! and the core ReplicationControllers and PodTemplates.

use serde_json::{Value, json};

use super::pod::{default_pod_template, template_metadata, validate_pod_template};
use super::{
    go_int_or_string, go_label_selector, go_string_map, has, int_of, int_or_percent_value, obj_mut, semantic_eq,
    set_default, set_default_str, str_of, validate_int_or_percent,
};
use crate::error::Cause;
use crate::validation::{
    IMMUTABLE_MSG, invalid_raw, label_selector_is_empty, label_selector_matches, nonnegative, not_supported_raw,
    validate_label_selector,
};

const NULL: Value = Value::Null;

fn spec_of(obj: &Value) -> &Value {
    obj.get("spec").unwrap_or(&NULL)
}

fn template_labels(spec: &Value) -> Option<&serde_json::Map<String, Value>> {
    spec.pointer("/template/metadata/labels").and_then(Value::as_object)
}

/// Whether upstream's `LabelSelectorAsSelector` accepts the selector.
fn selector_parses(sel: Option<&Value>) -> bool {
    let Some(sel) = sel.filter(|s| !s.is_null()) else { return true };
    validate_label_selector(sel, "").is_empty()
}

fn selector(spec: &Value) -> Option<&Value> {
    spec.get("selector").filter(|s| !s.is_null())
}

/// The selector must be present, valid and not empty (`kind` names the workload in
/// upstream's message).
fn validate_required_selector(spec: &Value, kind: &str, c: &mut Vec<Cause>) {
    match selector(spec) {
        None => c.push(Cause::required("spec.selector", "")),
        Some(sel) => {
            c.extend(validate_label_selector(sel, "spec.selector"));
            if label_selector_is_empty(sel) {
                c.push(invalid_raw(
                    "spec.selector",
                    go_label_selector(sel),
                    format!("empty selector is invalid for {kind}"),
                ));
            }
        }
    }
}

fn selector_mismatch(spec: &Value, path: &str) -> Cause {
    invalid_raw(
        format!("{path}.metadata.labels"),
        go_string_map(template_labels(spec)),
        "`selector` does not match template `labels`",
    )
}

/// `ValidatePodTemplateSpecForReplicaSet` (Deployments use it too, with its message).
fn validate_template_for_replica_set(spec: &Value, c: &mut Vec<Cause>) {
    let sel = selector(spec);
    if !selector_parses(sel) {
        c.push(invalid_raw("spec.selector", go_label_selector(sel.unwrap_or(&NULL)), "invalid label selector"));
        return;
    }
    // An empty selector selects everything; an absent one nothing.
    let everything = sel.is_some_and(label_selector_is_empty);
    if !everything && !label_selector_matches(sel, template_labels(spec)) {
        c.push(selector_mismatch(spec, "spec.template"));
    }
    let tmpl = spec.get("template").unwrap_or(&NULL);
    c.extend(validate_pod_template(tmpl, "spec.template"));
    restart_always_and_no_deadline(tmpl, "spec.template.spec", "ReplicaSet", c);
}

fn restart_always_and_no_deadline(tmpl: &Value, path: &str, kind: &str, c: &mut Vec<Cause>) {
    let rp = tmpl.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("");
    if rp != "Always" {
        c.push(Cause::not_supported(format!("{path}.restartPolicy"), rp, &["Always"]));
    }
    if tmpl.pointer("/spec/activeDeadlineSeconds").is_some_and(|v| !v.is_null()) {
        c.push(Cause::forbidden(
            format!("{path}.activeDeadlineSeconds"),
            format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
}

fn nonneg_field(spec: &Value, key: &str, c: &mut Vec<Cause>) {
    if let Some(n) = int_of(spec, key) {
        c.extend(nonnegative(format!("spec.{key}"), n));
    }
}

fn selector_immutable(new: &Value, old: &Value) -> Vec<Cause> {
    let (n, o) = (selector(spec_of(new)), selector(spec_of(old)));
    if semantic_eq(n.unwrap_or(&NULL), o.unwrap_or(&NULL)) {
        Vec::new()
    } else {
        vec![invalid_raw("spec.selector", go_label_selector(n.unwrap_or(&json!({}))), IMMUTABLE_MSG)]
    }
}

// ---- Deployment

pub fn default_deployment(d: &mut Value) {
    let spec = obj_mut(d, "spec");
    set_default(spec, "replicas", json!(1));
    let strategy = obj_mut(spec, "strategy");
    set_default_str(strategy, "type", "RollingUpdate");
    if str_of(strategy, "type") == "RollingUpdate" {
        let ru = obj_mut(strategy, "rollingUpdate");
        set_default(ru, "maxUnavailable", json!("25%"));
        set_default(ru, "maxSurge", json!("25%"));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    default_pod_template(obj_mut(spec, "template"));
}

pub fn validate_deployment(d: &Value) -> Vec<Cause> {
    let spec = spec_of(d);
    let mut c = Vec::new();
    nonneg_field(spec, "replicas", &mut c);
    validate_required_selector(spec, "deployment", &mut c);
    validate_template_for_replica_set(spec, &mut c);
    let strategy = spec.get("strategy").unwrap_or(&NULL);
    match str_of(strategy, "type") {
        "Recreate" => {
            if has(strategy, "rollingUpdate") {
                c.push(Cause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match strategy.get("rollingUpdate").filter(|r| !r.is_null()) {
            None => c.push(Cause::required("spec.strategy.rollingUpdate", "this should be defaulted and never be nil")),
            Some(ru) => {
                let path = "spec.strategy.rollingUpdate";
                let mu = ru.get("maxUnavailable").unwrap_or(&NULL);
                let ms = ru.get("maxSurge").unwrap_or(&NULL);
                c.extend(validate_int_or_percent(mu, &format!("{path}.maxUnavailable"), false));
                c.extend(validate_int_or_percent(ms, &format!("{path}.maxSurge"), false));
                if int_or_percent_value(mu) == 0 && int_or_percent_value(ms) == 0 {
                    c.push(invalid_raw(
                        format!("{path}.maxUnavailable"),
                        go_int_or_string(mu),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
                if mu.is_string() && int_or_percent_value(mu) > 100 {
                    c.push(invalid_raw(
                        format!("{path}.maxUnavailable"),
                        go_int_or_string(mu),
                        "must not be greater than 100%",
                    ));
                }
            }
        },
        t => c.push(not_supported_raw(
            "spec.strategy",
            format!(
                "apps.DeploymentStrategy{{Type:{}, RollingUpdate:{}}}",
                crate::validation::go_quote(t),
                if has(strategy, "rollingUpdate") {
                    "&apps.RollingUpdateDeployment{...}"
                } else {
                    "(*apps.RollingUpdateDeployment)(nil)"
                }
            ),
            &["Recreate", "RollingUpdate"],
        )),
    }
    nonneg_field(spec, "minReadySeconds", &mut c);
    nonneg_field(spec, "revisionHistoryLimit", &mut c);
    if let Some(p) = int_of(spec, "progressDeadlineSeconds") {
        c.extend(nonnegative("spec.progressDeadlineSeconds", p));
        if p <= int_of(spec, "minReadySeconds").unwrap_or(0) {
            c.push(invalid_raw("spec.progressDeadlineSeconds", p.to_string(), "must be greater than minReadySeconds"));
        }
    }
    c
}

pub fn validate_deployment_update(new: &Value, old: &Value) -> Vec<Cause> {
    selector_immutable(new, old)
}

/// Deployments also bump their generation on annotation changes (they are copied to
/// the ReplicaSets).
pub fn deployment_generation(new: &mut Value, old: &Value) {
    let ann = |v: &Value| v.pointer("/metadata/annotations").cloned().unwrap_or(Value::Null);
    if !semantic_eq(&ann(new), &ann(old)) {
        let g = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
        crate::object::meta_mut(new).insert("generation".into(), json!(g + 1));
    }
}

// ---- ReplicaSet

pub fn default_replica_set(rs: &mut Value) {
    let spec = obj_mut(rs, "spec");
    set_default(spec, "replicas", json!(1));
    default_pod_template(obj_mut(spec, "template"));
}

pub fn validate_replica_set(rs: &Value) -> Vec<Cause> {
    let spec = spec_of(rs);
    let mut c = Vec::new();
    nonneg_field(spec, "replicas", &mut c);
    nonneg_field(spec, "minReadySeconds", &mut c);
    // Upstream's ReplicaSet message names deployments too.
    validate_required_selector(spec, "deployment", &mut c);
    validate_template_for_replica_set(spec, &mut c);
    c
}

pub fn validate_replica_set_update(new: &Value, old: &Value) -> Vec<Cause> {
    selector_immutable(new, old)
}

// ---- DaemonSet

pub fn default_daemon_set(ds: &mut Value) {
    let spec = obj_mut(ds, "spec");
    let strategy = obj_mut(spec, "updateStrategy");
    set_default_str(strategy, "type", "RollingUpdate");
    if str_of(strategy, "type") == "RollingUpdate" {
        let ru = obj_mut(strategy, "rollingUpdate");
        set_default(ru, "maxUnavailable", json!(1));
        set_default(ru, "maxSurge", json!(0));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    default_pod_template(obj_mut(spec, "template"));
}

pub fn validate_daemon_set(ds: &Value) -> Vec<Cause> {
    let spec = spec_of(ds);
    let mut c = Vec::new();
    let sel = selector(spec);
    if let Some(s) = sel {
        c.extend(validate_label_selector(s, "spec.selector"));
    }
    if selector_parses(sel) && !label_selector_matches(sel, template_labels(spec)) {
        c.push(selector_mismatch(spec, "spec.template"));
    }
    if let Some(s) = sel.filter(|s| label_selector_is_empty(s)) {
        c.push(invalid_raw("spec.selector", go_label_selector(s), "empty selector is invalid for daemonset"));
    }
    let tmpl = spec.get("template").unwrap_or(&NULL);
    c.extend(validate_pod_template(tmpl, "spec.template"));
    restart_always_and_no_deadline(tmpl, "spec.template.spec", "DaemonSet", &mut c);
    nonneg_field(spec, "minReadySeconds", &mut c);
    let strategy = spec.get("updateStrategy").unwrap_or(&NULL);
    match str_of(strategy, "type") {
        "OnDelete" => {}
        "RollingUpdate" => match strategy.get("rollingUpdate").filter(|r| !r.is_null()) {
            None => c.push(Cause::required("spec.updateStrategy.rollingUpdate", "")),
            Some(ru) => {
                let path = "spec.updateStrategy.rollingUpdate";
                let mu = ru.get("maxUnavailable").unwrap_or(&NULL);
                let ms = ru.get("maxSurge").unwrap_or(&NULL);
                c.extend(validate_int_or_percent(mu, &format!("{path}.maxUnavailable"), true));
                c.extend(validate_int_or_percent(ms, &format!("{path}.maxSurge"), true));
                match (int_or_percent_value(mu) != 0, int_or_percent_value(ms) != 0) {
                    (true, true) => c.push(invalid_raw(
                        format!("{path}.maxSurge"),
                        go_int_or_string(ms),
                        "may not be set when maxUnavailable is non-zero",
                    )),
                    (false, false) => {
                        c.push(Cause::required(format!("{path}.maxUnavailable"), "cannot be 0 when maxSurge is 0"))
                    }
                    _ => {}
                }
            }
        },
        t => c.push(not_supported_raw(
            "spec.updateStrategy",
            format!("apps.DaemonSetUpdateStrategy{{Type:{}, RollingUpdate:...}}", crate::validation::go_quote(t)),
            &["RollingUpdate", "OnDelete"],
        )),
    }
    nonneg_field(spec, "revisionHistoryLimit", &mut c);
    c
}

pub fn validate_daemon_set_update(new: &Value, old: &Value) -> Vec<Cause> {
    selector_immutable(new, old)
}

// ---- StatefulSet

pub fn default_stateful_set(ss: &mut Value) {
    let spec = obj_mut(ss, "spec");
    set_default_str(spec, "podManagementPolicy", "OrderedReady");
    let strategy = obj_mut(spec, "updateStrategy");
    if str_of(strategy, "type").is_empty() {
        strategy["type"] = json!("RollingUpdate");
        set_default(strategy, "rollingUpdate", json!({}));
    }
    if str_of(strategy, "type") == "RollingUpdate"
        && let Some(ru) = strategy.get_mut("rollingUpdate").filter(|r| r.is_object())
    {
        set_default(ru, "partition", json!(0));
    }
    let policy = obj_mut(spec, "persistentVolumeClaimRetentionPolicy");
    set_default_str(policy, "whenDeleted", "Retain");
    set_default_str(policy, "whenScaled", "Retain");
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    default_pod_template(obj_mut(spec, "template"));
    for pvc in super::each_mut(spec, "volumeClaimTemplates") {
        super::storage::default_pvc(pvc);
        set_default_str(obj_mut(pvc, "status"), "phase", "Pending");
    }
}

pub fn validate_stateful_set(ss: &Value) -> Vec<Cause> {
    let spec = spec_of(ss);
    let mut c = Vec::new();
    match str_of(spec, "podManagementPolicy") {
        "" => c.push(Cause::required("spec.podManagementPolicy", "")),
        "OrderedReady" | "Parallel" => {}
        p => c.push(crate::validation::invalid_str(
            "spec.podManagementPolicy",
            p,
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let strategy = spec.get("updateStrategy").unwrap_or(&NULL);
    let ru = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    match str_of(strategy, "type") {
        "" => c.push(Cause::required("spec.updateStrategy", "")),
        "OnDelete" => {
            if ru.is_some() {
                c.push(invalid_raw(
                    "spec.updateStrategy.rollingUpdate",
                    "apps.RollingUpdateStatefulSetStrategy{...}",
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = ru {
                let path = "spec.updateStrategy.rollingUpdate";
                if let Some(p) = int_of(ru, "partition") {
                    c.extend(nonnegative(format!("{path}.partition"), p));
                }
                if let Some(mu) = ru.get("maxUnavailable").filter(|m| !m.is_null()) {
                    let field = format!("{path}.maxUnavailable");
                    c.extend(validate_int_or_percent(mu, &field, false));
                    if int_or_percent_value(mu) == 0 {
                        c.push(invalid_raw(&field, go_int_or_string(mu), "cannot be 0"));
                    }
                    if mu.is_string() && int_or_percent_value(mu) > 100 {
                        c.push(invalid_raw(&field, go_int_or_string(mu), "must not be greater than 100%"));
                    }
                }
            }
        }
        t => c.push(invalid_raw(
            "spec.updateStrategy",
            format!("apps.StatefulSetUpdateStrategy{{Type:{}, RollingUpdate:...}}", crate::validation::go_quote(t)),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    if let Some(policy) = spec.get("persistentVolumeClaimRetentionPolicy").filter(|p| !p.is_null()) {
        for f in ["whenDeleted", "whenScaled"] {
            let v = str_of(policy, f);
            if v != "Retain" && v != "Delete" {
                c.push(Cause::not_supported(
                    format!("spec.persistentVolumeClaimRetentionPolicy.{f}"),
                    v,
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    nonneg_field(spec, "replicas", &mut c);
    nonneg_field(spec, "minReadySeconds", &mut c);
    if let Some(start) = spec.pointer("/ordinals/start").and_then(Value::as_i64) {
        c.extend(nonnegative("spec.ordinals.start", start));
    }
    match selector(spec) {
        None => c.push(Cause::required("spec.selector", "")),
        Some(sel) => {
            c.extend(validate_label_selector(sel, "spec.selector"));
            if label_selector_is_empty(sel) {
                c.push(invalid_raw(
                    "spec.selector",
                    go_label_selector(sel),
                    "empty selector is invalid for statefulset",
                ));
            }
        }
    }
    let sel = selector(spec);
    let tmpl = spec.get("template").unwrap_or(&NULL);
    if !selector_parses(sel) {
        c.push(invalid_raw("spec.selector", go_label_selector(sel.unwrap_or(&NULL)), ""));
    } else {
        // Upstream validates only the template's labels and annotations for StatefulSets.
        let everything = sel.is_some_and(label_selector_is_empty);
        if !everything && !label_selector_matches(sel, template_labels(spec)) {
            c.push(selector_mismatch(spec, "spec.template"));
        }
        c.extend(template_metadata(tmpl, "spec.template"));
    }
    restart_always_and_no_deadline(tmpl, "spec.template.spec", "StatefulSet", &mut c);
    c
}

/// Only replicas, ordinals, template, updateStrategy, the PVC retention policy and
/// minReadySeconds may change.
pub fn validate_stateful_set_update(new: &Value, old: &Value) -> Vec<Cause> {
    let strip = |v: &Value| {
        let mut s = spec_of(v).clone();
        if let Some(m) = s.as_object_mut() {
            for f in [
                "replicas",
                "ordinals",
                "template",
                "updateStrategy",
                "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds",
            ] {
                m.remove(f);
            }
        }
        s
    };
    if semantic_eq(&strip(new), &strip(old)) {
        Vec::new()
    } else {
        vec![Cause::forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        )]
    }
}

// ---- ReplicationController (core/v1)

pub fn default_replication_controller(rc: &mut Value) {
    let labels = rc.pointer("/spec/template/metadata/labels").filter(|l| l.is_object()).cloned();
    let spec = obj_mut(rc, "spec");
    if let Some(labels) = labels {
        if spec.get("selector").and_then(Value::as_object).is_none_or(|m| m.is_empty()) {
            spec["selector"] = labels.clone();
        }
        let meta = crate::object::meta_mut(rc);
        if meta.get("labels").and_then(Value::as_object).is_none_or(|m| m.is_empty()) {
            meta.insert("labels".into(), labels);
        }
    }
    let spec = obj_mut(rc, "spec");
    set_default(spec, "replicas", json!(1));
    if let Some(t) = spec.get_mut("template").filter(|t| t.is_object()) {
        default_pod_template(t);
    }
}

pub fn validate_replication_controller(rc: &Value) -> Vec<Cause> {
    let spec = spec_of(rc);
    let mut c = Vec::new();
    nonneg_field(spec, "minReadySeconds", &mut c);
    let sel = spec.get("selector").and_then(Value::as_object);
    if sel.is_none_or(|m| m.is_empty()) {
        c.push(Cause::required("spec.selector", ""));
    }
    nonneg_field(spec, "replicas", &mut c);
    match spec.get("template").filter(|t| !t.is_null()) {
        None => c.push(Cause::required("spec.template", "")),
        Some(tmpl) => {
            if let Some(sel) = sel.filter(|m| !m.is_empty()) {
                let labels = template_labels(spec);
                let matches = sel.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
                if !matches {
                    c.push(selector_mismatch(spec, "spec.template"));
                }
            }
            c.extend(validate_pod_template(tmpl, "spec.template"));
            restart_always_and_no_deadline(tmpl, "spec.template.spec", "ReplicationController", &mut c);
        }
    }
    c
}

// ---- PodTemplate (core/v1)

pub fn default_pod_template_object(pt: &mut Value) {
    default_pod_template(obj_mut(pt, "template"));
}

pub fn validate_pod_template_object(pt: &Value) -> Vec<Cause> {
    validate_pod_template(pt.get("template").unwrap_or(&NULL), "template")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(c: &[Cause]) -> Vec<String> {
        c.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    fn deployment(spec: Value) -> Value {
        let mut d = json!({"metadata": {"name": "web"}, "spec": spec});
        default_deployment(&mut d);
        d
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}})
    }

    #[test]
    fn deployment_defaults() {
        let d = deployment(json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()}));
        let s = &d["spec"];
        assert_eq!(s["replicas"], 1);
        assert_eq!(
            s["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(s["revisionHistoryLimit"], 10);
        assert_eq!(s["progressDeadlineSeconds"], 600);
        assert_eq!(s["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(s["template"]["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(validate_deployment(&d).is_empty(), "{:?}", msgs(&validate_deployment(&d)));
    }

    #[test]
    fn deployment_selector_rules() {
        let d = deployment(json!({"template": template()}));
        assert_eq!(
            msgs(&validate_deployment(&d)),
            vec![
                "spec.selector: Required value",
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`"
            ]
        );
        let d = deployment(json!({"selector": {}, "template": template()}));
        assert_eq!(
            msgs(&validate_deployment(&d)),
            vec![
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"
            ]
        );
        let old = deployment(json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()}));
        let mut new = old.clone();
        new["spec"]["selector"] = json!({"matchLabels": {"app": "web", "tier": "x"}});
        assert_eq!(
            msgs(&validate_deployment_update(&new, &old)),
            vec![
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\", \"tier\":\"x\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
            ]
        );
        assert!(validate_deployment_update(&old, &old).is_empty());
    }

    #[test]
    fn deployment_strategy_and_template_rules() {
        let mut t = template();
        t["spec"]["restartPolicy"] = json!("Never");
        let d = deployment(json!({"replicas": -1, "selector": {"matchLabels": {"app": "web"}}, "template": t,
            "strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}}, "progressDeadlineSeconds": 5, "minReadySeconds": 10}));
        let m = msgs(&validate_deployment(&d));
        for want in [
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0",
            "spec.progressDeadlineSeconds: Invalid value: 5: must be greater than minReadySeconds",
        ] {
            assert!(m.contains(&want.to_string()), "missing {want}\nin {m:#?}");
        }
    }

    #[test]
    fn daemon_sets() {
        let mut ds = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template()}});
        default_daemon_set(&mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
        assert!(validate_daemon_set(&ds).is_empty(), "{:?}", msgs(&validate_daemon_set(&ds)));
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] = json!(1);
        assert_eq!(
            msgs(&validate_daemon_set(&ds)),
            vec![
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:0, IntVal:1, StrVal:\"\"}: may not be set when maxUnavailable is non-zero"
            ]
        );
    }

    #[test]
    fn stateful_sets() {
        let mut ss = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web", "template": template(),
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}});
        default_stateful_set(&mut ss);
        let s = &ss["spec"];
        assert_eq!(s["podManagementPolicy"], "OrderedReady");
        assert_eq!(s["updateStrategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
        assert_eq!(s["persistentVolumeClaimRetentionPolicy"], json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
        assert_eq!(s["replicas"], 1);
        assert_eq!(s["revisionHistoryLimit"], 10);
        assert_eq!(s["volumeClaimTemplates"][0]["spec"]["volumeMode"], "Filesystem");
        assert_eq!(s["volumeClaimTemplates"][0]["status"]["phase"], "Pending");
        assert!(validate_stateful_set(&ss).is_empty(), "{:?}", msgs(&validate_stateful_set(&ss)));
        let mut scaled = ss.clone();
        scaled["spec"]["replicas"] = json!(5);
        assert!(validate_stateful_set_update(&scaled, &ss).is_empty());
        let mut renamed = ss.clone();
        renamed["spec"]["serviceName"] = json!("other");
        assert_eq!(msgs(&validate_stateful_set_update(&renamed, &ss)).len(), 1);
        assert!(
            msgs(&validate_stateful_set_update(&renamed, &ss))[0]
                .starts_with("spec: Forbidden: updates to statefulset spec")
        );
    }

    #[test]
    fn replication_controllers_default_their_selector() {
        let mut rc = json!({"spec": {"template": template()}});
        default_replication_controller(&mut rc);
        assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(rc["spec"]["replicas"], 1);
        assert!(validate_replication_controller(&rc).is_empty(), "{:?}", msgs(&validate_replication_controller(&rc)));
        rc["spec"]["selector"] = json!({"app": "db"});
        assert!(msgs(&validate_replication_controller(&rc))[0].contains("`selector` does not match template `labels`"));
    }
}
