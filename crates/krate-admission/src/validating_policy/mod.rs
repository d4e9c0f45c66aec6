//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1), upstream's admission
//! plugin of that name: policies bound by ValidatingAdmissionPolicyBindings validate
//! requests with CEL (krate-cel) in the validating phase.
//!
//! Policies and bindings are read from the watch cache on each request; their
//! expressions are compiled once per resourceVersion. For each policy whose
//! matchConstraints match, each binding naming it whose matchResources match is
//! evaluated once per param (paramRef by name or selector, parameterNotFoundAction),
//! and each failed validation is acted on by the binding's validationActions: Deny
//! refuses the request with upstream's message, reason and code, Warn adds a Warning
//! header, Audit an audit annotation. Errors follow the policy's failurePolicy.
//! The `authorizer` variable is not provided (expressions using it fail at runtime).

mod compiled;
pub(crate) mod evaluate;
pub mod matching;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes};
use krate_api::error::Cause;
use krate_api::registry::{ListOptions, Scope};
use krate_api::selector::LabelSelector;
use krate_api::{ApiError, ApiResult, Registry, ResourceInfo, Target};
use krate_cel::{Activation, CostBudget};

use compiled::Policy;
use evaluate::Decision;
use matching::{Labels, Request};

const GROUP: &str = "admissionregistration.k8s.io";
const FAILURE_ANNOTATION: &str = "validation.policy.admission.k8s.io/validation_failure";
const MAX_ANNOTATION_VALUE: usize = 10 * 1024;

pub struct ValidatingAdmissionPolicy {
    registry: Weak<Registry>,
    loaded: Mutex<Loaded>,
}

#[derive(Default, Clone)]
struct Loaded {
    fingerprint: u64,
    policies: Vec<Arc<Policy>>,
    bindings: Arc<Vec<Value>>,
}

impl ValidatingAdmissionPolicy {
    pub fn new(registry: &Arc<Registry>) -> Self {
        ValidatingAdmissionPolicy { registry: Arc::downgrade(registry), loaded: Mutex::new(Loaded::default()) }
    }

    /// The current policies (compiled) and bindings, recompiling only what changed.
    async fn load(&self, registry: &Registry) -> ApiResult<Loaded> {
        let list = |plural: &'static str| async move {
            let Some(resource) = registry.table.lookup(GROUP, "v1", plural) else {
                return Ok(Vec::new());
            };
            registry.list(&Scope { resource, namespace: None }, &ListOptions::default()).await.map(|l| l.items)
        };
        let bindings = list("validatingadmissionpolicybindings").await?;
        if bindings.is_empty() {
            return Ok(Loaded::default());
        }
        let policies = list("validatingadmissionpolicies").await?;
        let mut h = DefaultHasher::new();
        policies.hash(&mut h);
        bindings.hash(&mut h);
        let fingerprint = h.finish();
        let previous = self.loaded.lock().clone();
        if previous.fingerprint == fingerprint {
            return Ok(previous);
        }
        let mut compiled = Vec::new();
        for bytes in &policies {
            let Ok(obj) = serde_json::from_slice::<Value>(bytes) else { continue };
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
            match previous.policies.iter().find(|p| p.name == name && p.resource_version == rv) {
                Some(p) => compiled.push(p.clone()),
                None => compiled.push(Arc::new(Policy::compile(&obj))),
            }
        }
        compiled.sort_by(|a, b| a.name.cmp(&b.name));
        let mut bindings: Vec<Value> = bindings.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect();
        bindings.sort_by(|a, b| name_of(a).cmp(name_of(b)));
        let loaded = Loaded { fingerprint, policies: compiled, bindings: Arc::new(bindings) };
        *self.loaded.lock() = loaded.clone();
        Ok(loaded)
    }
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

fn labels_of(v: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
    v.and_then(|o| o.pointer("/metadata/labels")).and_then(Value::as_object)
}

/// A decision that denies, with the policy and binding it came from.
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: Option<String>,
}

/// upstream's reasonToCode.
fn reason_code(reason: &str) -> (u16, &'static str) {
    match reason {
        "Forbidden" => (403, "Forbidden"),
        "Unauthorized" => (401, "Unauthorized"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    }
}

fn deny_error(attrs: &Attributes<'_>, name: &str, d: &Denial) -> ApiError {
    let message = match &d.binding {
        Some(b) => format!("ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}", d.policy, d.message),
        None => format!("ValidatingAdmissionPolicy '{}' denied request: {}", d.policy, d.message),
    };
    let r = attrs.resource;
    let target = Target::new(&r.group, &r.plural, &r.kind, name);
    let mut e = ApiError::forbidden_on(&target, &message);
    if name.is_empty() {
        e.message = format!("{} is forbidden: {message}", target.qualified_resource());
    }
    let (code, reason) = reason_code(d.reason.as_deref().unwrap_or("Invalid"));
    e.code = code;
    e.reason = reason;
    if let Some(details) = e.details.as_mut() {
        details.causes.push(Cause::new("", message, ""));
    }
    e
}

/// Where a policy's params come from.
enum ParamSource {
    None,
    Resource(Arc<ResourceInfo>),
}

fn param_source(registry: &Registry, policy: &Policy) -> Result<ParamSource, String> {
    let Some((api_version, kind)) = &policy.param_kind else { return Ok(ParamSource::None) };
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    registry
        .table
        .resources(group, version)
        .and_then(|rs| rs.into_iter().find(|r| &r.kind == kind))
        .map(ParamSource::Resource)
        .ok_or_else(|| format!("failed to find resource referenced by paramKind: '{group}/{version}, Kind={kind}'"))
}

/// upstream's CollectParams: the params to evaluate a binding with (`[null]` when
/// the policy has no paramKind or the binding no paramRef).
async fn collect_params(
    registry: &Registry,
    source: &ParamSource,
    param_ref: Option<&Value>,
    namespace: Option<&str>,
) -> Result<Vec<Value>, String> {
    let (ParamSource::Resource(resource), Some(pr)) = (source, param_ref.filter(|p| !p.is_null())) else {
        return Ok(vec![Value::Null]);
    };
    let ref_ns = pr.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty());
    let scope_ns = if resource.namespaced {
        match ref_ns.or(namespace) {
            Some(ns) => Some(ns.to_string()),
            None => {
                return Err(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into()
                );
            }
        }
    } else {
        if ref_ns.is_some() {
            return Err("paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into());
        }
        None
    };
    let scope = Scope { resource: resource.clone(), namespace: scope_ns };
    let name = pr.get("name").and_then(Value::as_str).filter(|s| !s.is_empty());
    let selector = pr.get("selector").filter(|s| !s.is_null());
    let params = match (name, selector) {
        (Some(_), Some(_)) => return Err("paramRef.name and paramRef.selector are mutually exclusive".into()),
        (Some(name), None) => match registry.get_cached_or_live(&scope, name).await {
            Ok(p) => vec![p],
            Err(e) if e.code == 404 => vec![],
            Err(e) => return Err(e.message),
        },
        (None, Some(sel)) => {
            let selector = LabelSelector::from_json(sel);
            let listed = registry.list(&scope, &ListOptions::default()).await.map_err(|e| e.message)?;
            listed
                .items
                .iter()
                .filter_map(|b| serde_json::from_slice::<Value>(b).ok())
                .filter(|p| selector.matches(labels_of(Some(p))))
                .collect()
        }
        (None, None) => return Err("one of name or selector must be provided".into()),
    };
    if params.is_empty() && pr.get("parameterNotFoundAction").and_then(Value::as_str) == Some("Deny") {
        return Err("no params found for policy binding with `Deny` parameterNotFoundAction".into());
    }
    Ok(params)
}

fn observe(policy: &str, binding: &str, error_type: &str, action: &str) {
    crate::metrics::VALIDATING_POLICY_CHECKS.with_label_values(&[policy, binding, error_type, action]).inc();
}

#[async_trait]
impl Admission for ValidatingAdmissionPolicy {
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        let name = if attrs.name.is_empty() {
            obj.and_then(|o| o.pointer("/metadata/name")).and_then(Value::as_str).unwrap_or_default()
        } else {
            attrs.name
        };
        let is_namespace_kind = r.group.is_empty() && r.kind == "Namespace";
        let req = Request {
            operation: attrs.operation,
            group: &r.group,
            version: &r.version,
            resource: &r.plural,
            subresource: attrs.subresource,
            name,
            namespaced: r.namespaced && attrs.namespace.is_some(),
            is_namespace_kind,
        };
        if matching::exempt(&req) {
            return Ok(());
        }
        let Some(registry) = self.registry.upgrade() else { return Ok(()) };
        let loaded = self.load(&registry).await?;
        if loaded.bindings.is_empty() {
            return Ok(());
        }

        // The request's namespace, read once (cluster-scoped requests have none).
        let namespace = match attrs.namespace.filter(|_| !is_namespace_kind && req.namespaced) {
            Some(ns) => {
                let resource = registry.table.lookup("", "v1", "namespaces").expect("namespaces are built in");
                registry.get_cached_or_live(&Scope { resource, namespace: None }, ns).await.ok()
            }
            None => None,
        };
        let labels =
            Labels { object: labels_of(obj), old_object: labels_of(old), namespace: labels_of(namespace.as_ref()) };
        let operation = matching::operation_name(attrs.operation);

        let mut base = Activation::new();
        base.insert("object", obj.unwrap_or(&Value::Null));
        base.insert("oldObject", old.unwrap_or(&Value::Null));
        base.insert("request", &evaluate::request_value(attrs, operation, name));
        base.insert("namespaceObject", &namespace.as_ref().map(evaluate::namespace_value).unwrap_or(Value::Null));

        let mut denials: Vec<Denial> = Vec::new();
        for policy in &loaded.policies {
            let bindings: Vec<&Value> = loaded
                .bindings
                .iter()
                .filter(|b| b.pointer("/spec/policyName").and_then(Value::as_str) == Some(policy.name.as_str()))
                .collect();
            if bindings.is_empty() || policy.match_constraints.is_none() {
                continue;
            }
            if !matching::resources_match(policy.match_constraints.as_ref(), &req, &labels) {
                continue;
            }
            let config_error = |denials: &mut Vec<Denial>, binding: Option<&str>, e: String| {
                observe(&policy.name, binding.unwrap_or(""), "invalid_error", "deny");
                if policy.fail_closed {
                    let what = if binding.is_some() { "binding" } else { "policy" };
                    denials.push(Denial {
                        policy: policy.name.clone(),
                        binding: binding.map(str::to_string),
                        message: format!("failed to configure {what}: {e}"),
                        reason: None,
                    });
                }
            };
            let source = match param_source(&registry, policy) {
                Ok(s) => s,
                Err(e) => {
                    config_error(&mut denials, None, e);
                    continue;
                }
            };
            let mut annotations: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for binding in bindings {
                let binding_name = name_of(binding);
                if !matching::resources_match(binding.pointer("/spec/matchResources"), &req, &labels) {
                    continue;
                }
                let params = match collect_params(
                    &registry,
                    &source,
                    binding.pointer("/spec/paramRef"),
                    attrs.namespace,
                )
                .await
                {
                    Ok(p) => p,
                    Err(e) => {
                        config_error(&mut denials, Some(binding_name), e);
                        continue;
                    }
                };
                let actions: Vec<&str> = binding
                    .pointer("/spec/validationActions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                for param in &params {
                    let mut act = base.clone();
                    act.insert("params", param);
                    let mut budget = CostBudget::default();
                    let outcome = evaluate::validate(policy, &act, &mut budget);
                    for (index, decision) in outcome.decisions {
                        let Decision::Deny { message, reason, error } = decision else { continue };
                        let error_type = if error { "invalid_error" } else { "no_error" };
                        for action in &actions {
                            observe(&policy.name, binding_name, error_type, &action.to_lowercase());
                            match *action {
                                "Deny" => denials.push(Denial {
                                    policy: policy.name.clone(),
                                    binding: Some(binding_name.to_string()),
                                    message: message.clone(),
                                    reason: reason.clone(),
                                }),
                                "Warn" => attrs.warn(format!(
                                    "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{binding_name}': {message}",
                                    policy.name
                                )),
                                "Audit" => {
                                    let value = serde_json::json!([{
                                        "message": message,
                                        "policy": policy.name,
                                        "binding": binding_name,
                                        "expressionIndex": index,
                                        "validationActions": actions,
                                    }]);
                                    attrs.annotate(FAILURE_ANNOTATION, value.to_string());
                                }
                                _ => {}
                            }
                        }
                    }
                    for (key, mut value) in outcome.annotations {
                        if value.len() > MAX_ANNOTATION_VALUE {
                            let mut cut = MAX_ANNOTATION_VALUE;
                            while !value.is_char_boundary(cut) {
                                cut -= 1;
                            }
                            value.truncate(cut);
                        }
                        let values = annotations.entry(key).or_default();
                        if !values.contains(&value) {
                            values.push(value);
                        }
                    }
                    for e in outcome.annotation_errors {
                        observe(&policy.name, binding_name, "invalid_error", "deny");
                        denials.push(Denial {
                            policy: policy.name.clone(),
                            binding: Some(binding_name.to_string()),
                            message: e,
                            reason: None,
                        });
                    }
                }
            }
            for (key, values) in annotations {
                attrs.annotate(&format!("{}/{key}", policy.name), values.join(", "));
            }
        }
        match denials.first() {
            Some(d) => Err(deny_error(attrs, name, d)),
            None => Ok(()),
        }
    }
}
