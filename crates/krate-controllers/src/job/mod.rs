//! The Job controller (upstream's pkg/controller/job): runs a Job's pods to completion
//! (NonIndexed or Indexed), replaces failed ones with exponential back-off, fails the
//! Job by backoffLimit, backoffLimitPerIndex/maxFailedIndexes, podFailurePolicy or
//! activeDeadlineSeconds, completes it by completions or successPolicy, suspends and
//! resumes it. Pods are tracked with the batch.kubernetes.io/job-tracking finalizer:
//! a finished pod is first recorded in status.uncountedTerminatedPods, then its
//! finalizer removed, then it is counted, so no pod is counted twice or lost.

mod backoff;
mod conditions;
mod indexes;
mod pods;
mod policy;
mod sync;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;

use crate::{Clients, Context, Error};

pub use pods::{COMPLETION_INDEX, TRACKING_FINALIZER};

const CONTROLLER: &str = "job";
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);
/// How many of a Job's replaced resourceVersions are remembered.
const OVERWRITTEN_KEPT: usize = 8;

/// Back-off between pod creations after failures (upstream's DefaultJobPodFailureBackOff
/// and MaxJobPodFailureBackOff).
#[derive(Clone, Debug)]
pub struct Tuning {
    pub pod_failure_backoff: Duration,
    pub max_pod_failure_backoff: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { pod_failure_backoff: Duration::from_secs(10), max_pod_failure_backoff: Duration::from_secs(600) }
    }
}

/// What the controller expects its informers to show soon, per Job uid (upstream's
/// expectations): pods it created, pods it deleted, finalizers it removed. Until
/// creations and deletions are seen, the Job's pods are not managed again, so a lagging
/// informer never causes duplicates.
#[derive(Default)]
struct Expected {
    /// When the oldest unmet expectation was set: after EXPECTATIONS_TIMEOUT they are
    /// given up, as upstream does, in case a watch event was never seen.
    since: Option<Instant>,
    created: HashSet<String>,
    deleted: HashSet<String>,
    unfinalized: HashSet<String>,
}

pub(crate) struct Shared {
    clients: Clients,
    pods: Store<Pod>,
    jobs: Store<Job>,
    events: crate::events::Events,
    tuning: Tuning,
    expected: Mutex<HashMap<String, Expected>>,
    backoffs: Mutex<HashMap<String, backoff::Record>>,
    /// Job uid → the resourceVersions our latest status writes replaced, to skip syncing
    /// from a copy the informer has not refreshed yet.
    overwritten: Mutex<HashMap<String, VecDeque<String>>>,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("job-controller");
    let jobs = ctx.informers.get::<Job>();
    let pods = ctx.informers.get::<Pod>();
    let events = crate::events::Events::new(clients.write.clone(), "job-controller");
    let shared = Arc::new(Shared {
        clients,
        pods: pods.store(),
        jobs: jobs.store(),
        events,
        tuning: ctx.settings.job.clone(),
        expected: Mutex::default(),
        backoffs: Mutex::default(),
        overwritten: Mutex::default(),
    });
    let orphans = release_orphans(shared.clone(), pods.subscribe(), jobs.clone());
    let controller = Controller::for_shared_stream(jobs.subscribe(), jobs.store())
        .owns_shared_stream(pods.subscribe())
        .run(
            |job, shared: Arc<Shared>| async move {
                let result = shared.sync(&job).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |job, error: &Error, _| {
                let conflict = matches!(error, Error::Api(kube::Error::Api(s)) if s.code == 409);
                if !conflict {
                    tracing::warn!(controller = CONTROLLER, job = %job.name_any(), %error, "sync failed; retrying");
                }
                Action::requeue(Duration::from_millis(if conflict { 200 } else { 2000 }))
            },
            shared,
        )
        .for_each(|_| futures::future::ready(()));
    futures::future::join(controller, orphans).await;
}

/// Pods still holding the tracking finalizer whose Job is gone or finished lose it
/// (upstream's orphan pod handling), so deleting a Job never leaves pods stuck.
async fn release_orphans(
    shared: Arc<Shared>,
    pods: impl futures::Stream<Item = Arc<Pod>> + Send,
    jobs: krate_client::Informer<Job>,
) {
    jobs.ready().await;
    let mut pods = std::pin::pin!(pods);
    while let Some(pod) = pods.next().await {
        if !pods::has_finalizer(&pod) {
            continue;
        }
        let owner = pod.owner_references().iter().find(|o| o.controller == Some(true) && o.kind == "Job");
        let job = owner.and_then(|o| {
            let key = ObjectRef::new(&o.name).within(&pod.namespace().unwrap_or_default());
            shared.jobs.get(&key).filter(|j| j.metadata.uid.as_deref() == Some(o.uid.as_str()))
        });
        let release = match &job {
            None => true,
            Some(job) => {
                conditions::is_finished(job) && (pods::is_terminal(&pod) || pod.metadata.deletion_timestamp.is_some())
            }
        };
        if release && let Err(error) = shared.remove_finalizer(&pod).await {
            tracing::debug!(pod = %pod.name_any(), %error, "removing the job-tracking finalizer of an orphan pod failed");
        }
    }
}

impl Shared {
    /// The pods a Job controls.
    fn pods_of(&self, job_uid: &str) -> Vec<Arc<Pod>> {
        let owned = |p: &Arc<Pod>| p.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == job_uid);
        self.pods.state().into_iter().filter(owned).collect()
    }

    /// Whether the Job's pods were all seen as created/deleted; also forgets what was
    /// seen and returns the pods whose finalizer removal is still on its way.
    fn observe(&self, job_uid: &str, pods: &[Arc<Pod>]) -> (bool, HashSet<String>) {
        let mut expected = self.expected.lock();
        let Some(e) = expected.get_mut(job_uid) else { return (true, HashSet::new()) };
        let by_name: HashMap<&str, &Pod> = pods.iter().map(|p| (pods::name(p), p.as_ref())).collect();
        let by_uid: HashMap<&str, &Pod> = pods.iter().map(|p| (pods::uid(p), p.as_ref())).collect();
        e.created.retain(|n| !by_name.contains_key(n.as_str()));
        e.deleted.retain(|u| by_uid.get(u.as_str()).is_some_and(|p| p.metadata.deletion_timestamp.is_none()));
        e.unfinalized.retain(|u| by_uid.get(u.as_str()).is_some_and(|p| pods::has_finalizer(p)));
        let met = e.created.is_empty() && e.deleted.is_empty();
        if met {
            e.since = None;
        } else if e.since.is_some_and(|t| t.elapsed() > EXPECTATIONS_TIMEOUT) {
            tracing::warn!(job_uid, "pod creations or deletions never observed; giving up waiting for them");
            e.created.clear();
            e.deleted.clear();
            e.since = None;
            return (true, e.unfinalized.clone());
        }
        (met, e.unfinalized.clone())
    }

    fn expect(&self, job_uid: &str, f: impl FnOnce(&mut Expected)) {
        let mut expected = self.expected.lock();
        let e = expected.entry(job_uid.to_string()).or_default();
        e.since.get_or_insert_with(Instant::now);
        f(e);
    }

    /// Whether `rv` is a version of the Job our own status writes have replaced.
    fn is_stale(&self, job_uid: &str, rv: Option<&str>) -> bool {
        let overwritten = self.overwritten.lock();
        rv.is_some_and(|rv| overwritten.get(job_uid).is_some_and(|old| old.iter().any(|o| o == rv)))
    }

    fn replaced(&self, job_uid: &str, rv: String) {
        let mut overwritten = self.overwritten.lock();
        let old = overwritten.entry(job_uid.to_string()).or_default();
        old.push_back(rv);
        if old.len() > OVERWRITTEN_KEPT {
            old.pop_front();
        }
    }

    fn forget(&self, job_uid: &str) {
        self.expected.lock().remove(job_uid);
        self.backoffs.lock().remove(job_uid);
        self.overwritten.lock().remove(job_uid);
    }

    async fn remove_finalizer(&self, pod: &Pod) -> Result<(), kube::Error> {
        let api: Api<Pod> = Api::namespaced(self.clients.write.clone(), &pod.namespace().unwrap_or_default());
        let kept: Vec<&String> = pod.finalizers().iter().filter(|f| *f != TRACKING_FINALIZER).collect();
        // The resourceVersion makes this a compare-and-swap of the finalizer list.
        let patch = serde_json::json!({"metadata": {"finalizers": kept, "resourceVersion": pod.resource_version()}});
        match api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn event(&self, job: &Job, warning: bool, reason: &str, note: String) {
        if warning { self.events.warning(job, reason, note).await } else { self.events.normal(job, reason, note).await }
    }
}
