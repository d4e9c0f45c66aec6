//! A Deployment's status and conditions (upstream's progress.go and sync.go status
//! parts): replica counts from its ReplicaSets, Available, Progressing with its
//! deadline, ReplicaFailure carried over from the ReplicaSets, pause and resume.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;

use super::rollout::{Sync, available};
use super::util::*;
use crate::Error;

/// Statuses compared with unset counts as zero, as upstream's int32 fields are.
fn normalized(s: &DeploymentStatus) -> DeploymentStatus {
    let z = |v: Option<i32>| Some(v.unwrap_or(0));
    DeploymentStatus {
        replicas: z(s.replicas),
        updated_replicas: z(s.updated_replicas),
        ready_replicas: z(s.ready_replicas),
        available_replicas: z(s.available_replicas),
        unavailable_replicas: z(s.unavailable_replicas),
        observed_generation: Some(s.observed_generation.unwrap_or(0)),
        conditions: Some(s.conditions.clone().unwrap_or_default()),
        ..s.clone()
    }
}

impl Sync<'_> {
    pub(super) async fn write_status(&mut self, status: DeploymentStatus) -> Result<(), Error> {
        let mut d = self.d.clone();
        tracing::debug!(deployment = %d.name_any(), old = ?d.status, new = ?status, "writing status");
        d.status = Some(status);
        let api: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.ctx.clients.write.clone(), &self.ns);
        match api.replace_status(&d.name_any(), &PostParams::default(), &d).await {
            Ok(updated) => {
                self.d = updated;
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn calculate_status(&self, old: &[ReplicaSet], new: Option<&ReplicaSet>) -> DeploymentStatus {
        let all: Vec<&ReplicaSet> = old.iter().chain(new).collect();
        let sum = |f: &dyn Fn(&ReplicaSet) -> i32| all.iter().map(|rs| f(rs)).sum::<i32>();
        let available_replicas = sum(&available);
        let total = sum(&rs_replicas);
        let current = self.d.status.clone().unwrap_or_default();
        let terminating: Vec<i32> =
            all.iter().filter_map(|rs| rs.status.as_ref().and_then(|s| s.terminating_replicas)).collect();
        let mut status = DeploymentStatus {
            observed_generation: self.d.metadata.generation,
            replicas: Some(sum(&|rs| rs.status.as_ref().map(|s| s.replicas).unwrap_or(0))),
            updated_replicas: Some(new.and_then(|rs| rs.status.as_ref()).map(|s| s.replicas).unwrap_or(0)),
            ready_replicas: Some(sum(&|rs| rs.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0))),
            available_replicas: Some(available_replicas),
            unavailable_replicas: Some((total - available_replicas).max(0)),
            terminating_replicas: (!terminating.is_empty()).then(|| terminating.iter().sum()),
            collision_count: current.collision_count,
            conditions: current.conditions.clone(),
        };
        if available_replicas >= replicas(&self.d) - max_unavailable(&self.d) {
            let c = new_condition("Available", "True", MIN_AVAILABLE, "Deployment has minimum availability.".into());
            set_condition(&mut status, c);
        } else {
            let c = new_condition(
                "Available",
                "False",
                MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
            );
            set_condition(&mut status, c);
        }
        status
    }

    /// Status without progress reporting (upstream's syncDeploymentStatus).
    pub(super) async fn sync_deployment_status(
        &mut self,
        old: &[ReplicaSet],
        new: Option<&ReplicaSet>,
    ) -> Result<(), Error> {
        let status = self.calculate_status(old, new);
        if normalized(&status) == normalized(&self.d.status.clone().unwrap_or_default()) {
            return Ok(());
        }
        self.write_status(status).await
    }

    /// The status of a Deployment being deleted (upstream's syncStatusOnly).
    pub async fn status_only(&mut self, rss: Vec<ReplicaSet>) -> Result<(), Error> {
        let (new, old) = self.all(rss, false).await?;
        self.sync_deployment_status(&old, new.as_ref()).await
    }

    /// Status with the Progressing condition (upstream's syncRolloutStatus).
    pub(super) async fn sync_rollout_status(
        &mut self,
        old: &[ReplicaSet],
        new: Option<&ReplicaSet>,
    ) -> Result<(), Error> {
        let mut status = self.calculate_status(old, new);
        let deadline = has_progress_deadline(&self.d);
        if !deadline {
            remove_condition(&mut status, "Progressing");
        }
        let current_status = self.d.status.clone().unwrap_or_default();
        let current = condition(&current_status, "Progressing").cloned();
        let is_complete = status.replicas == status.updated_replicas
            && current.as_ref().is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE));
        let name = |rs: Option<&ReplicaSet>, what: &str| match rs {
            Some(rs) => format!("ReplicaSet {:?} {what}", rs.name_any()),
            None => format!("Deployment {:?} {what}", self.d.name_any()),
        };
        if deadline && !is_complete {
            if complete(&self.d, &status) {
                let c =
                    new_condition("Progressing", "True", NEW_RS_AVAILABLE, name(new, "has successfully progressed."));
                set_condition(&mut status, c);
            } else if progressing(&self.d, &status) {
                let mut c = new_condition("Progressing", "True", RS_UPDATED, name(new, "is progressing."));
                if let Some(cur) = &current {
                    if cur.status == "True" {
                        c.last_transition_time = cur.last_transition_time.clone();
                    }
                    remove_condition(&mut status, "Progressing");
                }
                set_condition(&mut status, c);
            } else if timed_out(&self.d, &status, Timestamp::now()) {
                let c = new_condition("Progressing", "False", TIMED_OUT, name(new, "has timed out progressing."));
                set_condition(&mut status, c);
            }
        }
        match replica_failure(old, new) {
            Some(c) => set_condition(&mut status, c),
            None => remove_condition(&mut status, "ReplicaFailure"),
        }
        if normalized(&status) == normalized(&current_status) {
            return Ok(());
        }
        self.write_status(status).await
    }

    /// Progressing Unknown while paused, and when resumed (upstream's checkPausedConditions).
    pub async fn check_paused_conditions(&mut self) -> Result<(), Error> {
        if !has_progress_deadline(&self.d) {
            return Ok(());
        }
        let mut status = self.d.status.clone().unwrap_or_default();
        let reason = condition(&status, "Progressing").and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(TIMED_OUT) {
            return Ok(());
        }
        let paused_shown = reason.as_deref() == Some(PAUSED);
        let paused = self.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        if paused && !paused_shown {
            set_condition(&mut status, new_condition("Progressing", "Unknown", PAUSED, "Deployment is paused".into()));
        } else if !paused && paused_shown {
            set_condition(
                &mut status,
                new_condition("Progressing", "Unknown", RESUMED, "Deployment is resumed".into()),
            );
        } else {
            return Ok(());
        }
        self.write_status(status).await
    }

    /// When to look again at a rollout that may pass its deadline (upstream's
    /// requeueStuckDeployment).
    pub fn requeue_stuck(&self) -> Action {
        let status = self.d.status.clone().unwrap_or_default();
        let Some(c) = condition(&status, "Progressing") else { return Action::await_change() };
        let settled = matches!(c.reason.as_deref(), Some(NEW_RS_AVAILABLE | TIMED_OUT | PAUSED));
        if !has_progress_deadline(&self.d) || settled || complete(&self.d, &status) {
            return Action::await_change();
        }
        let deadline = self.d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).unwrap_or(600).max(0) as u64;
        let Some(updated) = c.last_update_time.as_ref() else { return Action::await_change() };
        let due = updated.0 + Duration::from_secs(deadline);
        let after = Duration::from_nanos((due.as_nanosecond() - Timestamp::now().as_nanosecond()).max(0) as u64);
        Action::requeue(after.max(Duration::from_secs(1)))
    }
}

/// The first ReplicaFailure condition of the new, then the old ReplicaSets.
fn replica_failure(old: &[ReplicaSet], new: Option<&ReplicaSet>) -> Option<DeploymentCondition> {
    new.into_iter().chain(old).find_map(|rs| {
        let c = rs.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "ReplicaFailure")?;
        Some(DeploymentCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_update_time: c.last_transition_time.clone(),
            last_transition_time: c.last_transition_time.clone(),
        })
    })
}
