//! Roles, ClusterRoles and their bindings (rbac.authorization.k8s.io/v1).

use serde_json::{Value, json};

use super::{array_of, each_mut, go_string_slice, obj_mut, set_default_str, str_of};
use crate::error::Cause;
use crate::validation::{
    NameRule, dns1123_subdomain_errors, invalid_raw, invalid_str, name_errors, validate_label_selector,
};

pub const GROUP: &str = "rbac.authorization.k8s.io";

/// `ValidatePolicyRule`.
fn validate_rules(obj: &Value, namespaced: bool, c: &mut Vec<Cause>) {
    for (i, rule) in array_of(obj, "rules").iter().enumerate() {
        let at = format!("rules[{i}]");
        if array_of(rule, "verbs").is_empty() {
            c.push(Cause::required(format!("{at}.verbs"), "verbs must contain at least one value"));
        }
        if !array_of(rule, "nonResourceURLs").is_empty() {
            let urls = go_string_slice(rule.get("nonResourceURLs"));
            if namespaced {
                c.push(invalid_raw(
                    format!("{at}.nonResourceURLs"),
                    &urls,
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if ["apiGroups", "resources", "resourceNames"].iter().any(|f| !array_of(rule, f).is_empty()) {
                c.push(invalid_raw(
                    format!("{at}.nonResourceURLs"),
                    &urls,
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if array_of(rule, "apiGroups").is_empty() {
            c.push(Cause::required(format!("{at}.apiGroups"), "resource rules must supply at least one api group"));
        }
        if array_of(rule, "resources").is_empty() {
            c.push(Cause::required(format!("{at}.resources"), "resource rules must supply at least one resource"));
        }
    }
}

pub fn validate_role(role: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    validate_rules(role, true, &mut c);
    c
}

pub fn validate_cluster_role(role: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    validate_rules(role, false, &mut c);
    if let Some(agg) = role.get("aggregationRule").filter(|a| !a.is_null()) {
        let selectors = array_of(agg, "clusterRoleSelectors");
        if selectors.is_empty() {
            c.push(Cause::required(
                "aggregationRule.clusterRoleSelectors",
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (i, s) in selectors.iter().enumerate() {
            c.extend(validate_label_selector(s, &format!("aggregationRule.clusterRoleSelectors[{i}]")));
        }
    }
    c
}

/// `SetDefaults_Subject` and the roleRef's group.
pub fn default_binding(b: &mut Value) {
    set_default_str(obj_mut(b, "roleRef"), "apiGroup", GROUP);
    for s in each_mut(b, "subjects") {
        if str_of(s, "apiGroup").is_empty() && matches!(str_of(s, "kind"), "User" | "Group") {
            s["apiGroup"] = json!(GROUP);
        }
    }
}

/// `ValidateRoleBinding` / `ValidateClusterRoleBinding` (`cluster` for the latter).
pub fn validate_binding(b: &Value, cluster: bool) -> Vec<Cause> {
    let mut c = Vec::new();
    let role_ref = b.get("roleRef").unwrap_or(&Value::Null);
    let group = str_of(role_ref, "apiGroup");
    if group != GROUP {
        c.push(Cause::not_supported("roleRef.apiGroup", group, &[GROUP]));
    }
    let kind = str_of(role_ref, "kind");
    let kinds: &[&str] = if cluster { &["ClusterRole"] } else { &["Role", "ClusterRole"] };
    if !kinds.contains(&kind) {
        c.push(Cause::not_supported("roleRef.kind", kind, kinds));
    }
    let name = str_of(role_ref, "name");
    if name.is_empty() {
        c.push(Cause::required("roleRef.name", ""));
    } else {
        for msg in name_errors(NameRule::PathSegment, name) {
            c.push(invalid_str("roleRef.name", name, msg));
        }
    }
    for (i, s) in array_of(b, "subjects").iter().enumerate() {
        let at = format!("subjects[{i}]");
        let sname = str_of(s, "name");
        if sname.is_empty() {
            c.push(Cause::required(format!("{at}.name"), ""));
        }
        let api_group = str_of(s, "apiGroup");
        match str_of(s, "kind") {
            "ServiceAccount" => {
                if !sname.is_empty() {
                    for msg in dns1123_subdomain_errors(sname) {
                        c.push(invalid_str(format!("{at}.name"), sname, msg));
                    }
                }
                if !api_group.is_empty() {
                    c.push(Cause::not_supported(format!("{at}.apiGroup"), api_group, &[""]));
                }
                if cluster && str_of(s, "namespace").is_empty() {
                    c.push(Cause::required(format!("{at}.namespace"), ""));
                }
            }
            "User" | "Group" => {
                if api_group != GROUP {
                    c.push(Cause::not_supported(format!("{at}.apiGroup"), api_group, &[GROUP]));
                }
            }
            other => c.push(Cause::not_supported(format!("{at}.kind"), other, &["ServiceAccount", "User", "Group"])),
        }
    }
    c
}

fn go_role_ref(r: &Value) -> String {
    let q = |k: &str| crate::validation::go_quote(str_of(r, k));
    format!("rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}", q("apiGroup"), q("kind"), q("name"))
}

/// A binding's roleRef never changes.
pub fn validate_binding_update(new: &Value, old: &Value) -> Vec<Cause> {
    let (n, o) = (new.get("roleRef").unwrap_or(&Value::Null), old.get("roleRef").unwrap_or(&Value::Null));
    let same = ["apiGroup", "kind", "name"].iter().all(|k| str_of(n, k) == str_of(o, k));
    if same { Vec::new() } else { vec![invalid_raw("roleRef", go_role_ref(n), "cannot change roleRef")] }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(c: &[Cause]) -> Vec<String> {
        c.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn rules() {
        let role = json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, {}, {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]});
        assert_eq!(
            msgs(&validate_role(&role)),
            vec![
                "rules[1].verbs: Required value: verbs must contain at least one value",
                "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].resources: Required value: resource rules must supply at least one resource",
                "rules[2].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs"
            ]
        );
        let cr = json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]});
        assert!(validate_cluster_role(&cr).is_empty());
    }

    #[test]
    fn bindings() {
        let mut b = json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "sa"}]});
        default_binding(&mut b);
        assert_eq!(b["roleRef"]["apiGroup"], GROUP);
        assert_eq!(b["subjects"][0]["apiGroup"], GROUP);
        assert!(b["subjects"][1].get("apiGroup").is_none());
        assert!(validate_binding(&b, false).is_empty(), "{:?}", msgs(&validate_binding(&b, false)));
        assert_eq!(
            msgs(&validate_binding(&b, true)),
            vec![
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[1].namespace: Required value"
            ]
        );
        let mut changed = b.clone();
        changed["roleRef"]["kind"] = json!("ClusterRole");
        assert_eq!(
            msgs(&validate_binding_update(&changed, &b)),
            vec![
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"r\"}: cannot change roleRef"
            ]
        );
    }
}
