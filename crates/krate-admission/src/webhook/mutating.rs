//! MutatingAdmissionWebhook: matching webhooks are called one after another, each seeing
//! the object as the previous ones left it; a JSONPatch answer is applied (the registry
//! validates the result afterwards). Webhooks with reinvocationPolicy IfNeeded that ran
//! before a later webhook changed the object are called once more, as upstream's
//! reinvocation does. Deletes reach mutating webhooks too (with no object to patch).

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::{ApiError, ApiResult, Registry, conversion};

use super::{Dispatcher, Failure, Invocation, fail_open};

pub struct MutatingAdmissionWebhook {
    dispatcher: Dispatcher,
}

impl MutatingAdmissionWebhook {
    pub fn new(registry: &Arc<Registry>) -> Self {
        MutatingAdmissionWebhook { dispatcher: Dispatcher::new(registry, true) }
    }

    /// Calls one webhook and applies its patch; whether the object changed.
    async fn invoke(
        &self,
        inv: &Invocation,
        round: usize,
        attrs: &Attributes<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<bool> {
        let hook = &inv.hook;
        let key = format!("round_{round}_index_{}", inv.index);
        let response = match self.dispatcher.call(inv, attrs, obj.as_deref(), old).await {
            Ok(r) => r,
            Err(failure @ Failure::Calling { .. }) if hook.ignore_failures => {
                fail_open(
                    "admit",
                    hook,
                    &failure,
                    attrs,
                    format!("failed-open.mutation.webhook.admission.k8s.io/{key}"),
                );
                self.annotate_mutation(attrs, inv, &key, false);
                return Ok(false);
            }
            Err(failure @ Failure::Calling { .. }) => {
                tracing::warn!(webhook = %hook.name, error = %failure, "Failed calling webhook, failing closed");
                self.annotate_mutation(attrs, inv, &key, false);
                return Err(ApiError::internal(failure.to_string()));
            }
            Err(Failure::Rejected(e)) => {
                self.annotate_mutation(attrs, inv, &key, false);
                return Err(e);
            }
        };
        let Some(patch_bytes) = response.patch else {
            self.annotate_mutation(attrs, inv, &key, false);
            return Ok(false);
        };
        let patch: json_patch::Patch = serde_json::from_slice(&patch_bytes).map_err(|e| {
            ApiError::internal(
                Failure::Calling {
                    webhook: hook.name.clone(),
                    reason: format!("received undecodable patch in webhook response: {e}"),
                }
                .to_string(),
            )
        })?;
        if patch.0.is_empty() {
            self.annotate_mutation(attrs, inv, &key, false);
            return Ok(false);
        }
        let Some(obj) = obj else {
            return Err(ApiError::internal(format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            )));
        };
        // The patch applies to the object in the version the webhook saw.
        let request_version = attrs.resource.api_version();
        let mut versioned = if inv.converts(attrs) {
            conversion::convert(obj.clone(), &inv.resource.api_version())
        } else {
            obj.clone()
        };
        json_patch::patch(&mut versioned, &patch).map_err(|e| ApiError::internal(e.to_string()))?;
        let patched = if inv.converts(attrs) { conversion::convert(versioned, &request_version) } else { versioned };
        let changed = patched != *obj;
        *obj = patched;
        attrs.annotate(
            &format!("patch.webhook.admission.k8s.io/{key}"),
            json!({"configuration": hook.configuration, "webhook": hook.name,
                   "patch": serde_json::to_value(&patch).unwrap_or(Value::Null), "patchType": "JSONPatch"})
            .to_string(),
        );
        self.annotate_mutation(attrs, inv, &key, changed);
        Ok(changed)
    }

    fn annotate_mutation(&self, attrs: &Attributes<'_>, inv: &Invocation, key: &str, mutated: bool) {
        attrs.annotate(
            &format!("mutation.webhook.admission.k8s.io/{key}"),
            json!({"configuration": inv.hook.configuration, "webhook": inv.hook.name, "mutated": mutated}).to_string(),
        );
    }

    async fn run(&self, attrs: &Attributes<'_>, mut obj: Option<&mut Value>, old: Option<&Value>) -> ApiResult<()> {
        let invocations = self.dispatcher.relevant(attrs, obj.as_deref(), old).await?;
        if invocations.is_empty() {
            return Ok(());
        }
        // Reinvocable webhooks already called, and those a later change owes a second call.
        let mut invoked = Vec::new();
        let mut reinvoke = HashSet::new();
        for inv in &invocations {
            if self.invoke(inv, 0, attrs, obj.as_deref_mut(), old).await? {
                reinvoke.extend(invoked.drain(..));
            }
            if inv.hook.reinvoke_if_needed {
                invoked.push(inv.hook.id.clone());
            }
        }
        if reinvoke.is_empty() {
            return Ok(());
        }
        // A webhook is never called for the first time on reinvocation, and must still match.
        for inv in self.dispatcher.relevant(attrs, obj.as_deref(), old).await? {
            if reinvoke.contains(&inv.hook.id) {
                tracing::debug!(webhook = %inv.hook.name, "reinvoking webhook");
                self.invoke(&inv, 1, attrs, obj.as_deref_mut(), old).await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Admission for MutatingAdmissionWebhook {
    async fn mutate(&self, attrs: &Attributes<'_>, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        self.run(attrs, Some(obj), old).await
    }

    /// The registry has no mutating phase for deletes; upstream still calls mutating
    /// webhooks for them (they may refuse, not patch), so they are called here.
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        if attrs.operation != Operation::Delete || obj.is_some() {
            return Ok(());
        }
        self.run(attrs, None, old).await
    }
}
