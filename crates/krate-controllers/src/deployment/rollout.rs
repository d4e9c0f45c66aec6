//! One sync of one Deployment: finding (or making) the new ReplicaSet, and moving
//! replicas by the strategy (upstream's sync.go, rolling.go and recreate.go).

use std::cmp::Ordering;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::Ctx;
use super::util::*;
use crate::{Error, controller_ref};

pub(crate) struct Sync<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) d: Deployment,
    pub(super) ns: String,
}

fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let t = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
    t(a).cmp(&t(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

pub(super) fn available(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0)
}

fn actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}

impl<'a> Sync<'a> {
    pub fn new(ctx: &'a Ctx, d: Deployment) -> Sync<'a> {
        let ns = d.namespace().unwrap_or_default();
        Sync { ctx, d, ns }
    }

    fn rs_api(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.ctx.clients.write.clone(), &self.ns)
    }

    pub(super) async fn event(&self, type_: EventType, reason: &str, note: String) {
        self.ctx.events.publish(&self.d.object_ref(&()), type_, reason, note).await;
    }

    fn template(&self) -> k8s_openapi::api::core::v1::PodTemplateSpec {
        self.d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default()
    }

    /// The new ReplicaSet (the oldest whose template is the Deployment's) and the others.
    fn split(&self, mut rss: Vec<ReplicaSet>) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
        rss.sort_by(by_creation);
        let template = self.template();
        let at = rss.iter().position(|rs| {
            rs.spec.as_ref().and_then(|s| s.template.as_ref()).is_some_and(|t| equal_ignore_hash(t, &template))
        });
        let new = at.map(|i| rss.remove(i));
        (new, rss)
    }

    /// Upstream's getAllReplicaSetsAndSyncRevision.
    pub async fn all(
        &mut self,
        rss: Vec<ReplicaSet>,
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        let (existing, old) = self.split(rss);
        let new = self.new_replica_set(existing, &old, create).await?;
        Ok((new, old))
    }

    fn set_revision(&mut self, revision: &str) -> bool {
        let annotations = self.d.metadata.annotations.get_or_insert_default();
        if annotations.get(REVISION).map(String::as_str) == Some(revision) {
            return false;
        }
        annotations.insert(REVISION.into(), revision.into());
        true
    }

    async fn new_replica_set(
        &mut self,
        existing: Option<ReplicaSet>,
        old: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>, Error> {
        let new_revision = old.iter().map(|rs| revision(rs.metadata.annotations.as_ref())).max().unwrap_or(0) + 1;
        let spec = self.d.spec.clone().unwrap_or_default();
        if let Some(mut rs) = existing {
            let annotations_changed = set_new_rs_annotations(&self.d, &mut rs, new_revision, true);
            let rs_spec = rs.spec.get_or_insert_default();
            let min_ready_changed = rs_spec.min_ready_seconds.unwrap_or(0) != spec.min_ready_seconds.unwrap_or(0);
            if annotations_changed || min_ready_changed {
                rs_spec.min_ready_seconds = spec.min_ready_seconds;
                rs = self.rs_api().replace(&rs.name_any(), &PostParams::default(), &rs).await?;
            }
            let rs_revision =
                rs.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).cloned().unwrap_or_default();
            let mut needs_update = self.set_revision(&rs_revision);
            let mut status = self.d.status.clone().unwrap_or_default();
            if has_progress_deadline(&self.d) && condition(&status, "Progressing").is_none() {
                let message = format!("Found new replica set {:?}", rs.name_any());
                set_condition(&mut status, new_condition("Progressing", "True", FOUND_NEW_RS, message));
                needs_update = true;
            }
            if needs_update {
                self.write_status(status).await?;
            }
            return Ok(Some(rs));
        }
        if !create {
            return Ok(None);
        }
        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let hash = template_hash(&spec.template, collision_count);
        let mut template = spec.template.clone();
        template
            .metadata
            .get_or_insert_default()
            .labels
            .get_or_insert_default()
            .insert(HASH_LABEL.into(), hash.clone());
        let mut selector = spec.selector.clone();
        selector.match_labels.get_or_insert_default().insert(HASH_LABEL.into(), hash.clone());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!("{}-{hash}", self.d.name_any())),
                namespace: Some(self.ns.clone()),
                owner_references: Some(vec![controller_ref::controller_ref("apps/v1", "Deployment", &self.d.metadata)]),
                labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&rs)).collect();
        let replicas = new_rs_new_replicas(&self.d, &all, &rs);
        rs.spec.as_mut().unwrap().replicas = Some(replicas);
        set_new_rs_annotations(&self.d, &mut rs, new_revision, false);
        let created = match self.rs_api().create(&PostParams::default(), &rs).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.reason == "AlreadyExists" => {
                // Ours from an earlier sync the cache has not shown yet, or a hash collision.
                let found = self.rs_api().get(&rs.name_any()).await?;
                let ours = controller_ref::controller_of(&found.metadata)
                    .is_some_and(|r| Some(&r.uid) == self.d.metadata.uid.as_ref());
                let same = found
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| equal_ignore_hash(t, &spec.template));
                if ours && same {
                    return Ok(Some(found));
                }
                let mut status = self.d.status.clone().unwrap_or_default();
                status.collision_count = Some(collision_count.unwrap_or(0).wrapping_add(1));
                self.write_status(status).await?;
                return Err(Error::Other(format!("hash collision for replica set {}", rs.name_any())));
            }
            Err(e) => {
                if has_progress_deadline(&self.d) {
                    let mut status = self.d.status.clone().unwrap_or_default();
                    let message = format!("Failed to create new replica set {:?}: {e}", rs.name_any());
                    set_condition(&mut status, new_condition("Progressing", "False", "ReplicaSetCreateError", message));
                    self.write_status(status).await?;
                }
                self.event(
                    EventType::Warning,
                    "FailedCreate",
                    format!("Failed to create new replica set {:?}: {e}", rs.name_any()),
                )
                .await;
                return Err(e.into());
            }
        };
        if replicas > 0 {
            self.event(
                EventType::Normal,
                "ScalingReplicaSet",
                format!("Scaled up replica set {} from 0 to {replicas}", created.name_any()),
            )
            .await;
        }
        let mut needs_update = self.set_revision(&new_revision.to_string());
        let mut status = self.d.status.clone().unwrap_or_default();
        if has_progress_deadline(&self.d) {
            let message = format!("Created new replica set {:?}", created.name_any());
            set_condition(&mut status, new_condition("Progressing", "True", NEW_RS_CREATED, message));
            needs_update = true;
        }
        if needs_update {
            self.write_status(status).await?;
        }
        Ok(Some(created))
    }

    /// Upstream's scaleReplicaSetAndRecordEvent: only a change of size.
    async fn scale_and_record(&self, rs: &mut ReplicaSet, to: i32) -> Result<bool, Error> {
        let from = rs_replicas(rs);
        if from == to {
            return Ok(false);
        }
        self.scale(rs, to, if from < to { "up" } else { "down" }).await
    }

    /// Upstream's scaleReplicaSet: size and the replica annotations.
    async fn scale(&self, rs: &mut ReplicaSet, to: i32, operation: &str) -> Result<bool, Error> {
        let from = rs_replicas(rs);
        let (desired, max) = (replicas(&self.d), replicas(&self.d) + max_surge(&self.d));
        if from == to && !replicas_annotations_need_update(rs, desired, max) {
            return Ok(false);
        }
        let mut copy = rs.clone();
        copy.spec.get_or_insert_default().replicas = Some(to);
        set_replicas_annotations(&mut copy, desired, max);
        *rs = self.rs_api().replace(&rs.name_any(), &PostParams::default(), &copy).await?;
        if from != to {
            let note = format!("Scaled {operation} replica set {} from {from} to {to}", rs.name_any());
            self.event(EventType::Normal, "ScalingReplicaSet", note).await;
        }
        Ok(true)
    }

    /// RollingUpdate (upstream's rolloutRolling).
    pub async fn rolling(&mut self, rss: Vec<ReplicaSet>) -> Result<(), Error> {
        let (new, mut old) = self.all(rss, true).await?;
        let Some(mut new) = new else { return Ok(()) };
        if self.reconcile_new(&old, &mut new).await? {
            return self.sync_rollout_status(&old, Some(&new)).await;
        }
        if self.reconcile_old(&mut old, &new).await? {
            return self.sync_rollout_status(&old, Some(&new)).await;
        }
        if complete(&self.d, &self.d.status.clone().unwrap_or_default()) {
            self.cleanup(&old).await?;
        }
        self.sync_rollout_status(&old, Some(&new)).await
    }

    async fn reconcile_new(&self, old: &[ReplicaSet], new: &mut ReplicaSet) -> Result<bool, Error> {
        let want = replicas(&self.d);
        let have = rs_replicas(new);
        if have == want {
            return Ok(false);
        }
        if have > want {
            return self.scale_and_record(new, want).await;
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&*new)).collect();
        let to = new_rs_new_replicas(&self.d, &all, new);
        self.scale_and_record(new, to).await
    }

    async fn reconcile_old(&self, old: &mut [ReplicaSet], new: &ReplicaSet) -> Result<bool, Error> {
        let old_pods: i32 = old.iter().map(rs_replicas).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = old_pods + rs_replicas(new);
        let min_available = replicas(&self.d) - max_unavailable(&self.d);
        let new_unavailable = rs_replicas(new) - available(new);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        old.sort_by(by_creation);
        // First the old pods that are not available anyway.
        let mut cleaned = 0;
        for rs in old.iter_mut() {
            if cleaned >= max_scaled_down {
                break;
            }
            let have = rs_replicas(rs);
            if have == 0 || have == available(rs) {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(have - available(rs));
            self.scale_and_record(rs, have - down).await?;
            cleaned += down;
        }
        // Then available ones, keeping minAvailable.
        let available_pods: i32 = old.iter().map(available).sum::<i32>() + available(new);
        let mut scaled = 0;
        if available_pods > min_available {
            let total = available_pods - min_available;
            for rs in old.iter_mut() {
                if scaled >= total {
                    break;
                }
                let have = rs_replicas(rs);
                if have == 0 {
                    continue;
                }
                let down = have.min(total - scaled);
                self.scale_and_record(rs, have - down).await?;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// Recreate (upstream's rolloutRecreate): old pods all gone before new ones start.
    pub async fn recreate(&mut self, rss: Vec<ReplicaSet>) -> Result<(), Error> {
        let (new, mut old) = self.all(rss, false).await?;
        let mut scaled = false;
        for rs in old.iter_mut().filter(|rs| rs_replicas(rs) > 0) {
            scaled |= self.scale_and_record(rs, 0).await?;
        }
        if scaled || self.old_pods_running(new.as_ref(), &old) {
            return self.sync_rollout_status(&old, new.as_ref()).await;
        }
        let (new, old) = match new {
            Some(new) => (new, old),
            None => match self.all(old, true).await? {
                (Some(new), old) => (new, old),
                (None, old) => return self.sync_rollout_status(&old, None).await,
            },
        };
        let mut new = new;
        self.scale_and_record(&mut new, replicas(&self.d)).await?;
        if complete(&self.d, &self.d.status.clone().unwrap_or_default()) {
            self.cleanup(&old).await?;
        }
        self.sync_rollout_status(&old, Some(&new)).await
    }

    fn old_pods_running(&self, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> bool {
        if old.iter().map(actual).sum::<i32>() > 0 {
            return true;
        }
        let new_uid = new.and_then(|rs| rs.metadata.uid.clone());
        let old_uids: Vec<&str> =
            old.iter().filter_map(|rs| rs.metadata.uid.as_deref()).filter(|u| Some(*u) != new_uid.as_deref()).collect();
        self.ctx.pods.state().iter().any(|p| {
            p.metadata.namespace.as_deref() == Some(&self.ns)
                && controller_ref::controller_of(&p.metadata).is_some_and(|r| old_uids.contains(&r.uid.as_str()))
                && !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Failed" | "Succeeded"))
        })
    }

    /// Scaling without a rollout, and paused Deployments (upstream's sync).
    pub async fn sync(&mut self, rss: Vec<ReplicaSet>) -> Result<(), Error> {
        let (mut new, mut old) = self.all(rss, false).await?;
        self.scale_proportionally(new.as_mut(), &mut old).await?;
        let paused = self.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        if paused {
            self.cleanup(&old).await?;
        }
        self.sync_deployment_status(&old, new.as_ref()).await
    }

    /// Whether some active ReplicaSet was sized for another replica count.
    pub async fn is_scaling_event(&mut self, rss: &[ReplicaSet]) -> Result<bool, Error> {
        let (new, old) = self.all(rss.to_vec(), false).await?;
        let want = replicas(&self.d);
        Ok(old
            .iter()
            .chain(new.iter())
            .filter(|rs| rs_replicas(rs) > 0)
            .any(|rs| annotation_i32(rs, DESIRED_REPLICAS).is_some_and(|d| d != want)))
    }

    /// Upstream's scale: one active ReplicaSet takes the new size; during a rollout the
    /// change is spread over the active ones by their share.
    async fn scale_proportionally(&self, new: Option<&mut ReplicaSet>, old: &mut [ReplicaSet]) -> Result<(), Error> {
        let want = replicas(&self.d);
        old.sort_by(by_creation);
        let has_new = new.is_some();
        // The new ReplicaSet, if any, is last; old ones oldest first.
        let mut all: Vec<&mut ReplicaSet> = old.iter_mut().chain(new).collect();
        let active: Vec<usize> = (0..all.len()).filter(|i| rs_replicas(all[*i]) > 0).collect();
        let target = match active.len() {
            0 => all.len().checked_sub(1),
            1 => Some(active[0]),
            _ => None,
        };
        if let Some(i) = target {
            self.scale_and_record(all[i], want).await?;
            return Ok(());
        }
        if has_new && is_saturated(&self.d, all[all.len() - 1]) {
            let last = all.len() - 1;
            for rs in all.into_iter().take(last).filter(|rs| rs_replicas(rs) > 0) {
                self.scale_and_record(rs, 0).await?;
            }
            return Ok(());
        }
        if !is_rolling(&self.d) {
            return Ok(());
        }
        let mut active: Vec<&mut ReplicaSet> = all.into_iter().filter(|rs| rs_replicas(rs) > 0).collect();
        let views: Vec<&ReplicaSet> = active.iter().map(|rs| &**rs).collect();
        let (order, sizes, operation) = proportional_sizes(&self.d, &views);
        for (i, size) in order.into_iter().zip(sizes) {
            self.scale(active[i], size, operation).await?;
        }
        Ok(())
    }

    /// Deletes the oldest old ReplicaSets past revisionHistoryLimit that have no pods.
    pub(super) async fn cleanup(&self, old: &[ReplicaSet]) -> Result<(), Error> {
        let Some(limit) = self.d.spec.as_ref().and_then(|s| s.revision_history_limit).filter(|l| *l != i32::MAX) else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> =
            old.iter().filter(|rs| rs.metadata.deletion_timestamp.is_none()).collect();
        let diff = cleanable.len() as i64 - limit.max(0) as i64;
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| {
            revision(a.metadata.annotations.as_ref())
                .cmp(&revision(b.metadata.annotations.as_ref()))
                .then_with(|| by_creation(a, b))
        });
        for rs in cleanable.into_iter().take(diff as usize) {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation).unwrap_or(0);
            if actual(rs) != 0 || rs_replicas(rs) != 0 || rs.metadata.generation.unwrap_or(0) > observed {
                continue;
            }
            tracing::debug!(replicaset = %rs.name_any(), "deleting old replica set past the revision history limit");
            match self.rs_api().delete(&rs.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
