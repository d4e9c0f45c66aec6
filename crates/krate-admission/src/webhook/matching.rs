//! Which webhooks a request reaches, as upstream's generic webhook matcher decides:
//! never for the admission configuration objects themselves; rules (operations, groups,
//! versions, resources with subresources and wildcards, scope) against the request's
//! resource or, with matchPolicy Equivalent, against another version of the same
//! stored resource; then namespaceSelector and objectSelector.

use std::sync::Arc;

use serde_json::{Map, Value};

use krate_api::admission::{Attributes, Operation};
use krate_api::registry::Scope;
use krate_api::resource::ResourceInfo;
use krate_api::validation::label_selector_is_empty;
use krate_api::{ApiError, ApiResult, Registry};

use super::config::{GROUP, Hook, Rule};

/// Upstream's IsExemptAdmissionConfigurationResource: webhooks never see these, so a
/// broken webhook cannot lock out its own repair.
pub fn is_exempt(r: &ResourceInfo) -> bool {
    r.group == GROUP
        && matches!(
            r.plural.as_str(),
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

pub fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn any_or(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// Upstream's rules.Matcher for one rule.
pub fn rule_matches(rule: &Rule, attrs: &Attributes<'_>, r: &ResourceInfo) -> bool {
    let namespaced_request = attrs.namespace.is_some_and(|n| !n.is_empty());
    let scope = match rule.scope.as_str() {
        "Cluster" => !namespaced_request,
        "Namespaced" => namespaced_request,
        _ => true,
    };
    let sub = attrs.subresource.unwrap_or("");
    let resource = rule.resources.iter().any(|rs| {
        let (res, rsub) = rs.split_once('/').unwrap_or((rs.as_str(), ""));
        (res == "*" || res == r.plural) && (rsub == "*" || rsub == sub)
    });
    scope
        && any_or(&rule.operations, operation_name(attrs.operation))
        && any_or(&rule.groups, &r.group)
        && any_or(&rule.versions, &r.version)
        && resource
}

/// The resource (in the version the webhook is to see) a webhook is called for, if any:
/// the request's own, or an equivalent version of it (same storage) when the webhook's
/// matchPolicy is Equivalent.
pub fn matching_resource(hook: &Hook, attrs: &Attributes<'_>, registry: &Registry) -> Option<Arc<ResourceInfo>> {
    let r = attrs.resource;
    let rules = |res: &ResourceInfo| hook.rules.iter().any(|rule| rule_matches(rule, attrs, res));
    if rules(r) {
        return registry.table.lookup(&r.group, &r.version, &r.plural).or_else(|| Some(Arc::new(r.clone())));
    }
    if !hook.equivalent_match {
        return None;
    }
    let sub = attrs.subresource;
    registry
        .table
        .all()
        .into_iter()
        .filter(|o| o.key_prefix == r.key_prefix && (o.group != r.group || o.version != r.version))
        .filter(|o| sub.is_none_or(|s| o.subresource(s).is_some()))
        .find(|o| rules(o))
}

fn labels(obj: Option<&Value>) -> Option<&Map<String, Value>> {
    obj.and_then(|o| o.pointer("/metadata/labels")).and_then(Value::as_object)
}

/// Upstream's MatchObjectSelector: the new or the old object's labels match.
pub fn object_selector_matches(hook: &Hook, obj: Option<&Value>, old: Option<&Value>) -> bool {
    let sel = &hook.object_selector;
    if label_selector_is_empty(sel) {
        return true;
    }
    let selector = krate_api::selector::LabelSelector::from_json(sel);
    [obj, old].into_iter().flatten().any(|o| selector.matches(labels(Some(o))))
}

/// Upstream's MatchNamespaceSelector: cluster-scoped requests (other than namespaces)
/// always match; a Namespace is judged by its own labels; other objects by their
/// namespace's.
pub async fn namespace_selector_matches(
    hook: &Hook,
    attrs: &Attributes<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
    registry: &Registry,
) -> ApiResult<bool> {
    let sel = &hook.namespace_selector;
    let is_namespace = attrs.resource.group.is_empty() && attrs.resource.plural == "namespaces";
    let ns = attrs.namespace.filter(|n| !n.is_empty());
    if (ns.is_none() && !is_namespace) || label_selector_is_empty(sel) {
        return Ok(true);
    }
    let selector = krate_api::selector::LabelSelector::from_json(sel);
    if is_namespace {
        return Ok(selector.matches(labels(obj.or(old))));
    }
    let namespaces =
        registry.table.lookup("", "v1", "namespaces").ok_or_else(|| ApiError::internal("namespaces are not served"))?;
    let namespace = registry
        .get_cached_or_live(&Scope { resource: namespaces, namespace: None }, ns.unwrap_or_default())
        .await
        .map_err(|e| ApiError::internal(e.message))?;
    Ok(selector.matches(labels(Some(&namespace))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use krate_api::user::UserInfo;

    fn rule(resources: &[&str], scope: &str) -> Rule {
        Rule {
            operations: vec!["CREATE".into()],
            groups: vec!["".into()],
            versions: vec!["*".into()],
            resources: resources.iter().map(|s| s.to_string()).collect(),
            scope: scope.into(),
        }
    }

    fn pods() -> ResourceInfo {
        let table = krate_api::resource::ResourceTable::builtin();
        (*table.lookup("", "v1", "pods").unwrap()).clone()
    }

    fn attrs<'a>(r: &'a ResourceInfo, sub: Option<&'a str>, ns: Option<&'a str>, user: &'a UserInfo) -> Attributes<'a> {
        Attributes {
            operation: Operation::Create,
            resource: r,
            subresource: sub,
            namespace: ns,
            name: "p",
            user,
            dry_run: false,
            warnings: None,
            audit_annotations: None,
        }
    }

    #[test]
    fn resources_and_subresources_match_as_upstream() {
        let (r, u) = (pods(), UserInfo::default());
        let plain = attrs(&r, None, Some("ns"), &u);
        let status = attrs(&r, Some("status"), Some("ns"), &u);
        assert!(rule_matches(&rule(&["*"], "*"), &plain, &r));
        assert!(!rule_matches(&rule(&["*"], "*"), &status, &r));
        assert!(rule_matches(&rule(&["*/*"], "*"), &status, &r));
        assert!(rule_matches(&rule(&["pods/*"], "*"), &status, &r));
        assert!(rule_matches(&rule(&["*/status"], "*"), &status, &r));
        assert!(!rule_matches(&rule(&["pods/log"], "*"), &status, &r));
        assert!(!rule_matches(&rule(&["pods"], "Cluster"), &plain, &r));
        assert!(rule_matches(&rule(&["pods"], "Namespaced"), &plain, &r));
        let mut other_op = rule(&["pods"], "*");
        other_op.operations = vec!["UPDATE".into()];
        assert!(!rule_matches(&other_op, &plain, &r));
    }

    #[test]
    fn configuration_objects_are_exempt() {
        let table = krate_api::resource::ResourceTable::builtin();
        assert!(is_exempt(&table.lookup(GROUP, "v1", "validatingwebhookconfigurations").unwrap()));
        assert!(!is_exempt(&pods()));
    }
}
