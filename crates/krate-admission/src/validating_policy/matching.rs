//! matchConstraints / matchResources: which requests a policy or binding covers
//! (upstream's admission/plugin/cel/matching and webhook rule matching).

use serde_json::{Map, Value};

use krate_api::admission::Operation;
use krate_api::selector::LabelSelector;

/// What a request is, as matching needs it.
pub struct Request<'a> {
    pub operation: Operation,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub name: &'a str,
    pub namespaced: bool,
    pub is_namespace_kind: bool,
}

pub fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
}

fn listed_or_star(list: &[&str], value: &str) -> bool {
    list.iter().any(|x| *x == "*" || *x == value)
}

/// One RuleWithOperations (plus resourceNames for NamedRuleWithOperations).
/// `equivalent` (matchPolicy Equivalent, the default) lets a rule match a request
/// for the same group and resource in another version.
pub fn rule_matches(rule: &Value, req: &Request<'_>, equivalent: bool) -> bool {
    let ops = strings(rule.get("operations"));
    if !listed_or_star(&ops, operation_name(req.operation)) {
        return false;
    }
    if !listed_or_star(&strings(rule.get("apiGroups")), req.group) {
        return false;
    }
    if !equivalent && !listed_or_star(&strings(rule.get("apiVersions")), req.version) {
        return false;
    }
    if equivalent && strings(rule.get("apiVersions")).is_empty() {
        return false;
    }
    let resources = strings(rule.get("resources"));
    let resource_ok = resources.iter().any(|r| {
        let (res, sub) = match r.split_once('/') {
            Some((res, sub)) => (res, Some(sub)),
            None => (*r, None),
        };
        let res_ok = res == "*" || res == req.resource;
        let sub_ok = match (sub, req.subresource) {
            (None, None) => true,
            (None, Some(_)) => false,
            (Some("*"), _) => true,
            (Some(s), Some(rs)) => s == rs,
            (Some(_), None) => false,
        };
        res_ok && sub_ok
    });
    if !resource_ok {
        return false;
    }
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    // Namespaces themselves are cluster-scoped here, as upstream.
    let scope_ok = match scope {
        "Cluster" => !req.namespaced,
        "Namespaced" => req.namespaced,
        _ => true,
    };
    if !scope_ok {
        return false;
    }
    let names = strings(rule.get("resourceNames"));
    names.is_empty() || names.contains(&req.name)
}

/// The label maps a selector is matched against.
pub struct Labels<'a> {
    pub object: Option<&'a Map<String, Value>>,
    pub old_object: Option<&'a Map<String, Value>>,
    /// The request's namespace's labels (None for cluster-scoped requests).
    pub namespace: Option<&'a Map<String, Value>>,
}

fn selector_matches(sel: Option<&Value>, labels: Option<&Map<String, Value>>) -> bool {
    match sel {
        None | Some(Value::Null) => true,
        Some(s) => LabelSelector::from_json(s).matches(labels),
    }
}

/// A MatchResources object. `None` matches everything (a binding without
/// matchResources covers what its policy does).
pub fn resources_match(mr: Option<&Value>, req: &Request<'_>, labels: &Labels<'_>) -> bool {
    let Some(mr) = mr.filter(|v| !v.is_null()) else { return true };
    // namespaceSelector: a cluster-scoped request matches it unless it is a
    // Namespace, which is matched by its own labels.
    let ns_sel = mr.get("namespaceSelector");
    let ns_ok = if req.is_namespace_kind {
        selector_matches(ns_sel, labels.object.or(labels.old_object))
    } else if !req.namespaced {
        true
    } else {
        selector_matches(ns_sel, labels.namespace)
    };
    if !ns_ok {
        return false;
    }
    let obj_sel = mr.get("objectSelector");
    if obj_sel.is_some_and(|s| !s.is_null()) {
        let matches_new = labels.object.is_some() && selector_matches(obj_sel, labels.object);
        let matches_old = labels.old_object.is_some() && selector_matches(obj_sel, labels.old_object);
        let empty = LabelSelector::from_json(obj_sel.unwrap_or(&Value::Null)).is_empty();
        if !(empty || matches_new || matches_old) {
            return false;
        }
    }
    let equivalent = mr.get("matchPolicy").and_then(Value::as_str) != Some("Exact");
    let rules = mr.get("resourceRules").and_then(Value::as_array);
    let included = match rules {
        Some(rules) if !rules.is_empty() => rules.iter().any(|r| rule_matches(r, req, equivalent)),
        _ => true,
    };
    if !included {
        return false;
    }
    let excluded = mr
        .get("excludeResourceRules")
        .and_then(Value::as_array)
        .is_some_and(|rules| rules.iter().any(|r| rule_matches(r, req, equivalent)));
    !excluded
}

/// Admission configuration objects no policy applies to (upstream's
/// IsExemptAdmissionConfigurationResource), so a bad policy cannot lock itself in.
pub fn exempt(req: &Request<'_>) -> bool {
    req.group == "admissionregistration.k8s.io"
        && matches!(
            req.resource,
            "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
                | "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req<'a>(op: Operation, group: &'a str, resource: &'a str, sub: Option<&'a str>) -> Request<'a> {
        Request {
            operation: op,
            group,
            version: "v1",
            resource,
            subresource: sub,
            name: "x",
            namespaced: true,
            is_namespace_kind: false,
        }
    }

    #[test]
    fn rules_match_as_upstream() {
        let rule = json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]});
        assert!(rule_matches(&rule, &req(Operation::Create, "apps", "deployments", None), false));
        assert!(!rule_matches(&rule, &req(Operation::Delete, "apps", "deployments", None), false));
        assert!(!rule_matches(&rule, &req(Operation::Update, "apps", "deployments", Some("scale")), false));
        let all = json!({"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]});
        assert!(rule_matches(&all, &req(Operation::Update, "apps", "deployments", Some("scale")), false));
        let status = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*/status"]});
        assert!(rule_matches(&status, &req(Operation::Update, "", "pods", Some("status")), false));
        assert!(!rule_matches(&status, &req(Operation::Update, "", "pods", None), false));
        let cluster = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"], "scope": "Cluster"});
        assert!(!rule_matches(&cluster, &req(Operation::Create, "", "pods", None), false));
        let named = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"], "resourceNames": ["y"]});
        assert!(!rule_matches(&named, &req(Operation::Create, "", "configmaps", None), false));
    }

    #[test]
    fn selectors_and_excludes() {
        let mr = json!({
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"]}],
            "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["secrets"]}]
        });
        let prod = json!({"env": "prod"});
        let dev = json!({"env": "dev"});
        let labels = |ns: &'static Value| Labels { object: None, old_object: None, namespace: ns.as_object() };
        let prod: &'static Value = Box::leak(Box::new(prod));
        let dev: &'static Value = Box::leak(Box::new(dev));
        assert!(resources_match(Some(&mr), &req(Operation::Create, "", "configmaps", None), &labels(prod)));
        assert!(!resources_match(Some(&mr), &req(Operation::Create, "", "configmaps", None), &labels(dev)));
        assert!(!resources_match(Some(&mr), &req(Operation::Create, "", "secrets", None), &labels(prod)));
        let by_object = json!({"objectSelector": {"matchLabels": {"a": "b"}}});
        let obj = json!({"a": "b"});
        let l = Labels { object: obj.as_object(), old_object: None, namespace: None };
        assert!(resources_match(Some(&by_object), &req(Operation::Create, "", "configmaps", None), &l));
        let l = Labels { object: None, old_object: None, namespace: None };
        assert!(!resources_match(Some(&by_object), &req(Operation::Create, "", "configmaps", None), &l));
    }
}
