//! The TTL-after-finished controller (upstream's ttlafterfinished): a finished Job with
//! spec.ttlSecondsAfterFinished is deleted (Foreground, so its pods go first, and with a
//! uid precondition) that many seconds after its Complete or Failed condition was set.
//! The TTL is read again from a fresh copy before deleting, as it may have changed.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};

use crate::{Context, Error};

const CONTROLLER: &str = "ttl-after-finished";

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("ttl-after-finished-controller");
    let jobs = ctx.informers.get::<Job>();
    Controller::for_shared_stream(jobs.subscribe(), jobs.store())
        .run(
            |job, client: Arc<kube::Client>| async move {
                let result = process(&job, &client).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |job, error: &Error, _| {
                tracing::warn!(controller = CONTROLLER, job = %job.name_any(), %error, "cleanup failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            Arc::new(clients.write),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// When the Job finished, if it is finished and has a TTL.
fn finished_at(job: &Job) -> Option<Timestamp> {
    job.spec.as_ref()?.ttl_seconds_after_finished?;
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let done = conditions.iter().find(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True")?;
    done.last_transition_time.as_ref().map(|t| t.0)
}

/// How long until the Job expires (zero if it has), if it is to be cleaned up at all.
pub fn time_left(job: &Job, now: Timestamp) -> Option<Duration> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let finished = finished_at(job)?;
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?.max(0) as u64;
    let since = Duration::try_from(now.duration_since(finished)).unwrap_or_default();
    Some(Duration::from_secs(ttl).saturating_sub(since))
}

async fn process(job: &Job, client: &kube::Client) -> Result<Action, Error> {
    match time_left(job, Timestamp::now()) {
        None => return Ok(Action::await_change()),
        Some(left) if !left.is_zero() => return Ok(Action::requeue(left)),
        Some(_) => {}
    }
    let api: Api<Job> = Api::namespaced(client.clone(), &job.namespace().unwrap_or_default());
    let Some(fresh) = api.get_opt(&job.name_any()).await? else { return Ok(Action::await_change()) };
    match time_left(&fresh, Timestamp::now()) {
        None => return Ok(Action::await_change()),
        Some(left) if !left.is_zero() => return Ok(Action::requeue(left)),
        Some(_) => {}
    }
    tracing::debug!(job = %fresh.name_any(), "cleaning up job");
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(Preconditions { uid: fresh.uid(), resource_version: None }),
        ..Default::default()
    };
    match api.delete(&fresh.name_any(), &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expiry_counts_from_the_finished_condition() {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "j"},
            "spec": {"ttlSecondsAfterFinished": 30, "template": {}},
            "status": {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(time_left(&job, at("2026-01-01T00:00:10Z")), Some(Duration::from_secs(20)));
        assert_eq!(time_left(&job, at("2026-01-01T00:01:00Z")), Some(Duration::ZERO));
        let mut running = job.clone();
        running.status = None;
        assert_eq!(time_left(&running, at("2026-01-01T00:01:00Z")), None);
    }
}
