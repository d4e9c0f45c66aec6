//! The authorization.k8s.io/v1 reviews, answered by asking the authorizers:
//! SubjectAccessReview (any user), LocalSubjectAccessReview (in one namespace),
//! SelfSubjectAccessReview (the requester; `kubectl auth can-i`) and
//! SelfSubjectRulesReview (what the requester may do in a namespace; `can-i --list`).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use krate_api::computed::{ComputedRequest, ComputedResource};
use krate_api::user::UserInfo;
use krate_api::{ApiError, ApiResult, Cause, Target};
use serde_json::{Value, json};

use super::rbac::rule::PolicyRule;
use super::{Attributes, Authorizer, Decision, RuleResolver};

pub const GROUP: &str = "authorization.k8s.io";

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SubjectAccessReview,
    LocalSubjectAccessReview,
    SelfSubjectAccessReview,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::SubjectAccessReview => "SubjectAccessReview",
            Kind::LocalSubjectAccessReview => "LocalSubjectAccessReview",
            Kind::SelfSubjectAccessReview => "SelfSubjectAccessReview",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            Kind::SubjectAccessReview => "subjectaccessreviews",
            Kind::LocalSubjectAccessReview => "localsubjectaccessreviews",
            Kind::SelfSubjectAccessReview => "selfsubjectaccessreviews",
        }
    }
}

pub struct AccessReview {
    kind: Kind,
    authorizer: Arc<dyn Authorizer>,
}

impl AccessReview {
    pub fn new(kind: Kind, authorizer: Arc<dyn Authorizer>) -> Self {
        AccessReview { kind, authorizer }
    }
}

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(String::from).collect()
}

fn invalid(kind: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&Target::new(GROUP, "", kind, ""), causes)
}

/// The review's subject as a user (spec.user, groups, uid, extra).
fn spec_user(spec: &Value) -> UserInfo {
    let extra: BTreeMap<String, Vec<String>> = spec
        .get("extra")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), string_list(Some(v))))
        .collect();
    UserInfo {
        name: s(spec, "user").to_string(),
        uid: s(spec, "uid").to_string(),
        groups: string_list(spec.get("groups")),
        extra,
    }
}

#[async_trait]
impl ComputedResource for AccessReview {
    async fn create(&self, req: &ComputedRequest<'_>, mut body: Value) -> ApiResult<Value> {
        let kind = self.kind.name();
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
        let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
        match (resource, non_resource) {
            (None, None) => {
                return Err(invalid(
                    kind,
                    vec![Cause::required(
                        "spec.resourceAttributes",
                        "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                    )],
                ));
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    kind,
                    vec![Cause::invalid(
                        "spec.nonResourceAttributes",
                        "{...}",
                        "cannot be specified in combination with resourceAttributes",
                    )],
                ));
            }
            _ => {}
        }
        let user = match self.kind {
            Kind::SelfSubjectAccessReview => req.user.clone(),
            _ => {
                let u = spec_user(&spec);
                if u.name.is_empty() && u.groups.is_empty() {
                    return Err(invalid(
                        kind,
                        vec![Cause::invalid("spec.user", "\"\"", "at least one of user or group must be specified")],
                    ));
                }
                u
            }
        };
        if self.kind == Kind::LocalSubjectAccessReview {
            let ns = req.namespace.unwrap_or("");
            if non_resource.is_some() {
                return Err(invalid(
                    kind,
                    vec![Cause::invalid("spec.nonResourceAttributes", "{...}", "disallowed on this kind of request")],
                ));
            }
            let asked = resource.map(|r| s(r, "namespace")).unwrap_or("");
            if asked != ns {
                return Err(invalid(
                    kind,
                    vec![Cause::invalid("spec.resourceAttributes.namespace", asked, "must match metadata.namespace")],
                ));
            }
        }
        let empty = json!({});
        let attrs_src = resource.or(non_resource).unwrap_or(&empty);
        let field_selector = resource.map(review_field_selector).unwrap_or_default();
        let attrs = Attributes {
            user: &user,
            verb: s(attrs_src, "verb"),
            resource_request: resource.is_some(),
            path: s(attrs_src, "path"),
            namespace: s(attrs_src, "namespace"),
            api_group: s(attrs_src, "group"),
            api_version: s(attrs_src, "version"),
            resource: s(attrs_src, "resource"),
            subresource: s(attrs_src, "subresource"),
            name: s(attrs_src, "name"),
            field_selector: &field_selector,
        };
        let (decision, reason) = self.authorizer.authorize_explained(&attrs).await;
        let mut status = json!({"allowed": decision == Decision::Allow});
        if matches!(decision, Decision::Deny(_)) {
            status["denied"] = json!(true);
        }
        if !reason.is_empty() {
            status["reason"] = json!(reason);
        }
        body["apiVersion"] = json!("authorization.k8s.io/v1");
        body["kind"] = json!(kind);
        if !body.get("metadata").is_some_and(Value::is_object) {
            body["metadata"] = json!({});
        }
        if let Some(ns) = req.namespace {
            body["metadata"]["namespace"] = json!(ns);
        }
        body["metadata"]["creationTimestamp"] = Value::Null;
        body["status"] = status;
        Ok(body)
    }
}

/// SelfSubjectRulesReview: the requester's rules in spec.namespace.
pub struct RulesReview {
    resolver: Arc<dyn RuleResolver>,
}

impl RulesReview {
    pub fn new(resolver: Arc<dyn RuleResolver>) -> Self {
        RulesReview { resolver }
    }
}

fn rule_json(r: &PolicyRule, non_resource: bool) -> Value {
    if non_resource {
        json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls})
    } else {
        let mut v = json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
        if !r.resource_names.is_empty() {
            v["resourceNames"] = json!(r.resource_names);
        }
        v
    }
}

#[async_trait]
impl ComputedResource for RulesReview {
    async fn create(&self, req: &ComputedRequest<'_>, mut body: Value) -> ApiResult<Value> {
        let namespace = body.pointer("/spec/namespace").and_then(Value::as_str).unwrap_or("").to_string();
        if namespace.is_empty() {
            return Err(ApiError::bad_request("no namespace on request"));
        }
        let rules = self.resolver.rules_for(req.user, &namespace);
        let mut status = json!({
            "resourceRules": rules.resource.iter().map(|r| rule_json(r, false)).collect::<Vec<_>>(),
            "nonResourceRules": rules.non_resource.iter().map(|r| rule_json(r, true)).collect::<Vec<_>>(),
            "incomplete": rules.incomplete,
        });
        if !rules.errors.is_empty() {
            status["evaluationError"] = json!(rules.errors.join(", "));
        }
        body["apiVersion"] = json!("authorization.k8s.io/v1");
        body["kind"] = json!("SelfSubjectRulesReview");
        if !body.get("metadata").is_some_and(Value::is_object) {
            body["metadata"] = json!({});
        }
        body["metadata"]["creationTimestamp"] = Value::Null;
        body["status"] = status;
        Ok(body)
    }
}

/// A review's resourceAttributes.fieldSelector as a raw selector: rawSelector, or the
/// requirements whose operator a field selector can express (In or NotIn with one value).
fn review_field_selector(resource: &Value) -> String {
    let Some(fs) = resource.get("fieldSelector") else { return String::new() };
    if let Some(raw) = fs.get("rawSelector").and_then(Value::as_str).filter(|r| !r.is_empty()) {
        return raw.to_string();
    }
    let requirements = fs.get("requirements").and_then(Value::as_array).into_iter().flatten();
    let terms: Vec<String> = requirements
        .filter_map(|r| {
            let key = r.get("key")?.as_str()?;
            let values = r.get("values")?.as_array()?;
            let [value] = values.as_slice() else { return None };
            let op = match r.get("operator")?.as_str()? {
                "In" => "=",
                "NotIn" => "!=",
                _ => return None,
            };
            Some(format!("{key}{op}{}", value.as_str()?))
        })
        .collect();
    terms.join(",")
}
