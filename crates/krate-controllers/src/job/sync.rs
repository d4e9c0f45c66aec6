//! One sync of a Job, in upstream's order (`syncJob`, `manageJob`,
//! `trackJobStatusAndRemoveFinalizers`): count finished pods, decide whether the Job
//! has failed or succeeded, create or delete pods, then record the new status.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;

use super::conditions::{self as cond, COMPLETE, FAILED, FAILURE_TARGET, SUCCESS_CRITERIA_MET, SUSPENDED};
use super::indexes::Indexes;
use super::pods::{self, COMPLETION_INDEX, INDEX_FAILURE_COUNT, INDEX_IGNORED_FAILURE_COUNT, TRACKING_FINALIZER};
use super::policy::{self, Action as PolicyAction};
use super::{Shared, backoff};
use crate::Error;

/// At most this many pods are created or deleted per sync (upstream's
/// MaxPodCreateDeletePerSync).
const MAX_CREATE_DELETE: usize = 500;
const MAX_GENERATED_NAME: usize = 58;

/// What one sync knows about the Job.
struct Ctx<'a> {
    job: Job,
    spec: JobSpec,
    pods: &'a [Arc<Pod>],
    /// Pods whose finalizer we removed but the informer still shows.
    unfinalized: &'a HashSet<String>,
    active_pods: Vec<&'a Pod>,
    terminating: i32,
    ready: i32,
    succeeded: i32,
    uncounted_succeeded: HashSet<String>,
    uncounted_failed: HashSet<String>,
    finished: Option<JobCondition>,
    prev_succeeded_indexes: Indexes,
    succeeded_indexes: Indexes,
    failed_indexes: Option<Indexes>,
    delayed_per_index: HashMap<i32, &'a Pod>,
    requeue: Option<Duration>,
    now: Timestamp,
}

impl Ctx<'_> {
    fn indexed(&self) -> bool {
        self.spec.completion_mode.as_deref() == Some("Indexed")
    }
    fn completions(&self) -> i32 {
        self.spec.completions.unwrap_or(0)
    }
    fn per_index(&self) -> bool {
        self.indexed() && self.spec.backoff_limit_per_index.is_some()
    }
    fn suspended(&self) -> bool {
        self.spec.suspend == Some(true)
    }
    fn tracked(&self, pod: &Pod) -> bool {
        pods::has_finalizer(pod) && !self.unfinalized.contains(pods::uid(pod))
    }
    fn requeue_in(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }
    fn failure(&self, reason: &str, message: &str) -> JobCondition {
        // Upstream (JobPodReplacementPolicy, JobManagedBy) marks the target first and
        // sets Failed once every pod is gone.
        cond::new(FAILURE_TARGET, reason, message, self.now)
    }
    fn verdict(&self, pod: &Pod) -> policy::Verdict {
        policy::match_pod_failure_policy(self.spec.pod_failure_policy.as_ref(), pod)
    }
    /// Upstream's `isIndexFailed`.
    fn index_failed(&self, pod: &Pod) -> bool {
        if !pods::is_failed(pod, &self.job) {
            return false;
        }
        let verdict = self.verdict(pod);
        if verdict.action == Some(PolicyAction::FailIndex) {
            return true;
        }
        verdict.count && pods::index_failure_count(pod) >= self.spec.backoff_limit_per_index.unwrap_or(0)
    }
    /// Failure counts a replacement for `pod`'s index starts with.
    fn new_index_failure_counts(&self, replaced: Option<&Pod>) -> (i32, i32) {
        let Some(pod) = replaced else { return (0, 0) };
        let (failures, ignored) = (pods::index_failure_count(pod), pods::index_ignored_failure_count(pod));
        if self.verdict(pod).count { (failures + 1, ignored) } else { (failures, ignored + 1) }
    }
}

fn is_success_criteria(c: &Option<JobCondition>) -> bool {
    c.as_ref().is_some_and(|c| c.type_ == SUCCESS_CRITERIA_MET)
}

impl Shared {
    pub(super) async fn sync(&self, job: &Arc<Job>) -> Result<Action, Error> {
        let uid = job.uid().unwrap_or_default();
        if self.is_stale(&uid, job.resource_version().as_deref()) {
            // Our last status write is not in the informer yet: wait for it.
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let pods = self.pods_of(&uid);
        if cond::is_finished(job) {
            for pod in pods.iter().filter(|p| pods::has_finalizer(p)) {
                self.remove_finalizer(pod).await?;
            }
            self.forget(&uid);
            return Ok(Action::await_change());
        }
        let (satisfied, unfinalized) = self.observe(&uid, &pods);
        let mut job = (**job).clone();
        let spec = job.spec.clone().unwrap_or_default();
        let now = Timestamp::now();
        let status = job.status.get_or_insert_default();
        let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let mut ctx = Ctx {
            spec,
            pods: &pods,
            unfinalized: &unfinalized,
            active_pods: pods.iter().map(|p| p.as_ref()).filter(|p| pods::is_active(p)).collect(),
            terminating: pods.iter().filter(|p| pods::is_terminating(p)).count() as i32,
            ready: 0,
            succeeded: 0,
            uncounted_succeeded: uncounted.succeeded.unwrap_or_default().into_iter().collect(),
            uncounted_failed: uncounted.failed.unwrap_or_default().into_iter().collect(),
            finished: None,
            prev_succeeded_indexes: Indexes::default(),
            succeeded_indexes: Indexes::default(),
            failed_indexes: None,
            delayed_per_index: HashMap::new(),
            requeue: None,
            now,
            job,
        };
        ctx.ready = ctx.active_pods.iter().filter(|p| pods::is_ready(p)).count() as i32;
        if !satisfied {
            // Come back even if the awaited watch events never arrive.
            ctx.requeue_in(Duration::from_secs(5));
        }
        let mut active = ctx.active_pods.len() as i32;
        let new_succeeded: Vec<&Pod> = pods
            .iter()
            .map(|p| p.as_ref())
            .filter(|p| {
                ctx.tracked(p) && pods::phase(p) == "Succeeded" && !ctx.uncounted_succeeded.contains(pods::uid(p))
            })
            .collect();
        let new_failed: Vec<&Pod> = pods
            .iter()
            .map(|p| p.as_ref())
            .filter(|p| ctx.tracked(p) && pods::is_failed(p, &ctx.job) && !ctx.uncounted_failed.contains(pods::uid(p)))
            .collect();
        let status = ctx.job.status.clone().unwrap_or_default();
        ctx.succeeded = status.succeeded.unwrap_or(0) + (new_succeeded.len() + ctx.uncounted_succeeded.len()) as i32;
        let counted_new_failed = new_failed.iter().filter(|p| ctx.verdict(p).count).count();
        let failed = status.failed.unwrap_or(0) + (counted_new_failed + ctx.uncounted_failed.len()) as i32;
        let status = ctx.job.status.get_or_insert_default();
        if status.start_time.is_none() && ctx.spec.suspend != Some(true) {
            status.start_time = Some(Time(now));
        }
        let new_backoff = self.backoffs.lock().get(&uid).cloned().unwrap_or_default().with_finished(
            new_succeeded.iter().map(|p| pods::finished_time(p)).collect(),
            new_failed.iter().filter(|p| ctx.verdict(p).count).map(|p| pods::finished_time(p)).collect(),
        );

        if cond::is_true(&ctx.job, SUCCESS_CRITERIA_MET) {
            ctx.finished = cond::find(&ctx.job, SUCCESS_CRITERIA_MET).cloned();
        }
        if ctx.finished.is_none() {
            if let Some(target) = cond::find(&ctx.job, FAILURE_TARGET).filter(|c| c.status == "True") {
                let reason = target.reason.clone().unwrap_or_default();
                ctx.finished = Some(cond::new(FAILED, &reason, target.message.as_deref().unwrap_or(""), now));
            } else if let Some(message) = self.fail_job_message(&ctx) {
                ctx.finished = Some(cond::new(FAILURE_TARGET, "PodFailurePolicy", &message, now));
            }
        }
        if ctx.finished.is_none() {
            let limit = ctx.spec.backoff_limit.unwrap_or(6);
            if failed > limit || past_backoff_limit_on_failure(&ctx) {
                ctx.finished = Some(ctx.failure("BackoffLimitExceeded", "Job has reached the specified backoff limit"));
            } else if let Some(left) = deadline_left(&ctx) {
                if left.is_zero() {
                    ctx.finished =
                        Some(ctx.failure("DeadlineExceeded", "Job was active longer than specified deadline"));
                } else {
                    ctx.requeue_in(left);
                }
            }
        }
        if ctx.indexed() {
            let completions = ctx.completions();
            let text = ctx.job.status.as_ref().and_then(|s| s.completed_indexes.clone()).unwrap_or_default();
            ctx.prev_succeeded_indexes = Indexes::parse(&text, completions);
            let mut succeeded = ctx.prev_succeeded_indexes.clone();
            succeeded.extend(
                pods.iter()
                    .filter(|p| ctx.tracked(p) && pods::phase(p) == "Succeeded")
                    .filter_map(|p| pods::valid_index(p, completions)),
            );
            ctx.succeeded = succeeded.total() as i32;
            ctx.succeeded_indexes = succeeded;
            if ctx.per_index() {
                let text = ctx.job.status.as_ref().and_then(|s| s.failed_indexes.clone()).unwrap_or_default();
                let mut failed_indexes = Indexes::parse(&text, completions);
                failed_indexes.extend(
                    pods.iter()
                        .filter(|p| ctx.tracked(p) && ctx.index_failed(p))
                        .filter_map(|p| pods::valid_index(p, completions)),
                );
                if ctx.finished.is_none() {
                    let total = failed_indexes.total() as i32;
                    if ctx.spec.max_failed_indexes.is_some_and(|max| total > max) {
                        ctx.finished = Some(ctx.failure(
                            "MaxFailedIndexesExceeded",
                            "Job has exceeded the specified maximal number of failed indexes",
                        ));
                    } else if total > 0 && total + ctx.succeeded_indexes.total() as i32 >= completions {
                        ctx.finished = Some(ctx.failure("FailedIndexes", "Job has failed indexes"));
                    }
                }
                ctx.failed_indexes = Some(failed_indexes);
                ctx.delayed_per_index = delayed_per_index(&ctx);
            }
            if ctx.finished.is_none()
                && let Some(message) =
                    policy::match_success_policy(ctx.spec.success_policy.as_ref(), completions, &ctx.succeeded_indexes)
            {
                ctx.finished = Some(cond::new(SUCCESS_CRITERIA_MET, "SuccessPolicy", &message, now));
            }
        }

        let mut suspend_changed = false;
        if ctx.finished.is_some() {
            let to_delete = ctx.active_pods.clone();
            let (deleted, deleted_ready) = self.delete_pods(&ctx.job, &uid, &to_delete).await;
            if deleted != active || !satisfied {
                // Pods or finalizers may remain that the informer has not shown yet.
                ctx.finished = None;
            }
            active -= deleted;
            ctx.terminating += deleted;
            ctx.ready -= deleted_ready;
        } else {
            let mut managed = false;
            if satisfied && ctx.job.metadata.deletion_timestamp.is_none() {
                active = self.manage(&mut ctx, &uid, &new_backoff).await?;
                managed = true;
            }
            let complete = match ctx.spec.completions {
                None => ctx.succeeded > 0 && active == 0,
                Some(c) => ctx.succeeded >= c && active == 0,
            };
            if complete {
                ctx.finished = Some(cond::new(
                    SUCCESS_CRITERIA_MET,
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    now,
                ));
            } else if managed {
                let suspended = ctx.suspended();
                let status = ctx.job.status.get_or_insert_default();
                let conditions = status.conditions.get_or_insert_default();
                if suspended {
                    if cond::ensure(conditions, SUSPENDED, "True", "JobSuspended", "Job suspended", now) {
                        suspend_changed = true;
                        self.event(&ctx.job, false, "Suspended", "Job suspended".into()).await;
                    }
                } else if cond::ensure(conditions, SUSPENDED, "False", "JobResumed", "Job resumed", now) {
                    suspend_changed = true;
                    // activeDeadlineSeconds counts time continuously active: it starts again.
                    status.start_time = Some(Time(now));
                    self.event(&ctx.job, false, "Resumed", "Job resumed".into()).await;
                }
            }
        }

        let status = ctx.job.status.get_or_insert_default();
        let needs_update = suspend_changed
            || status.active != Some(active)
            || status.ready != Some(ctx.ready)
            || status.terminating != Some(ctx.terminating);
        status.active = Some(active);
        status.ready = Some(ctx.ready);
        status.terminating = Some(ctx.terminating);
        self.track_and_remove_finalizers(&mut ctx, &uid, needs_update, new_backoff).await?;
        Ok(ctx.requeue.map_or_else(Action::await_change, Action::requeue))
    }

    fn fail_job_message(&self, ctx: &Ctx) -> Option<String> {
        ctx.spec.pod_failure_policy.as_ref()?;
        ctx.pods.iter().filter(|p| pods::is_failed(p, &ctx.job)).find_map(|p| ctx.verdict(p).message)
    }

    /// Creates or deletes pods towards the wanted number of active ones; the new count.
    async fn manage(&self, ctx: &mut Ctx<'_>, uid: &str, record: &backoff::Record) -> Result<i32, Error> {
        let mut active = ctx.active_pods.len() as i32;
        if ctx.suspended() {
            let all = ctx.active_pods.clone();
            let (deleted, ready) = self.delete_pods(&ctx.job, uid, &all).await;
            ctx.terminating += deleted;
            ctx.ready -= ready;
            return Ok(active - deleted);
        }
        let parallelism = ctx.spec.parallelism.unwrap_or(1);
        let want = match ctx.spec.completions {
            None if ctx.succeeded > 0 => active,
            None => parallelism,
            Some(c) => (c - ctx.succeeded).clamp(0, parallelism),
        };
        let mut to_delete: Vec<&Pod> = Vec::new();
        let mut left: Vec<&Pod> = ctx.active_pods.clone();
        if ctx.indexed() {
            // Pods beyond completions, of failed indexes, or a second pod of one index.
            let mut seen = HashSet::new();
            let (completions, failed) = (ctx.completions(), ctx.failed_indexes.clone().unwrap_or_default());
            left.sort_by_key(|p| std::cmp::Reverse(pods::is_ready(p)));
            let (rm, keep): (Vec<&Pod>, Vec<&Pod>) =
                left.into_iter().partition(|p| match pods::valid_index(p, completions) {
                    None => true,
                    Some(ix) => failed.has(ix) || ctx.succeeded_indexes.has(ix) || !seen.insert(ix),
                });
            to_delete = rm;
            left = keep;
        }
        let extra = (active - want).max(0) as usize;
        if to_delete.len() < extra {
            // Least valuable first: not yet running, then not ready, then youngest.
            left.sort_by_key(|p| {
                (
                    pods::phase(p) == "Running",
                    pods::is_ready(p),
                    std::cmp::Reverse(p.metadata.creation_timestamp.clone()),
                )
            });
            let n = extra - to_delete.len();
            to_delete.extend(left.into_iter().take(n));
        }
        to_delete.truncate(MAX_CREATE_DELETE);
        if !to_delete.is_empty() {
            let (deleted, ready) = self.delete_pods(&ctx.job, uid, &to_delete).await;
            ctx.terminating += deleted;
            ctx.ready -= ready;
            return Ok(active - deleted);
        }
        let terminating = if pods::only_replace_failed(&ctx.job) { ctx.terminating } else { 0 };
        let mut diff = (want - terminating - active).max(0) as usize;
        if diff == 0 {
            return Ok(active);
        }
        if !ctx.per_index() {
            let wait = record.remaining(ctx.now, self.tuning.pod_failure_backoff, self.tuning.max_pod_failure_backoff);
            if !wait.is_zero() {
                ctx.requeue_in(wait);
                return Ok(active);
            }
        }
        diff = diff.min(MAX_CREATE_DELETE);
        let mut indexes: Vec<Option<i32>> = vec![None; diff];
        if ctx.indexed() {
            let mut pending = first_pending_indexes(ctx, diff);
            if ctx.per_index() {
                let mut ready_now = Vec::new();
                for ix in pending {
                    let replaced = ctx.delayed_per_index.get(&ix).copied();
                    let wait = match replaced {
                        Some(p) => {
                            let (failures, _) = ctx.new_index_failure_counts(Some(p));
                            let delay = backoff::delay(
                                failures.max(1) as u32,
                                self.tuning.pod_failure_backoff,
                                self.tuning.max_pod_failure_backoff,
                            );
                            delay.saturating_sub(backoff::elapsed(pods::finished_time(p), ctx.now))
                        }
                        None => Duration::ZERO,
                    };
                    if wait.is_zero() { ready_now.push(ix) } else { ctx.requeue_in(wait) }
                }
                pending = ready_now;
            }
            indexes = pending.into_iter().map(Some).collect();
        }
        let mut created = 0;
        for index in indexes {
            let pod = self.pod_for(ctx, index);
            let api: Api<Pod> = Api::namespaced(self.clients.write.clone(), &ctx.job.namespace().unwrap_or_default());
            match api.create(&PostParams::default(), &pod).await {
                Ok(made) => {
                    created += 1;
                    self.expect(uid, |e| {
                        e.created.insert(made.name_any());
                    });
                    self.event(&ctx.job, false, "SuccessfulCreate", format!("Created pod: {}", made.name_any())).await;
                }
                Err(error) => {
                    self.event(&ctx.job, true, "FailedCreate", format!("Error creating: {error}")).await;
                    return Err(error.into());
                }
            }
        }
        active += created;
        Ok(active)
    }

    /// A new pod from the template: the tracking finalizer, the Job as controller, and
    /// for Indexed Jobs the completion index (annotation, label, env, hostname).
    fn pod_for(&self, ctx: &Ctx, index: Option<i32>) -> Pod {
        let job = &ctx.job;
        let template = ctx.spec.template.clone();
        let mut meta = template.metadata.unwrap_or_default();
        let mut spec = template.spec.unwrap_or_default();
        let name = job.name_any();
        let mut finalizers = meta.finalizers.take().unwrap_or_default();
        if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
            finalizers.push(TRACKING_FINALIZER.into());
        }
        let mut generate_name = format!("{name}-");
        if let Some(ix) = index {
            let suffix = format!("-{ix}-");
            let keep = name.len().min(MAX_GENERATED_NAME.saturating_sub(suffix.len()));
            generate_name = format!("{}{suffix}", &name[..keep]);
            meta.annotations.get_or_insert_default().insert(COMPLETION_INDEX.into(), ix.to_string());
            meta.labels.get_or_insert_default().insert(COMPLETION_INDEX.into(), ix.to_string());
            spec.hostname = Some(format!("{name}-{ix}"));
            let env = EnvVar {
                name: "JOB_COMPLETION_INDEX".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
                let vars = c.env.get_or_insert_default();
                if !vars.iter().any(|v| v.name == env.name) {
                    vars.push(env.clone());
                }
            }
            if ctx.per_index() {
                let (failures, ignored) = ctx.new_index_failure_counts(ctx.delayed_per_index.get(&ix).copied());
                let annotations = meta.annotations.get_or_insert_default();
                annotations.insert(INDEX_FAILURE_COUNT.into(), failures.to_string());
                if ignored > 0 {
                    annotations.insert(INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
                }
            }
        }
        if generate_name.len() > MAX_GENERATED_NAME {
            generate_name.truncate(MAX_GENERATED_NAME);
        }
        let owner = OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name,
            uid: job.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        Pod {
            metadata: ObjectMeta {
                generate_name: Some(generate_name),
                namespace: job.namespace(),
                labels: meta.labels,
                annotations: meta.annotations,
                finalizers: Some(finalizers),
                owner_references: Some(vec![owner]),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        }
    }

    /// Deletes pods; how many were deleted and how many of those were ready.
    async fn delete_pods(&self, job: &Job, uid: &str, victims: &[&Pod]) -> (i32, i32) {
        let mut deleted = 0;
        let mut ready = 0;
        for pod in victims {
            let api: Api<Pod> = Api::namespaced(self.clients.write.clone(), &pod.namespace().unwrap_or_default());
            match api.delete(pods::name(pod), &DeleteParams::default()).await {
                Ok(_) => {
                    deleted += 1;
                    ready += i32::from(pods::is_ready(pod));
                    self.expect(uid, |e| {
                        e.deleted.insert(pods::uid(pod).to_string());
                    });
                    self.event(job, false, "SuccessfulDelete", format!("Deleted pod: {}", pods::name(pod))).await;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    deleted += 1;
                }
                Err(error) => {
                    self.event(job, true, "FailedDelete", format!("Error deleting: {error}")).await;
                }
            }
        }
        (deleted, ready)
    }

    /// Records finished pods in uncountedTerminatedPods, removes their finalizers, then
    /// counts them; sets the finished condition once nothing is left uncounted.
    async fn track_and_remove_finalizers(
        &self,
        ctx: &mut Ctx<'_>,
        uid: &str,
        mut needs_flush: bool,
        record: backoff::Record,
    ) -> Result<(), Error> {
        let indexed = ctx.indexed();
        let completions = ctx.completions();
        let mut uncounted =
            ctx.job.status.as_ref().and_then(|s| s.uncounted_terminated_pods.clone()).unwrap_or_default();
        let (mut add_succeeded, mut add_failed) = (Vec::new(), Vec::new());
        let mut to_release: Vec<&Pod> = Vec::new();
        let mut new_indexes = Vec::new();
        let finishing_as_failure = ctx.finished.is_some() && !is_success_criteria(&ctx.finished);
        for pod in ctx.pods.iter().map(|p| p.as_ref()).filter(|p| ctx.tracked(p)) {
            let considered_failed = pods::is_failed(pod, &ctx.job);
            if !can_release(ctx, pod, considered_failed) {
                continue;
            }
            to_release.push(pod);
            let pod_uid = pods::uid(pod).to_string();
            if pods::phase(pod) == "Succeeded" && !ctx.uncounted_failed.contains(&pod_uid) {
                if indexed {
                    if let Some(ix) = pods::valid_index(pod, completions)
                        && !ctx.prev_succeeded_indexes.has(ix)
                    {
                        new_indexes.push(ix);
                    }
                } else if !ctx.uncounted_succeeded.contains(&pod_uid) {
                    add_succeeded.push(pod_uid);
                }
            } else if (considered_failed || finishing_as_failure)
                && !ctx.uncounted_failed.contains(&pod_uid)
                && (!indexed || pods::valid_index(pod, completions).is_some())
                && ctx.verdict(pod).count
            {
                add_failed.push(pod_uid);
            }
        }
        if !add_succeeded.is_empty() || !add_failed.is_empty() {
            needs_flush = true;
            uncounted.succeeded.get_or_insert_default().extend(add_succeeded);
            uncounted.failed.get_or_insert_default().extend(add_failed);
        }
        let status = ctx.job.status.get_or_insert_default();
        status.uncounted_terminated_pods = Some(uncounted);
        if indexed {
            ctx.succeeded_indexes.extend(new_indexes);
            let text = ctx.succeeded_indexes.to_string();
            if status.completed_indexes.as_deref().unwrap_or("") != text {
                needs_flush = true;
            }
            status.succeeded = Some(ctx.succeeded_indexes.total() as i32);
            status.completed_indexes = Some(text);
            let failed_text = ctx.failed_indexes.as_ref().map(|f| f.to_string());
            if status.failed_indexes != failed_text {
                status.failed_indexes = failed_text;
                needs_flush = true;
            }
        }
        let conditions = status.conditions.get_or_insert_default();
        if let Some(c) = ctx.finished.clone() {
            if c.type_ == FAILURE_TARGET {
                conditions.push(c.clone());
                needs_flush = true;
                let reason = c.reason.clone().unwrap_or_default();
                ctx.finished = Some(cond::new(FAILED, &reason, c.message.as_deref().unwrap_or(""), ctx.now));
            } else if c.type_ == SUCCESS_CRITERIA_MET {
                if !conditions.iter().any(|x| x.type_ == SUCCESS_CRITERIA_MET) {
                    conditions.push(c.clone());
                    needs_flush = true;
                }
                let reason = c.reason.clone().unwrap_or_default();
                ctx.finished = Some(cond::new(COMPLETE, &reason, c.message.as_deref().unwrap_or(""), ctx.now));
            }
        }
        if needs_flush {
            self.write_status(ctx, uid).await?;
            needs_flush = false;
        }
        self.backoffs.lock().insert(uid.to_string(), record);

        let mut released = HashSet::new();
        for pod in to_release {
            match self.remove_finalizer(pod).await {
                Ok(()) => {
                    released.insert(pods::uid(pod).to_string());
                    self.expect(uid, |e| {
                        e.unfinalized.insert(pods::uid(pod).to_string());
                    });
                }
                Err(error) => {
                    tracing::debug!(pod = %pods::name(pod), %error, "removing the job-tracking finalizer failed")
                }
            }
        }
        let with_finalizer: HashSet<&str> = ctx
            .pods
            .iter()
            .filter(|p| ctx.tracked(p) && !released.contains(pods::uid(p)))
            .map(|p| pods::uid(p))
            .collect();
        let status = ctx.job.status.get_or_insert_default();
        let uncounted = status.uncounted_terminated_pods.get_or_insert_default();
        let (mut succeeded, mut failed) = (status.succeeded.unwrap_or(0), status.failed.unwrap_or(0));
        let count = |list: &mut Option<Vec<String>>, counter: &mut i32| {
            let before = list.as_ref().map_or(0, Vec::len);
            list.get_or_insert_default().retain(|u| with_finalizer.contains(u.as_str()));
            let moved = before - list.as_ref().map_or(0, Vec::len);
            *counter += moved as i32;
            moved > 0
        };
        needs_flush |= count(&mut uncounted.succeeded, &mut succeeded);
        needs_flush |= count(&mut uncounted.failed, &mut failed);
        if !indexed {
            status.succeeded = Some(succeeded);
        }
        status.failed = Some(failed);

        let finished = self.enact_finished(ctx);
        if finished || needs_flush {
            self.write_status(ctx, uid).await?;
        }
        if finished && let Some(c) = &ctx.finished {
            if c.type_ == COMPLETE {
                self.event(&ctx.job, false, "Completed", "Job completed".into()).await;
            } else {
                let reason = c.reason.clone().unwrap_or_default();
                self.event(&ctx.job, true, &reason, c.message.clone().unwrap_or_default()).await;
            }
        }
        Ok(())
    }

    fn enact_finished(&self, ctx: &mut Ctx) -> bool {
        let Some(c) = ctx.finished.clone() else { return false };
        let status = ctx.job.status.get_or_insert_default();
        let uncounted = status.uncounted_terminated_pods.as_ref();
        let left =
            uncounted.map_or(0, |u| u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len));
        if left > 0 || ctx.terminating > 0 {
            return false;
        }
        let conditions = status.conditions.get_or_insert_default();
        let (reason, message) = (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default());
        cond::ensure(conditions, &c.type_, "True", &reason, &message, ctx.now);
        if c.type_ == COMPLETE {
            status.completion_time = Some(Time(ctx.now));
        }
        true
    }

    async fn write_status(&self, ctx: &mut Ctx<'_>, uid: &str) -> Result<(), Error> {
        let api: Api<Job> = Api::namespaced(self.clients.write.clone(), &ctx.job.namespace().unwrap_or_default());
        let before = ctx.job.resource_version().unwrap_or_default();
        let written = api.replace_status(&ctx.job.name_any(), &PostParams::default(), &ctx.job).await?;
        self.replaced(uid, before);
        ctx.job.metadata.resource_version = written.metadata.resource_version;
        Ok(())
    }
}

/// Upstream's `canRemoveFinalizer`.
fn can_release(ctx: &Ctx, pod: &Pod, considered_failed: bool) -> bool {
    if ctx.job.metadata.deletion_timestamp.is_some() || ctx.finished.is_some() || pods::phase(pod) == "Succeeded" {
        return true;
    }
    if !considered_failed {
        return false;
    }
    // The last failed pod of an index keeps its finalizer until its replacement exists:
    // it carries the index's failure count.
    let delayed = pods::completion_index(pod).and_then(|ix| ctx.delayed_per_index.get(&ix));
    !(ctx.per_index() && delayed.is_some_and(|p| pods::uid(p) == pods::uid(pod)))
}

/// restartPolicy OnFailure: the containers' restarts count against backoffLimit.
fn past_backoff_limit_on_failure(ctx: &Ctx) -> bool {
    let policy = ctx.spec.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    if policy != Some("OnFailure") {
        return false;
    }
    let limit = ctx.spec.backoff_limit.unwrap_or(6);
    let restarts: i32 = ctx
        .active_pods
        .iter()
        .filter(|p| matches!(pods::phase(p), "Running" | "Pending"))
        .map(|p| pods::restarts(p))
        .sum();
    if limit == 0 { restarts > 0 } else { restarts >= limit }
}

/// Time left before activeDeadlineSeconds passes (zero once passed), if it is set.
fn deadline_left(ctx: &Ctx) -> Option<Duration> {
    let seconds = ctx.spec.active_deadline_seconds?;
    if ctx.suspended() {
        return None;
    }
    let start = ctx.job.status.as_ref()?.start_time.as_ref()?.0;
    let deadline = Duration::from_secs(seconds.max(0) as u64);
    Some(deadline.saturating_sub(backoff::elapsed(start, ctx.now)))
}

/// The first `count` indexes with no succeeded, failed, active (or, when only failed
/// pods are replaced, terminating) pod.
fn first_pending_indexes(ctx: &Ctx, count: usize) -> Vec<i32> {
    let mut taken: HashSet<i32> = ctx.succeeded_indexes.iter().collect();
    taken.extend(ctx.active_pods.iter().filter_map(|p| pods::completion_index(p)));
    if let Some(f) = &ctx.failed_indexes {
        taken.extend(f.iter());
    }
    if pods::only_replace_failed(&ctx.job) {
        taken.extend(ctx.pods.iter().filter(|p| pods::is_terminating(p)).filter_map(|p| pods::completion_index(p)));
    }
    (0..ctx.completions()).filter(|i| !taken.contains(i)).take(count).collect()
}

/// Per index, the last failed pod still holding its finalizer (upstream's
/// `getPodsWithDelayedDeletionPerIndex`).
fn delayed_per_index<'a>(ctx: &Ctx<'a>) -> HashMap<i32, &'a Pod> {
    let active: HashSet<i32> = ctx.active_pods.iter().filter_map(|p| pods::completion_index(p)).collect();
    let failed = ctx.failed_indexes.clone().unwrap_or_default();
    let mut by_index: BTreeMap<i32, &'a Pod> = BTreeMap::new();
    for pod in ctx.pods.iter().map(|p| p.as_ref()) {
        if !ctx.tracked(pod) || !pods::is_failed(pod, &ctx.job) {
            continue;
        }
        let Some(ix) = pods::valid_index(pod, ctx.completions()) else { continue };
        if ctx.succeeded_indexes.has(ix) || failed.has(ix) || active.contains(&ix) {
            continue;
        }
        let absolute = |p: &Pod| pods::index_failure_count(p) + pods::index_ignored_failure_count(p);
        match by_index.get(&ix) {
            Some(last) if absolute(last) > absolute(pod) || pods::finished_time(pod) < pods::finished_time(last) => {}
            _ => {
                by_index.insert(ix, pod);
            }
        }
    }
    by_index.into_iter().collect()
}
