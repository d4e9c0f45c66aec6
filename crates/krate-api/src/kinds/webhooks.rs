//! MutatingWebhookConfiguration and ValidatingWebhookConfiguration
//! (admissionregistration.k8s.io/v1): upstream's defaults (`v1/defaults.go`) and
//! validation (`validation.go`: names, rules, policies, sideEffects,
//! admissionReviewVersions, clientConfig).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{array_of, each_mut, has, int_of, set_default, str_of};
use crate::error::Cause;
use crate::validation::{dns1123_subdomain_errors, invalid_int, invalid_raw, invalid_str, validate_label_selector};

/// AdmissionReview versions this server speaks (upstream's AcceptedAdmissionReviewVersions).
pub const ACCEPTED_REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
const SIDE_EFFECTS_NONE: &[&str] = &["None", "NoneOnDryRun"];
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];

/// Upstream's v1 defaults for each webhook of a configuration.
fn default_webhooks(obj: &mut Value, mutating: bool) {
    for hook in each_mut(obj, "webhooks") {
        if !hook.is_object() {
            continue;
        }
        set_default(hook, "failurePolicy", json!("Fail"));
        set_default(hook, "matchPolicy", json!("Equivalent"));
        set_default(hook, "namespaceSelector", json!({}));
        set_default(hook, "objectSelector", json!({}));
        set_default(hook, "timeoutSeconds", json!(10));
        if mutating {
            set_default(hook, "reinvocationPolicy", json!("Never"));
        }
        for rule in each_mut(hook, "rules") {
            if rule.is_object() {
                set_default(rule, "scope", json!("*"));
            }
        }
        if let Some(service) = hook.pointer_mut("/clientConfig/service").filter(|s| s.is_object()) {
            set_default(service, "port", json!(443));
        }
    }
}

pub fn default_mutating(obj: &mut Value) {
    default_webhooks(obj, true);
}

pub fn default_validating(obj: &mut Value) {
    default_webhooks(obj, false);
}

pub fn validate_mutating(obj: &Value) -> Vec<Cause> {
    validate_configuration(obj, true, &Requirements::STRICT)
}

pub fn validate_validating(obj: &Value) -> Vec<Cause> {
    validate_configuration(obj, false, &Requirements::STRICT)
}

/// Which of upstream's stricter rules apply. Upstream relaxes them on update for what
/// the old object already broke; krate's strategies validate updates as creates, so all
/// apply (an object stored before these checks must be fixed when next written).
pub struct Requirements {
    no_side_effects: bool,
    recognized_review_version: bool,
    unique_names: bool,
}

impl Requirements {
    pub const STRICT: Requirements =
        Requirements { no_side_effects: true, recognized_review_version: true, unique_names: true };
}

/// Upstream's validate{Mutating,Validating}WebhookConfiguration (metadata is checked by
/// the registry).
pub fn validate_configuration(obj: &Value, mutating: bool, req: &Requirements) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut names = BTreeSet::new();
    for (i, hook) in array_of(obj, "webhooks").iter().enumerate() {
        let at = format!("webhooks[{i}]");
        causes.extend(validate_webhook(hook, mutating, req, &at));
        causes.extend(validate_review_versions(
            hook.get("admissionReviewVersions"),
            req.recognized_review_version,
            &format!("{at}.admissionReviewVersions"),
        ));
        let name = str_of(hook, "name");
        if req.unique_names && !name.is_empty() && !names.insert(name.to_string()) {
            causes.push(Cause::duplicate(format!("{at}.name"), name));
        }
    }
    causes
}

fn go_list(v: &[Value]) -> String {
    let items: Vec<&str> = v.iter().map(|s| s.as_str().unwrap_or("")).collect();
    format!("[]string{{{}}}", items.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", "))
}

fn validate_review_versions(versions: Option<&Value>, require_recognized: bool, at: &str) -> Vec<Cause> {
    let versions = versions.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let mut causes = Vec::new();
    if versions.is_empty() {
        causes.push(Cause::required(at, format!("must specify one of {}", ACCEPTED_REVIEW_VERSIONS.join(", "))));
        return causes;
    }
    let mut seen = BTreeSet::new();
    let mut accepted = false;
    for (i, v) in versions.iter().enumerate() {
        let v = v.as_str().unwrap_or("");
        if !seen.insert(v) {
            causes.push(invalid_str(format!("{at}[{i}]"), v, "duplicate version"));
            continue;
        }
        if !is_dns1035_label(v) {
            causes.push(invalid_str(format!("{at}[{i}]"), v, DNS1035_MSG));
        }
        accepted |= ACCEPTED_REVIEW_VERSIONS.contains(&v);
    }
    if require_recognized && !accepted {
        causes.push(invalid_raw(
            at,
            go_list(versions),
            format!("must include at least one of {}", ACCEPTED_REVIEW_VERSIONS.join(", ")),
        ));
    }
    causes
}

const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn validate_webhook(hook: &Value, mutating: bool, req: &Requirements, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    causes.extend(fully_qualified_name(str_of(hook, "name"), &format!("{at}.name")));
    for (i, rule) in array_of(hook, "rules").iter().enumerate() {
        causes.extend(validate_rule(rule, &format!("{at}.rules[{i}]")));
    }
    let enum_field = |causes: &mut Vec<Cause>, field: &str, allowed: &[&str]| {
        if let Some(v) = hook.get(field).filter(|v| !v.is_null()) {
            let s = v.as_str().unwrap_or("");
            if !allowed.contains(&s) {
                causes.push(Cause::not_supported(format!("{at}.{field}"), s, allowed));
            }
        }
    };
    enum_field(&mut causes, "failurePolicy", &["Fail", "Ignore"]);
    enum_field(&mut causes, "matchPolicy", &["Equivalent", "Exact"]);
    if mutating {
        enum_field(&mut causes, "reinvocationPolicy", &["IfNeeded", "Never"]);
    }
    let side_effects: &[&str] =
        if req.no_side_effects { SIDE_EFFECTS_NONE } else { &["None", "NoneOnDryRun", "Some", "Unknown"] };
    match hook.get("sideEffects").filter(|v| !v.is_null()) {
        None => causes.push(Cause::required(
            format!("{at}.sideEffects"),
            format!("must specify one of {}", side_effects.join(", ")),
        )),
        Some(v) => {
            let s = v.as_str().unwrap_or("");
            if !side_effects.contains(&s) {
                causes.push(Cause::not_supported(format!("{at}.sideEffects"), s, side_effects));
            }
        }
    }
    if let Some(t) = int_of(hook, "timeoutSeconds")
        && !(1..=30).contains(&t)
    {
        causes.push(invalid_int(
            format!("{at}.timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for sel in ["namespaceSelector", "objectSelector"] {
        if let Some(s) = hook.get(sel).filter(|v| !v.is_null()) {
            causes.extend(validate_label_selector(s, &format!("{at}.{sel}")));
        }
    }
    let cc = hook.get("clientConfig").cloned().unwrap_or(Value::Null);
    match (has(&cc, "url"), has(&cc, "service")) {
        (true, false) => causes.extend(validate_url(str_of(&cc, "url"), &format!("{at}.clientConfig.url"))),
        (false, true) => causes.extend(validate_service(&cc["service"], &format!("{at}.clientConfig.service"))),
        _ => causes.push(Cause::required(format!("{at}.clientConfig"), "exactly one of url or service is required")),
    }
    // Match conditions: named uniquely, each with an expression (compiled by the plugin;
    // an expression that does not compile fails as the webhook's failurePolicy says).
    let conditions = array_of(hook, "matchConditions");
    if conditions.len() > 64 {
        causes.push(Cause::new(
            "FieldValueTooMany",
            format!("Too many: {}: must have at most 64 items", conditions.len()),
            format!("{at}.matchConditions"),
        ));
    }
    let mut names = std::collections::HashSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let here = format!("{at}.matchConditions[{i}]");
        let name = str_of(c, "name");
        if name.is_empty() {
            causes.push(Cause::required(format!("{here}.name"), ""));
        } else if !names.insert(name) {
            causes.push(Cause::duplicate(format!("{here}.name"), name));
        }
        if str_of(c, "expression").trim().is_empty() {
            causes.push(Cause::required(format!("{here}.expression"), ""));
        }
    }
    causes
}

/// Upstream's IsFullyQualifiedName.
fn fully_qualified_name(name: &str, at: &str) -> Vec<Cause> {
    if name.is_empty() {
        return vec![Cause::required(at, "")];
    }
    let errs = dns1123_subdomain_errors(name);
    if !errs.is_empty() {
        return vec![invalid_str(at, name, errs.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![invalid_str(at, name, "should be a domain with at least three segments separated by dots")];
    }
    Vec::new()
}

fn validate_rule(rule: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ops = array_of(rule, "operations");
    if ops.is_empty() {
        causes.push(Cause::required(format!("{at}.operations"), ""));
    }
    let wildcard = |v: &[Value]| v.iter().any(|s| s.as_str() == Some("*"));
    if ops.len() > 1 && wildcard(ops) {
        causes.push(invalid_raw(
            format!("{at}.operations"),
            format!("[]admissionregistration.OperationType{{{}}}", quoted(ops)),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        let op = op.as_str().unwrap_or("");
        if !OPERATIONS.contains(&op) {
            causes.push(Cause::not_supported(format!("{at}.operations[{i}]"), op, OPERATIONS));
        }
    }
    let groups = array_of(rule, "apiGroups");
    if groups.is_empty() {
        causes.push(Cause::required(format!("{at}.apiGroups"), ""));
    }
    if groups.len() > 1 && wildcard(groups) {
        causes.push(invalid_raw(
            format!("{at}.apiGroups"),
            go_list(groups),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = array_of(rule, "apiVersions");
    if versions.is_empty() {
        causes.push(Cause::required(format!("{at}.apiVersions"), ""));
    }
    if versions.len() > 1 && wildcard(versions) {
        causes.push(invalid_raw(
            format!("{at}.apiVersions"),
            go_list(versions),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v.as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required(format!("{at}.apiVersions[{i}]"), ""));
        }
    }
    causes.extend(validate_resources(array_of(rule, "resources"), &format!("{at}.resources")));
    if let Some(scope) = rule.get("scope").filter(|v| !v.is_null()) {
        let s = scope.as_str().unwrap_or("");
        if !["*", "Cluster", "Namespaced"].contains(&s) {
            causes.push(Cause::not_supported(format!("{at}.scope"), s, &["*", "Cluster", "Namespaced"]));
        }
    }
    causes
}

fn quoted(v: &[Value]) -> String {
    v.iter().map(|s| format!("{:?}", s.as_str().unwrap_or(""))).collect::<Vec<_>>().join(", ")
}

/// Upstream's validateResources: resource/subresource pairs and their wildcards.
fn validate_resources(resources: &[Value], at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if resources.is_empty() {
        causes.push(Cause::required(at, ""));
    }
    let mut with_wildcard_sub = BTreeSet::new();
    let mut sub_with_wildcard_res = BTreeSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in resources.iter().enumerate() {
        let rs = rs.as_str().unwrap_or("");
        if rs.is_empty() {
            causes.push(Cause::required(format!("{at}[{i}]"), ""));
            continue;
        }
        double |= rs == "*/*";
        single |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = rs != "*";
            continue;
        };
        if with_wildcard_sub.contains(res) {
            causes.push(invalid_str(
                format!("{at}[{i}]"),
                rs,
                format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if sub_with_wildcard_res.contains(sub) {
            causes.push(invalid_str(
                format!("{at}[{i}]"),
                rs,
                format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            with_wildcard_sub.insert(res);
        }
        if res == "*" {
            sub_with_wildcard_res.insert(sub);
        }
    }
    if resources.len() > 1 && double {
        causes.push(invalid_raw(at, go_list(resources), "if '*/*' is present, must not specify other resources"));
    }
    if single && plain {
        causes.push(invalid_raw(
            at,
            go_list(resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    causes
}

const URL_FORM: &str = "; desired format: https://host[/path]";

/// Upstream's ValidateWebhookURL with https forced.
pub fn validate_url(url: &str, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (rest, fragment) = url.split_once('#').unwrap_or((url, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let Some((scheme, after)) = rest.split_once("://") else {
        causes.push(invalid_str(at, "", format!("'https' is the only allowed URL scheme{URL_FORM}")));
        causes.push(invalid_str(at, "", format!("host must be specified{URL_FORM}")));
        return causes;
    };
    let authority = after.split('/').next().unwrap_or("");
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if scheme != "https" {
        causes.push(invalid_str(at, scheme, format!("'https' is the only allowed URL scheme{URL_FORM}")));
    }
    if host.is_empty() {
        causes.push(invalid_str(at, host, format!("host must be specified{URL_FORM}")));
    }
    if let Some(u) = user {
        causes.push(invalid_str(at, u, "user information is not permitted in the URL"));
    }
    if !fragment.is_empty() {
        causes.push(invalid_str(at, fragment, "fragments are not permitted in the URL"));
    }
    if !query.is_empty() {
        causes.push(invalid_str(at, query, "query parameters are not permitted in the URL"));
    }
    causes
}

/// Upstream's ValidateWebhookService.
fn validate_service(svc: &Value, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if str_of(svc, "name").is_empty() {
        causes.push(Cause::required(format!("{at}.name"), "service name is required"));
    }
    if str_of(svc, "namespace").is_empty() {
        causes.push(Cause::required(format!("{at}.namespace"), "service namespace is required"));
    }
    if let Some(port) = int_of(svc, "port")
        && !(1..=65535).contains(&port)
    {
        causes.push(invalid_int(
            format!("{at}.port"),
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(path) = svc.get("path").and_then(Value::as_str) else { return causes };
    if path.is_empty() || path == "/" {
        return causes;
    }
    let at = format!("{at}.path");
    if path == "//" {
        causes.push(invalid_str(&at, path, "segment[0] may not be empty"));
        return causes;
    }
    if !path.starts_with('/') {
        causes.push(invalid_str(&at, path, "must start with a '/'"));
    }
    let check = path.get(1..).unwrap_or("");
    let check = check.strip_suffix('/').unwrap_or(check);
    for (i, step) in check.split('/').enumerate() {
        if step.is_empty() {
            causes.push(invalid_str(&at, path, format!("segment[{i}] may not be empty")));
            continue;
        }
        for e in dns1123_subdomain_errors(step) {
            causes.push(invalid_str(&at, path, format!("segment[{i}]: {e}")));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> Value {
        json!({"name": "deny.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
               "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
               "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]})
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_complete_webhook_is_valid_and_defaulted() {
        let mut obj = json!({"webhooks": [hook()]});
        default_mutating(&mut obj);
        assert!(validate_mutating(&obj).is_empty(), "{:?}", validate_mutating(&obj));
        let h = &obj["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["rules"][0]["scope"], "*");
    }

    #[test]
    fn upstreams_rules_are_enforced() {
        let mut bad = hook();
        bad["name"] = json!("short.name");
        bad.as_object_mut().unwrap().remove("sideEffects");
        bad["admissionReviewVersions"] = json!(["v2"]);
        bad["clientConfig"] = json!({"url": "http://x/y?z=1", "service": {"name": "s", "namespace": "n"}});
        bad["timeoutSeconds"] = json!(31);
        let causes = validate_validating(&json!({"webhooks": [bad.clone(), hook(), hook()]}));
        let f = fields(&causes);
        for expected in [
            "webhooks[0].name",
            "webhooks[0].sideEffects",
            "webhooks[0].admissionReviewVersions",
            "webhooks[0].clientConfig",
            "webhooks[0].timeoutSeconds",
            "webhooks[2].name",
        ] {
            assert!(f.contains(&expected), "{expected} missing from {causes:?}");
        }
        let name = causes.iter().find(|c| c.field == "webhooks[0].name").unwrap();
        assert!(name.message.contains("at least three segments"), "{}", name.message);
        assert_eq!(causes.iter().find(|c| c.field == "webhooks[2].name").unwrap().reason, "FieldValueDuplicate");
    }

    #[test]
    fn urls_must_be_https_without_query_or_fragment() {
        assert!(validate_url("https://hook.example.com:8443/a", "u").is_empty());
        let causes = validate_url("http://user@host/a?b#c", "u");
        let messages: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(causes.len(), 4, "{messages:?}");
        assert!(messages[0].contains("'https' is the only allowed URL scheme"));
    }

    #[test]
    fn resource_wildcards_follow_upstream() {
        assert!(validate_resources(&[json!("*"), json!("pods/status")], "r").is_empty());
        assert_eq!(validate_resources(&[json!("*"), json!("pods")], "r").len(), 1);
        assert_eq!(validate_resources(&[json!("*/*"), json!("pods")], "r").len(), 1);
        assert_eq!(validate_resources(&[json!("pods/*"), json!("pods/status")], "r").len(), 1);
    }

    #[test]
    fn match_conditions_need_unique_names_and_expressions() {
        let mut h = hook();
        h["matchConditions"] = json!([{"name": "a", "expression": "true"}]);
        assert!(validate_validating(&json!({"webhooks": [h.clone()]})).is_empty());
        h["matchConditions"] =
            json!([{"name": "a", "expression": "true"}, {"name": "a", "expression": ""}, {"expression": "true"}]);
        let causes = validate_validating(&json!({"webhooks": [h]}));
        assert_eq!(
            fields(&causes),
            [
                "webhooks[0].matchConditions[1].name",
                "webhooks[0].matchConditions[1].expression",
                "webhooks[0].matchConditions[2].name"
            ]
        );
    }
}
