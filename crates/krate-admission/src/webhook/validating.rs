//! ValidatingAdmissionWebhook: every matching webhook is called at once (as upstream's
//! dispatcher does, in parallel); the first refusal in webhook order is the answer.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes};
use krate_api::{ApiError, ApiResult, Registry};

use super::{Dispatcher, Failure, fail_open};

pub struct ValidatingAdmissionWebhook {
    dispatcher: Dispatcher,
}

impl ValidatingAdmissionWebhook {
    pub fn new(registry: &Arc<Registry>) -> Self {
        ValidatingAdmissionWebhook { dispatcher: Dispatcher::new(registry, false) }
    }
}

#[async_trait]
impl Admission for ValidatingAdmissionWebhook {
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        let invocations = self.dispatcher.relevant(attrs, obj, old).await?;
        if invocations.is_empty() {
            return Ok(());
        }
        let results =
            futures::future::join_all(invocations.iter().map(|inv| self.dispatcher.call(inv, attrs, obj, old))).await;
        let mut first = None;
        for (inv, result) in invocations.iter().zip(results) {
            let err = match result {
                Ok(_) => continue,
                Err(failure @ Failure::Calling { .. }) if inv.hook.ignore_failures => {
                    let key = format!("failed-open.validating.webhook.admission.k8s.io/round_0_index_{}", inv.index);
                    fail_open("validating", &inv.hook, &failure, attrs, key);
                    continue;
                }
                Err(failure @ Failure::Calling { .. }) => {
                    tracing::warn!(webhook = %inv.hook.name, error = %failure, "Failed calling webhook, failing closed");
                    ApiError::internal(failure.to_string())
                }
                Err(Failure::Rejected(e)) => {
                    tracing::info!(webhook = %inv.hook.name, message = %e.message, "rejected by webhook");
                    e
                }
            };
            first.get_or_insert(err);
        }
        first.map_or(Ok(()), Err)
    }
}
