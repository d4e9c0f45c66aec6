//! Dynamic admission webhooks (upstream's MutatingAdmissionWebhook and
//! ValidatingAdmissionWebhook): the configurations (`config`), which webhooks a request
//! reaches (`matching`), the AdmissionReview exchanged (`review`), the HTTPS call
//! (`client`, `resolve`), and the two plugins (`mutating`, `validating`) built on the
//! shared `Dispatcher` here.

pub mod client;
pub mod conditions;
pub mod config;
pub mod matching;
pub mod mutating;
pub mod resolve;
pub mod review;
pub mod validating;

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tracing::Instrument;

use krate_api::admission::Attributes;
use krate_api::error::{Cause, Details};
use krate_api::resource::ResourceInfo;
use krate_api::{ApiError, ApiResult, Registry, conversion, object};

use crate::metrics;
use client::Caller;
use config::{Hook, Source};

pub use mutating::MutatingAdmissionWebhook;
pub use validating::ValidatingAdmissionWebhook;

/// One webhook a request reaches, with the resource version it sees.
pub struct Invocation {
    pub hook: Arc<Hook>,
    /// The webhook's position among all webhooks of its kind (audit annotation keys).
    pub index: usize,
    pub resource: Arc<ResourceInfo>,
}

impl Invocation {
    /// Whether the webhook sees another version than the request's (matchPolicy Equivalent).
    fn converts(&self, attrs: &Attributes<'_>) -> bool {
        self.resource.group != attrs.resource.group || self.resource.version != attrs.resource.version
    }
}

/// Why a webhook gave no answer to act on.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// It could not be called or answered badly: its failurePolicy decides.
    #[error("failed calling webhook \"{webhook}\": {reason}")]
    Calling { webhook: String, reason: String },
    /// It refused (or cannot take a dry run): the request fails with this.
    #[error("{}", .0.message)]
    Rejected(ApiError),
}

/// The variables matchConditions see.
fn condition_variables(attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> krate_cel::Activation {
    let name = if attrs.name.is_empty() { obj.map(object::name).unwrap_or_default() } else { attrs.name };
    let mut act = krate_cel::Activation::new();
    act.insert("object", obj.unwrap_or(&Value::Null));
    act.insert("oldObject", old.unwrap_or(&Value::Null));
    act.insert(
        "request",
        &crate::validating_policy::evaluate::request_value(attrs, matching::operation_name(attrs.operation), name),
    );
    act
}

/// What both plugins share: the configurations and the HTTPS caller.
pub struct Dispatcher {
    source: Source,
    caller: Caller,
    mutating: bool,
}

impl Dispatcher {
    pub fn new(registry: &Arc<Registry>, mutating: bool) -> Self {
        Dispatcher { source: Source::new(registry, mutating), caller: Caller::default(), mutating }
    }

    fn kind_label(&self) -> &'static str {
        if self.mutating { "admit" } else { "validating" }
    }

    /// The webhooks this request reaches, in order.
    pub async fn relevant(
        &self,
        attrs: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<Vec<Invocation>> {
        if matching::is_exempt(attrs.resource) {
            return Ok(Vec::new());
        }
        let hooks = self.source.hooks().await?;
        if hooks.is_empty() {
            return Ok(Vec::new());
        }
        let Some(registry) = self.source.registry() else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut activation = None;
        for (index, hook) in hooks.iter().enumerate() {
            let Some(resource) = matching::matching_resource(hook, attrs, &registry) else { continue };
            if !matching::object_selector_matches(hook, obj, old) {
                continue;
            }
            if !matching::namespace_selector_matches(hook, attrs, obj, old, &registry).await? {
                continue;
            }
            if !hook.match_conditions.is_empty() {
                let act = activation.get_or_insert_with(|| condition_variables(attrs, obj, old));
                match hook.match_conditions.evaluate(act) {
                    conditions::Verdict::Call => {}
                    conditions::Verdict::Skip => continue,
                    conditions::Verdict::Error(_) if hook.ignore_failures => continue,
                    conditions::Verdict::Error(e) => {
                        return Err(ApiError::internal(format!(
                            "failed calling webhook \"{}\": failed to evaluate match conditions: {e}",
                            hook.name
                        )));
                    }
                }
            }
            out.push(Invocation { hook: hook.clone(), index, resource });
        }
        Ok(out)
    }

    /// Calls one webhook with the request's objects (in the webhook's version) and
    /// passes its warnings and audit annotations on.
    pub async fn call(
        &self,
        inv: &Invocation,
        attrs: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<review::Response, Failure> {
        let hook = &inv.hook;
        let start = Instant::now();
        let result = self.exchange(inv, attrs, obj, old).await;
        let operation = matching::operation_name(attrs.operation);
        let (code, rejected, error_type) = match &result {
            Ok(r) if r.allowed => (200, false, None),
            Ok(_) => (0, true, Some("no_error")),
            Err(Failure::Rejected(e)) => (e.code, true, Some("no_error")),
            Err(Failure::Calling { .. }) => (0, !hook.ignore_failures, Some("calling_webhook_error")),
        };
        let code = match &result {
            Ok(r) if !r.allowed => denial_code(r.result.as_ref()),
            _ => code,
        };
        let kind = self.kind_label();
        let (name, code) = (hook.name.as_str(), code.to_string());
        let rejected_label = if rejected { "true" } else { "false" };
        metrics::WEBHOOK_DURATION
            .with_label_values(&[name, operation, rejected_label, kind])
            .observe(start.elapsed().as_secs_f64());
        metrics::WEBHOOK_REQUESTS.with_label_values(&[name, kind, operation, &code, rejected_label]).inc();
        if let (true, Some(error_type)) = (rejected, error_type) {
            metrics::WEBHOOK_REJECTIONS.with_label_values(&[name, kind, operation, error_type, &code]).inc();
        }
        let response = result?;
        for (k, v) in &response.audit_annotations {
            attrs.annotate(&format!("{}/{k}", hook.name), v.clone());
        }
        for w in &response.warnings {
            attrs.warn(w.clone());
        }
        if !response.allowed {
            return Err(Failure::Rejected(denial(&hook.name, response.result.as_ref())));
        }
        Ok(response)
    }

    async fn exchange(
        &self,
        inv: &Invocation,
        attrs: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<review::Response, Failure> {
        let hook = &inv.hook;
        let calling = |reason: String| Failure::Calling { webhook: hook.name.clone(), reason };
        if attrs.dry_run && !hook.dry_run_safe() {
            if hook.side_effects.is_empty() {
                return Err(calling("Webhook SideEffects is nil".into()));
            }
            return Err(Failure::Rejected(ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            ))));
        }
        let version = hook
            .review_version()
            .ok_or_else(|| calling("webhook does not accept known AdmissionReview versions".into()))?;
        let (obj, old) = if inv.converts(attrs) {
            let to = inv.resource.api_version();
            (obj.map(|o| conversion::convert(o.clone(), &to)), old.map(|o| conversion::convert(o.clone(), &to)))
        } else {
            (obj.cloned(), old.cloned())
        };
        let registry = self.source.registry().ok_or_else(|| calling("the registry is gone".into()))?;
        let dest = resolve::destination(&hook.endpoint, &registry)
            .await
            .map_err(|e| calling(format!("failed to call webhook: {e}")))?;
        let uid = object::new_uid();
        let request = review::Request {
            uid: &uid,
            version,
            attrs,
            resource: &inv.resource,
            object: obj.as_ref(),
            old_object: old.as_ref(),
        };
        let body = serde_json::to_vec(&request.to_json()).map_err(|e| calling(e.to_string()))?;
        let span = tracing::info_span!(
            "Call webhook",
            configuration = %hook.configuration,
            webhook = %hook.name,
            resource = %format!("{}/{}, Resource={}", inv.resource.group, inv.resource.version, inv.resource.plural),
            subresource = attrs.subresource.unwrap_or(""),
            operation = matching::operation_name(attrs.operation),
            uid = %uid,
        );
        let answer = self
            .caller
            .post(&dest, &hook.ca_bundle, body, hook.timeout)
            .instrument(span)
            .await
            .map_err(|e| calling(format!("failed to call webhook: {e}")))?;
        review::verify(&uid, version, self.mutating, &answer)
            .map_err(|e| calling(format!("received invalid webhook response: {e}")))
    }
}

/// The code a refusal carries (at least 400, as upstream's ToStatusErr makes it).
fn denial_code(result: Option<&Value>) -> u16 {
    let code = result.and_then(|r| r.get("code")).and_then(Value::as_u64).unwrap_or(0);
    if code < 400 { 400 } else { u16::try_from(code).unwrap_or(400) }
}

/// Upstream's metav1 StatusReasons, so a webhook's reason can travel in an ApiError.
fn known_reason(reason: &str) -> &'static str {
    const REASONS: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    REASONS.iter().find(|r| **r == reason).copied().unwrap_or("")
}

/// Upstream's ToStatusErr: a webhook's refusal as the client sees it, its code (at least
/// 400), reason and details kept, the message prefixed with the webhook's name. A reason
/// outside upstream's list is dropped (krate's errors carry only known reasons).
pub fn denial(webhook: &str, result: Option<&Value>) -> ApiError {
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let s = |k: &str| result.and_then(|r| r.get(k)).and_then(Value::as_str).unwrap_or("");
    let message = if !s("message").is_empty() {
        format!("{denied_by}: {}", s("message"))
    } else if !s("reason").is_empty() {
        format!("{denied_by}: {}", s("reason"))
    } else {
        format!("{denied_by} without explanation")
    };
    let details = result.and_then(|r| r.get("details")).filter(|d| d.is_object()).map(|d| {
        let ds = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Box::new(Details {
            name: ds("name"),
            group: ds("group"),
            kind: ds("kind"),
            uid: ds("uid"),
            causes: d
                .get("causes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    let cs = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    Cause::new(cs("reason"), cs("message"), cs("field"))
                })
                .collect(),
            retry_after_seconds: d.get("retryAfterSeconds").and_then(Value::as_u64),
        })
    });
    ApiError {
        code: denial_code(result),
        reason: known_reason(s("reason")),
        message,
        details,
        retry_after: None,
        list_continue: None,
    }
}

/// A webhook failure the failurePolicy lets through: logged, counted and recorded in
/// the audit event under `key`.
fn fail_open(kind: &'static str, hook: &Hook, reason: &Failure, attrs: &Attributes<'_>, key: String) {
    tracing::warn!(webhook = %hook.name, error = %reason, "Failed calling webhook, failing open");
    metrics::WEBHOOK_FAIL_OPEN.with_label_values(&[hook.name.as_str(), kind]).inc();
    attrs.annotate(&key, hook.name.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_read_as_upstream_formats_them() {
        let e =
            denial("deny.example.com", Some(&json!({"message": "no pods today", "code": 403, "reason": "Forbidden"})));
        assert_eq!(e.message, "admission webhook \"deny.example.com\" denied the request: no pods today");
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        let e = denial("d.example.com", None);
        assert_eq!(e.message, "admission webhook \"d.example.com\" denied the request without explanation");
        assert_eq!(e.code, 400);
        let e = denial("d.example.com", Some(&json!({"reason": "Custom", "code": 200})));
        assert_eq!(e.message, "admission webhook \"d.example.com\" denied the request: Custom");
        assert_eq!((e.code, e.reason), (400, ""));
    }
}
