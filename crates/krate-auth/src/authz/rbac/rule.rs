//! PolicyRules: what one rule grants (matching a request), and whether one set of rules
//! covers another (the privilege-escalation check), as upstream's rbac/v1 helpers.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::authz::Attributes;

/// One rbac.authorization.k8s.io/v1 PolicyRule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    v.get(field).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(String::from).collect()
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl PolicyRule {
    /// A resource rule: `verbs` on `resources` of `groups`.
    pub fn resource(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Self {
        PolicyRule { verbs: owned(verbs), api_groups: owned(groups), resources: owned(resources), ..Default::default() }
    }

    /// A non-resource rule: `verbs` on `urls`.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        PolicyRule { verbs: owned(verbs), non_resource_urls: owned(urls), ..Default::default() }
    }

    pub fn names(mut self, names: &[&str]) -> Self {
        self.resource_names = owned(names);
        self
    }

    pub fn from_json(v: &Value) -> Self {
        PolicyRule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// The rules of a Role or ClusterRole object.
    pub fn list_from(obj: &Value) -> Vec<PolicyRule> {
        obj.get("rules").and_then(Value::as_array).into_iter().flatten().map(PolicyRule::from_json).collect()
    }

    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("verbs".into(), json!(self.verbs));
        for (k, v) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !v.is_empty() {
                m.insert(k.into(), json!(v));
            }
        }
        Value::Object(m)
    }

    /// Whether this rule allows the request (upstream's RuleAllows).
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        if !verb_matches(&self.verbs, a.verb) {
            return false;
        }
        if !a.resource_request {
            return self.non_resource_urls.iter().any(|u| url_matches(u, a.path));
        }
        let combined = match a.subresource {
            "" => a.resource.to_string(),
            sub => format!("{}/{sub}", a.resource),
        };
        has_or_star(&self.api_groups, a.api_group)
            && resource_matches(&self.resources, &combined, a.subresource)
            && (self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == a.name))
    }

    /// Upstream's CompactString, as escalation errors show missing rules, e.g.
    /// `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`.
    pub fn compact_string(&self) -> String {
        let quoted = |v: &[String]| format!("[{}]", v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "));
        let mut parts = Vec::new();
        for (label, v) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !v.is_empty() {
                parts.push(format!("{label}:{}", quoted(v)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

fn has_or_star(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

fn verb_matches(verbs: &[String], verb: &str) -> bool {
    has_or_star(verbs, verb)
}

/// "*", the combined "resource/subresource", or "*/subresource".
fn resource_matches(rule_resources: &[String], combined: &str, subresource: &str) -> bool {
    rule_resources.iter().any(|r| {
        r == "*" || r == combined || (!subresource.is_empty() && r.strip_prefix("*/").is_some_and(|s| s == subresource))
    })
}

/// An exact path, "*", or a prefix ending in "*".
fn url_matches(rule: &str, path: &str) -> bool {
    rule == "*" || rule == path || rule.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
}

/// Splits rules into single-verb, single-group, single-resource (and single-name)
/// rules: the units the coverage check compares (upstream's BreakdownRule).
pub fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    verbs: vec![verb.clone()],
                    api_groups: vec![group.clone()],
                    resources: vec![resource.clone()],
                    ..Default::default()
                };
                for name in &rule.resource_names {
                    out.push(PolicyRule { resource_names: vec![name.clone()], ..base.clone() });
                }
                if rule.resource_names.is_empty() {
                    out.push(base);
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                verbs: vec![verb.clone()],
                non_resource_urls: vec![url.clone()],
                ..Default::default()
            });
        }
    }
    out
}

fn has_all(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| owner.contains(w))
}

fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if owner.iter().any(|r| r == "*") {
        return true;
    }
    wanted.iter().all(|w| {
        owner.contains(w)
            || w.split_once('/').is_some_and(|(_, sub)| owner.iter().any(|o| o.strip_prefix("*/") == Some(sub)))
    })
}

fn urls_cover(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| owner.iter().any(|o| url_matches(o, w)))
}

/// Whether `owner` grants everything `sub` (a broken-down rule) does.
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = owner.verbs.iter().any(|v| v == "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = owner.api_groups.iter().any(|g| g == "*") || has_all(&owner.api_groups, &sub.api_groups);
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && has_all(&owner.resource_names, &sub.resource_names));
    verbs
        && groups
        && resources_cover(&owner.resources, &sub.resources)
        && urls_cover(&owner.non_resource_urls, &sub.non_resource_urls)
        && names
}

/// Whether `owner` rules grant everything `requested` rules do; if not, the pieces of
/// `requested` nobody covers (upstream's Covers).
pub fn covers(owner: &[PolicyRule], requested: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let missing: Vec<PolicyRule> =
        requested.iter().flat_map(breakdown).filter(|sub| !owner.iter().any(|o| rule_covers(o, sub))).collect();
    (missing.is_empty(), missing)
}

/// Merges single-group, single-resource rules without names into one rule per
/// group/resource with all their verbs (upstream's CompactRules), for shorter messages.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut merged: BTreeMap<(String, String), PolicyRule> = BTreeMap::new();
    let mut out = Vec::new();
    for r in rules {
        let simple = r.api_groups.len() == 1
            && r.resources.len() == 1
            && r.resource_names.is_empty()
            && r.non_resource_urls.is_empty();
        if !simple {
            out.push(r);
            continue;
        }
        let key = (r.api_groups[0].clone(), r.resources[0].clone());
        let entry = merged.entry(key).or_insert_with(|| PolicyRule { verbs: vec![], ..r.clone() });
        for v in r.verbs {
            if !entry.verbs.contains(&v) {
                entry.verbs.push(v);
            }
        }
    }
    out.extend(merged.into_values());
    out
}

#[cfg(test)]
mod tests {
    use krate_api::user::UserInfo;

    use super::*;

    fn attrs<'a>(
        user: &'a UserInfo,
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        sub: &'a str,
        name: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            user,
            verb,
            resource_request: true,
            path: "",
            namespace: "default",
            api_group: group,
            api_version: "v1",
            resource,
            subresource: sub,
            name,
            field_selector: "",
        }
    }

    #[test]
    fn resource_rules_match_verbs_groups_resources_and_names() {
        let u = UserInfo::default();
        let rule = PolicyRule::resource(&["get", "list"], &[""], &["pods", "pods/log"]);
        assert!(rule.allows(&attrs(&u, "get", "", "pods", "", "web")));
        assert!(rule.allows(&attrs(&u, "get", "", "pods", "log", "web")));
        assert!(!rule.allows(&attrs(&u, "get", "", "pods", "exec", "web")));
        assert!(!rule.allows(&attrs(&u, "delete", "", "pods", "", "web")));
        assert!(!rule.allows(&attrs(&u, "get", "apps", "pods", "", "web")));
        let named = PolicyRule::resource(&["get"], &[""], &["configmaps"]).names(&["a"]);
        assert!(named.allows(&attrs(&u, "get", "", "configmaps", "", "a")));
        assert!(!named.allows(&attrs(&u, "get", "", "configmaps", "", "b")));
        assert!(!named.allows(&attrs(&u, "get", "", "configmaps", "", "")));
        let stars = PolicyRule::resource(&["*"], &["*"], &["*"]);
        assert!(stars.allows(&attrs(&u, "escalate", "rbac.authorization.k8s.io", "roles", "", "")));
        let any_status = PolicyRule::resource(&["update"], &["apps"], &["*/status"]);
        assert!(any_status.allows(&attrs(&u, "update", "apps", "deployments", "status", "d")));
        assert!(!any_status.allows(&attrs(&u, "update", "apps", "deployments", "", "d")));
    }

    #[test]
    fn non_resource_rules_match_exact_paths_and_star_prefixes() {
        let u = UserInfo::default();
        let rule = PolicyRule::urls(&["get"], &["/healthz", "/apis/*"]);
        let mut a = attrs(&u, "get", "", "", "", "");
        a.resource_request = false;
        for (path, allowed) in [("/healthz", true), ("/healthz/ping", false), ("/apis/apps/v1", true), ("/api", false)]
        {
            a.path = path;
            assert_eq!(rule.allows(&a), allowed, "{path}");
        }
        a.path = "/healthz";
        a.verb = "post";
        assert!(!rule.allows(&a));
        // Resource rules never match non-resource requests.
        a.verb = "get";
        assert!(!PolicyRule::resource(&["*"], &["*"], &["*"]).allows(&a));
    }

    #[test]
    fn coverage_needs_every_piece_of_the_requested_rules() {
        let owner = vec![
            PolicyRule::resource(&["get", "list"], &[""], &["pods"]),
            PolicyRule::resource(&["*"], &["apps"], &["*/scale"]),
            PolicyRule::resource(&["get"], &[""], &["secrets"]).names(&["s1"]),
            PolicyRule::urls(&["get"], &["/logs/*"]),
        ];
        assert!(covers(&owner, &[PolicyRule::resource(&["get"], &[""], &["pods"])]).0);
        assert!(covers(&owner, &[PolicyRule::resource(&["update"], &["apps"], &["deployments/scale"])]).0);
        assert!(covers(&owner, &[PolicyRule::resource(&["get"], &[""], &["secrets"]).names(&["s1"])]).0);
        assert!(covers(&owner, &[PolicyRule::urls(&["get"], &["/logs/a"])]).0);
        // Names restrict: an owner limited to s1 cannot grant every secret.
        let (ok, missing) = covers(&owner, &[PolicyRule::resource(&["get"], &[""], &["secrets"])]);
        assert!(!ok);
        assert_eq!(missing, vec![PolicyRule::resource(&["get"], &[""], &["secrets"])]);
        let (ok, missing) = covers(&owner, &[PolicyRule::resource(&["get", "delete", "watch"], &[""], &["pods"])]);
        assert!(!ok);
        let compacted = compact(missing);
        assert_eq!(compacted.len(), 1);
        assert_eq!(compacted[0].compact_string(), r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete" "watch"]}"#);
        let admin = vec![PolicyRule::resource(&["*"], &["*"], &["*"]), PolicyRule::urls(&["*"], &["*"])];
        assert!(covers(&admin, &owner).0);
    }
}
