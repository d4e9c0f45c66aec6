//! The CronJob controller (upstream's cronjob ControllerV2): creates a Job for each
//! schedule time in the CronJob's time zone, named `<cronjob>-<minutes since epoch>`
//! so one time never makes two Jobs, honouring suspend, startingDeadlineSeconds and
//! concurrencyPolicy (Allow, Forbid, Replace); keeps status.active, lastScheduleTime
//! and lastSuccessfulTime, and deletes finished Jobs beyond the history limits.

pub mod schedule;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;

use crate::{Clients, Context, Error};
use schedule::Schedule;

const CONTROLLER: &str = "cronjob";
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Upstream looks again this long after the next schedule time.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

struct Shared {
    clients: Clients,
    jobs: Store<Job>,
    events: crate::events::Events,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("cronjob-controller");
    let cronjobs = ctx.informers.get::<CronJob>();
    let jobs = ctx.informers.get::<Job>();
    let events = crate::events::Events::new(clients.write.clone(), "cronjob-controller");
    let shared = Arc::new(Shared { clients, jobs: jobs.store(), events });
    Controller::for_shared_stream(cronjobs.subscribe(), cronjobs.store())
        .owns_shared_stream(jobs.subscribe())
        .run(
            |cj, shared: Arc<Shared>| async move {
                let result = shared.sync(&cj, Timestamp::now()).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |cj, error: &Error, _| {
                tracing::warn!(controller = CONTROLLER, cronjob = %cj.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            shared,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// How many start times were missed since the last one.
#[derive(Debug, PartialEq)]
pub enum Missed {
    None,
    Few,
    /// More than 100: upstream warns TooManyMissedTimes.
    Many,
}

/// Upstream's `mostRecentScheduleTime`: the time from which schedules are looked for,
/// the latest schedule time not after `now` (if any), and how many were missed.
pub fn most_recent_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    sched: &Schedule,
    tz: &TimeZone,
    with_starting_deadline: bool,
) -> Result<(Timestamp, Option<Timestamp>, Missed), String> {
    let status = cj.status.as_ref();
    let created = cj.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(now);
    let mut earliest = status.and_then(|s| s.last_schedule_time.as_ref()).map(|t| t.0).unwrap_or(created);
    if with_starting_deadline && let Some(sds) = cj.spec.starting_deadline_seconds {
        let deadline = Timestamp::from_second(now.as_second() - sds).unwrap_or(now);
        earliest = earliest.max(deadline);
    }
    let never = || "no schedule time within five years".to_string();
    let Some(t1) = sched.next(earliest, tz) else { return Err(never()) };
    if now < t1 {
        return Ok((earliest, None, Missed::None));
    }
    let Some(t2) = sched.next(t1, tz) else { return Ok((earliest, Some(t1), Missed::Few)) };
    if now < t2 {
        return Ok((earliest, Some(t1), Missed::Few));
    }
    let between = t2.as_second() - t1.as_second();
    if between < 1 {
        return Err("time difference between two schedules is less than 1 second".into());
    }
    let missed = (now.as_second() - t1.as_second()) / between + 1;
    // Start a little before the estimate so irregular schedules are found exactly.
    let from = Timestamp::from_second(t1.as_second() + (missed - 2) * between).unwrap_or(t1);
    let mut recent = None;
    let mut t = sched.next(from, tz);
    while let Some(at) = t.filter(|at| *at <= now) {
        recent = Some(at);
        t = sched.next(at, tz);
    }
    let how_many = if missed > 100 { Missed::Many } else { Missed::Few };
    Ok((earliest, recent, how_many))
}

/// How long until the next schedule time (plus upstream's small delta).
pub fn next_schedule_in(cj: &CronJob, now: Timestamp, sched: &Schedule, tz: &TimeZone) -> Option<Duration> {
    let (earliest, recent, missed) = most_recent_schedule_time(cj, now, sched, tz, false).ok()?;
    let from = recent.unwrap_or(if missed == Missed::None { earliest } else { now });
    let next = sched.next(from, tz)?;
    let left = Duration::try_from(next.duration_since(now)).unwrap_or_default();
    Some(left + NEXT_SCHEDULE_DELTA)
}

/// The CronJob's time zone: spec.timeZone, else the controller's own, as upstream.
pub fn time_zone(cj: &CronJob) -> Result<TimeZone, String> {
    match cj.spec.time_zone.as_deref() {
        None => Ok(TimeZone::try_system().unwrap_or(TimeZone::UTC)),
        Some(name) => TimeZone::get(name).map_err(|e| e.to_string()),
    }
}

/// The Job name for a schedule time: deterministic, so a time never makes two Jobs.
pub fn job_name(cj: &str, scheduled: Timestamp) -> String {
    format!("{cj}-{}", scheduled.as_second().div_euclid(60))
}

fn finished(job: &Job) -> Option<&str> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True")?;
    Some(c.type_.as_str())
}

impl Shared {
    async fn event(&self, cj: &CronJob, warning: bool, reason: &str, note: String) {
        if warning { self.events.warning(cj, reason, note).await } else { self.events.normal(cj, reason, note).await }
    }

    fn jobs_of(&self, uid: &str) -> Vec<Arc<Job>> {
        let owned = |j: &Arc<Job>| j.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid);
        self.jobs.state().into_iter().filter(owned).collect()
    }

    async fn sync(&self, original: &CronJob, now: Timestamp) -> Result<Action, Error> {
        let mut cj = original.clone();
        let namespace = cj.namespace().unwrap_or_default();
        let jobs_api: Api<Job> = Api::namespaced(self.clients.write.clone(), &namespace);
        let children = self.jobs_of(&cj.uid().unwrap_or_default());
        let (requeue, mut changed) = self.sync_schedule(&mut cj, &children, &jobs_api, now).await?;
        changed |= self.cleanup_finished(&mut cj, &children, &jobs_api).await;
        if changed || cj.status != original.status {
            let api: Api<CronJob> = Api::namespaced(self.clients.write.clone(), &namespace);
            match api.replace_status(&cj.name_any(), &PostParams::default(), &cj).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(requeue.map_or_else(Action::await_change, Action::requeue))
    }

    /// Reconciles status.active with the Jobs, then starts a Job if one is due.
    async fn sync_schedule(
        &self,
        cj: &mut CronJob,
        children: &[Arc<Job>],
        jobs_api: &Api<Job>,
        now: Timestamp,
    ) -> Result<(Option<Duration>, bool), Error> {
        let mut changed = false;
        let status = cj.status.get_or_insert_default();
        let mut active = status.active.take().unwrap_or_default();
        let child_uids: HashSet<String> = children.iter().filter_map(|j| j.uid()).collect();
        let mut events: Vec<(bool, &str, String)> = Vec::new();
        for job in children {
            let uid = job.uid().unwrap_or_default();
            let listed = active.iter().any(|r| r.uid.as_deref() == Some(uid.as_str()));
            match finished(job) {
                None if !listed => {
                    active.push(reference(job));
                    changed = true;
                }
                Some(condition) if listed => {
                    active.retain(|r| r.uid.as_deref() != Some(uid.as_str()));
                    let note = format!("Saw completed job: {}, condition: {condition}", job.name_any());
                    events.push((false, "SawCompletedJob", note));
                    changed = true;
                }
                _ => {}
            }
            if finished(job) == Some("Complete")
                && let Some(done) = job.status.as_ref().and_then(|s| s.completion_time.clone())
                && status.last_successful_time.as_ref().is_none_or(|t| t.0 < done.0)
            {
                status.last_successful_time = Some(done);
                changed = true;
            }
        }
        // Active Jobs the informer does not know: gone, unless the API still has them.
        let mut kept = Vec::new();
        for r in active {
            if r.uid.as_ref().is_some_and(|u| child_uids.contains(u)) {
                kept.push(r);
                continue;
            }
            let name = r.name.clone().unwrap_or_default();
            match jobs_api.get_opt(&name).await? {
                Some(j) if j.uid() == r.uid => kept.push(r),
                _ => {
                    events.push((false, "MissingJob", format!("Active job went missing: {name}")));
                    changed = true;
                }
            }
        }
        status.active = (!kept.is_empty()).then_some(kept);
        for (warning, reason, note) in events {
            self.event(cj, warning, reason, note).await;
        }

        if cj.metadata.deletion_timestamp.is_some() {
            return Ok((None, changed));
        }
        let spec = cj.spec.clone();
        let tz = match time_zone(cj) {
            Ok(tz) => tz,
            Err(e) => {
                let name = spec.time_zone.clone().unwrap_or_default();
                self.event(cj, true, "UnknownTimeZone", format!("invalid timeZone: {name:?}: {e}")).await;
                return Ok((None, changed));
            }
        };
        let sched = match Schedule::parse(&spec.schedule) {
            Ok(s) => s,
            Err(e) => {
                let note = format!("unparseable schedule: {:?} : {e}", spec.schedule);
                self.event(cj, true, "UnparseableSchedule", note).await;
                return Ok((None, changed));
            }
        };
        if spec.suspend == Some(true) {
            return Ok((None, changed));
        }
        let requeue = next_schedule_in(cj, now, &sched, &tz);
        let scheduled = match most_recent_schedule_time(cj, now, &sched, &tz, true) {
            Ok((_, scheduled, missed)) => {
                if missed == Missed::Many {
                    let note = "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew";
                    self.event(cj, true, "TooManyMissedTimes", note.into()).await;
                }
                scheduled
            }
            Err(e) => {
                let note = format!("unparseable schedule: {:?} : {e}", spec.schedule);
                self.event(cj, true, "UnparseableSchedule", note).await;
                return Ok((None, changed));
            }
        };
        let Some(scheduled) = scheduled else { return Ok((requeue, changed)) };
        if let Some(sds) = spec.starting_deadline_seconds
            && scheduled.as_second() + sds < now.as_second()
        {
            let at = scheduled.to_zoned(tz.clone()).strftime("%a, %d %b %Y %H:%M:%S %z").to_string();
            self.event(cj, true, "MissSchedule", format!("Missed scheduled time to start a job: {at}")).await;
            return Ok((requeue, changed));
        }
        let name = job_name(&cj.name_any(), scheduled);
        let status = cj.status.get_or_insert_default();
        let active = status.active.clone().unwrap_or_default();
        let already = active.iter().any(|r| r.name.as_deref() == Some(name.as_str()))
            || status.last_schedule_time.as_ref().is_some_and(|t| t.0 == scheduled);
        if already {
            return Ok((requeue, changed));
        }
        match spec.concurrency_policy.as_deref() {
            Some("Forbid") if !active.is_empty() => {
                let note = "Not starting job because prior execution is running and concurrency policy is Forbid";
                self.event(cj, false, "JobAlreadyActive", note.into()).await;
                return Ok((requeue, changed));
            }
            Some("Replace") => {
                for r in &active {
                    let job_name = r.name.clone().unwrap_or_default();
                    delete_job(jobs_api, &job_name).await?;
                    self.event(cj, false, "SuccessfulDelete", format!("Deleted job {job_name}")).await;
                    let status = cj.status.get_or_insert_default();
                    status.active.get_or_insert_default().retain(|x| x.uid != r.uid);
                    changed = true;
                }
            }
            _ => {}
        }
        let job = job_from_template(cj, scheduled, &tz, &name);
        let created = match jobs_api.create(&PostParams::default(), &job).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Made by an earlier sync whose status write was lost: the informer
                // brings it into status.active.
                tracing::debug!(cronjob = %cj.name_any(), job = %name, "job already exists");
                return Ok((requeue, changed));
            }
            Err(e) => {
                self.event(cj, true, "FailedCreate", format!("Error creating job: {e}")).await;
                return Err(e.into());
            }
        };
        self.event(cj, false, "SuccessfulCreate", format!("Created job {}", created.name_any())).await;
        let status = cj.status.get_or_insert_default();
        status.active.get_or_insert_default().push(reference(&created));
        status.last_schedule_time = Some(Time(scheduled));
        Ok((requeue, true))
    }

    /// Deletes the oldest finished Jobs beyond successfulJobsHistoryLimit and
    /// failedJobsHistoryLimit.
    async fn cleanup_finished(&self, cj: &mut CronJob, children: &[Arc<Job>], jobs_api: &Api<Job>) -> bool {
        let spec = cj.spec.clone();
        let mut changed = false;
        for (kind, limit) in
            [("Complete", spec.successful_jobs_history_limit), ("Failed", spec.failed_jobs_history_limit)]
        {
            let Some(limit) = limit else { continue };
            let mut done: Vec<&Arc<Job>> = children
                .iter()
                .filter(|j| finished(j) == Some(kind) && j.metadata.deletion_timestamp.is_none())
                .collect();
            let excess = done.len().saturating_sub(limit.max(0) as usize);
            if excess == 0 {
                continue;
            }
            // Oldest start first; never-started last; names break ties.
            done.sort_by_key(|j| {
                let start = j.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
                (start.is_none(), start, j.name_any())
            });
            for job in done.into_iter().take(excess) {
                match delete_job(jobs_api, &job.name_any()).await {
                    Ok(()) => {
                        self.event(cj, false, "SuccessfulDelete", format!("Deleted job {}", job.name_any())).await;
                        let uid = job.uid();
                        if let Some(active) = cj.status.get_or_insert_default().active.as_mut() {
                            active.retain(|r| r.uid != uid);
                        }
                        changed = true;
                    }
                    Err(error) => {
                        self.event(cj, true, "FailedDelete", format!("Deleted job: {error}")).await;
                    }
                }
            }
        }
        changed
    }
}

async fn delete_job(api: &Api<Job>, name: &str) -> Result<(), Error> {
    let params = DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..Default::default() };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// The Job for one schedule time: the template's labels, annotations and spec, the
/// scheduled time (RFC 3339 in the CronJob's zone), the CronJob as controller.
pub fn job_from_template(cj: &CronJob, scheduled: Timestamp, tz: &TimeZone, name: &str) -> Job {
    let template = cj.spec.job_template.clone();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let at = scheduled.to_zoned(tz.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();
    annotations.insert(SCHEDULED_TIMESTAMP.into(), at.replace("+00:00", "Z"));
    let owner = OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: cj.name_any(),
        uid: cj.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: cj.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(template.spec.unwrap_or_default()),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cronjob(schedule: &str, created: &str, last: Option<&str>, deadline: Option<i64>) -> CronJob {
        serde_json::from_value(json!({
            "metadata": {"name": "cj", "namespace": "ns", "uid": "u", "creationTimestamp": created},
            "spec": {"schedule": schedule, "startingDeadlineSeconds": deadline, "timeZone": "Europe/Berlin",
                "jobTemplate": {"metadata": {"labels": {"app": "x"}}, "spec": {"template": {}}}},
            "status": {"lastScheduleTime": last},
        }))
        .unwrap()
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn most_recent_time_and_missed_counts_with_a_driven_clock() {
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        let every_minute = Schedule::parse("* * * * *").unwrap();
        let cj = cronjob("* * * * *", "2026-05-01T10:00:30Z", None, None);
        let at = |now: &str| most_recent_schedule_time(&cj, ts(now), &every_minute, &tz, true).unwrap();
        assert_eq!(at("2026-05-01T10:00:50Z"), (ts("2026-05-01T10:00:30Z"), None, Missed::None));
        assert_eq!(at("2026-05-01T10:01:10Z").1, Some(ts("2026-05-01T10:01:00Z")));
        let (_, recent, missed) = at("2026-05-01T10:30:10Z");
        assert_eq!((recent, missed), (Some(ts("2026-05-01T10:30:00Z")), Missed::Few));
        let (_, recent, missed) = at("2026-05-01T13:00:00Z");
        assert_eq!((recent, missed), (Some(ts("2026-05-01T13:00:00Z")), Missed::Many));
        // A starting deadline bounds how far back schedules are looked for.
        let late = cronjob("* * * * *", "2026-05-01T10:00:30Z", None, Some(200));
        let (_, _, missed) =
            most_recent_schedule_time(&late, ts("2026-05-01T13:00:00Z"), &every_minute, &tz, true).unwrap();
        assert_eq!(missed, Missed::Few);
        assert_eq!(
            next_schedule_in(&cj, ts("2026-05-01T10:00:50Z"), &every_minute, &tz),
            Some(Duration::from_millis(10_100))
        );
    }

    #[test]
    fn daily_schedule_in_a_zone_across_the_spring_change() {
        // 02:30 Berlin does not exist on 29 March 2026: the run after the 28th is the 30th.
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        let sched = Schedule::parse("30 2 * * *").unwrap();
        let cj = cronjob("30 2 * * *", "2026-03-27T00:00:00Z", Some("2026-03-28T01:30:00Z"), None);
        let (_, recent, _) = most_recent_schedule_time(&cj, ts("2026-03-29T12:00:00Z"), &sched, &tz, true).unwrap();
        assert_eq!(recent, None);
        let (_, recent, _) = most_recent_schedule_time(&cj, ts("2026-03-30T00:31:00Z"), &sched, &tz, true).unwrap();
        assert_eq!(recent, Some(ts("2026-03-30T00:30:00Z")));
    }

    #[test]
    fn jobs_are_named_by_minute_and_carry_the_zoned_schedule_time() {
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        let cj = cronjob("@hourly", "2026-05-01T10:00:00Z", None, None);
        let at = ts("2026-05-01T11:00:00Z");
        assert_eq!(job_name("cj", at), format!("cj-{}", at.as_second() / 60));
        let job = job_from_template(&cj, at, &tz, "cj-1");
        let annotations = job.metadata.annotations.unwrap();
        assert_eq!(annotations[SCHEDULED_TIMESTAMP], "2026-05-01T13:00:00+02:00");
        assert_eq!(job.metadata.labels.unwrap()["app"], "x");
        assert_eq!(job.metadata.owner_references.unwrap()[0].kind, "CronJob");
    }
}
