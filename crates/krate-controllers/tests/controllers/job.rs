//! The Job and TTL-after-finished controllers through the real API server, with pods
//! run by simulated nodes (bound by spec.nodeName until the scheduler lands; their
//! annotations say how long they run and how they exit).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const NODE: &str = "sim-node-0";

async fn cluster() -> (TestCluster, kube::Client) {
    let mut cluster = TestCluster::start().await;
    cluster.controllers_with(&["job", "ttl-after-finished"], |s| {
        s.job.pod_failure_backoff = Duration::from_millis(200);
        s.job.max_pod_failure_backoff = Duration::from_secs(1);
    });
    cluster.simulated_nodes(1).await;
    let client = cluster.admin().await;
    (cluster, client)
}

/// A Job whose pods run on the simulated node with these annotations.
fn job(name: &str, spec: Value, annotations: Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({
        "metadata": {"annotations": annotations},
        "spec": {"nodeName": NODE, "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
    });
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn create(client: &kube::Client, job: &Job) -> Api<Job> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), job).await.unwrap();
    jobs
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == type_ && c.status == "True")?;
    Some((c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

/// Waits for the Job to have the condition, returning the Job.
async fn until_condition(jobs: &Api<Job>, name: &str, type_: &str) -> Job {
    eventually(&format!("job {name} {type_}"), WAIT, || async {
        let job = jobs.get(name).await.unwrap();
        condition(&job, type_).map(|_| job)
    })
    .await
}

async fn pods_of(client: &kube::Client, job: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await.unwrap().items
}

async fn event_reasons(client: &kube::Client, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap().items;
    list.into_iter().filter(|e| e.involved_object.name.as_deref() == Some(name)).filter_map(|e| e.reason).collect()
}

#[tokio::test]
async fn completions_with_parallelism_track_pods_by_finalizer() {
    let (_cluster, client) = cluster().await;
    let spec = json!({"completions": 4, "parallelism": 2});
    let jobs = create(&client, &job("pi", spec, json!({"sim.krate.dev/run-for": "1"}))).await;

    // Never more than parallelism at once.
    let pods = eventually("two pods", WAIT, || async {
        let pods = pods_of(&client, "pi").await;
        (!pods.is_empty()).then_some(pods)
    })
    .await;
    assert!(pods.len() <= 2, "{} pods at once", pods.len());
    let pod = &pods[0];
    assert!(pod.metadata.finalizers.as_ref().unwrap().contains(&"batch.kubernetes.io/job-tracking".to_string()));
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Job", Some(true)));
    assert!(pod.metadata.name.as_ref().unwrap().starts_with("pi-"));

    let done = until_condition(&jobs, "pi", "Complete").await;
    let status = done.status.clone().unwrap();
    assert_eq!(status.succeeded, Some(4));
    assert_eq!(status.active.unwrap_or(0), 0);
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    assert_eq!(condition(&done, "SuccessCriteriaMet").unwrap().0, "CompletionsReached");
    let uncounted = status.uncounted_terminated_pods.unwrap_or_default();
    assert!(uncounted.succeeded.unwrap_or_default().is_empty());
    let pods = pods_of(&client, "pi").await;
    assert_eq!(pods.len(), 4);
    assert!(
        pods.iter().all(|p| !p
            .metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .iter()
            .any(|f| f.contains("job-tracking")))
    );
    let reasons = eventually("events", WAIT, || async {
        let r = event_reasons(&client, "pi").await;
        r.contains(&"Completed".to_string()).then_some(r)
    })
    .await;
    assert!(reasons.contains(&"SuccessfulCreate".to_string()));
}

#[tokio::test]
async fn backoff_limit_fails_the_job_and_ttl_deletes_it() {
    let (_cluster, client) = cluster().await;
    let spec = json!({"completions": 1, "backoffLimit": 1, "ttlSecondsAfterFinished": 1});
    let annotations = json!({"sim.krate.dev/run-for": "0", "sim.krate.dev/exit-code": "3"});
    let jobs = create(&client, &job("flaky", spec, annotations)).await;
    let failed = until_condition(&jobs, "flaky", "Failed").await;
    let (reason, message) = condition(&failed, "Failed").unwrap();
    assert_eq!(reason, "BackoffLimitExceeded");
    assert_eq!(message, "Job has reached the specified backoff limit");
    assert_eq!(condition(&failed, "FailureTarget").unwrap().0, "BackoffLimitExceeded");
    assert_eq!(failed.status.as_ref().unwrap().failed, Some(2));
    // ttlSecondsAfterFinished: deleted (Foreground) a second after it finished.
    eventually("job deleted by TTL", WAIT, || async {
        let job = jobs.get_opt("flaky").await.unwrap();
        job.is_none_or(|j| j.metadata.deletion_timestamp.is_some()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn indexed_job_with_backoff_limit_per_index_and_max_failed_indexes() {
    let (_cluster, client) = cluster().await;
    let spec = json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed",
        "backoffLimitPerIndex": 1, "maxFailedIndexes": 1});
    // Index 1 always fails; the others succeed.
    let annotations = json!({"sim.krate.dev/run-for": "1", "sim.krate.dev/exit-codes-by-index": "1=2"});
    let jobs = create(&client, &job("idx", spec, annotations)).await;
    let pod = eventually("index 2's pod", WAIT, || async {
        let pods = pods_of(&client, "idx").await;
        pods.into_iter()
            .find(|p| p.metadata.labels.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"] == "2")
    })
    .await;
    assert!(pod.metadata.name.as_ref().unwrap().starts_with("idx-2-"));
    assert_eq!(pod.spec.as_ref().unwrap().hostname.as_deref(), Some("idx-2"));
    assert_eq!(pod.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"], "2");
    let env = pod.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
    assert!(env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX"));

    // One failed index is allowed: the Job ends Failed with FailedIndexes once the rest succeed.
    let failed = until_condition(&jobs, "idx", "Failed").await;
    assert_eq!(condition(&failed, "Failed").unwrap().0, "FailedIndexes");
    let status = failed.status.unwrap();
    assert_eq!(status.failed_indexes.as_deref(), Some("1"));
    assert_eq!(status.completed_indexes.as_deref(), Some("0,2-3"));
    assert_eq!(status.succeeded, Some(3));
    assert_eq!(status.failed, Some(2), "index 1 ran twice (backoffLimitPerIndex 1)");
    let retried = pods_of(&client, "idx").await.into_iter().filter(|p| {
        p.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"] == "1"
            && p.metadata
                .annotations
                .as_ref()
                .unwrap()
                .get("batch.kubernetes.io/job-index-failure-count")
                .map(String::as_str)
                == Some("1")
    });
    assert_eq!(retried.count(), 1);

    // Two failing indexes with maxFailedIndexes 1: MaxFailedIndexesExceeded.
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
        "backoffLimitPerIndex": 0, "maxFailedIndexes": 1});
    let annotations = json!({"sim.krate.dev/run-for": "1", "sim.krate.dev/exit-codes-by-index": "0=1,1=1"});
    let jobs = create(&client, &job("idx-max", spec, annotations)).await;
    let failed = until_condition(&jobs, "idx-max", "Failed").await;
    let (reason, message) = condition(&failed, "Failed").unwrap();
    assert_eq!(reason, "MaxFailedIndexesExceeded");
    assert_eq!(message, "Job has exceeded the specified maximal number of failed indexes");
}

#[tokio::test]
async fn pod_failure_policy_fail_job_count_and_fail_index() {
    let (_cluster, client) = cluster().await;
    let rules = json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}},
    ]});
    // FailJob on exit code 42: the Job fails at once, whatever backoffLimit says.
    let spec = json!({"completions": 1, "backoffLimit": 6, "podFailurePolicy": rules});
    let annotations = json!({"sim.krate.dev/run-for": "0", "sim.krate.dev/exit-code": "42"});
    let jobs = create(&client, &job("fail-job", spec, annotations)).await;
    let failed = until_condition(&jobs, "fail-job", "Failed").await;
    let (reason, message) = condition(&failed, "Failed").unwrap();
    assert_eq!(reason, "PodFailurePolicy");
    assert!(message.starts_with("Container main for pod default/fail-job-"), "{message}");
    assert!(message.ends_with("failed with exit code 42 matching FailJob rule at index 0"), "{message}");
    assert_eq!(failed.status.unwrap().failed, Some(1));

    // Count on exit code 3: counted against backoffLimit as usual.
    let spec = json!({"completions": 1, "backoffLimit": 0, "podFailurePolicy": rules});
    let annotations = json!({"sim.krate.dev/run-for": "0", "sim.krate.dev/exit-code": "3"});
    let jobs = create(&client, &job("count", spec, annotations)).await;
    let failed = until_condition(&jobs, "count", "Failed").await;
    assert_eq!(condition(&failed, "Failed").unwrap().0, "BackoffLimitExceeded");

    // FailIndex on exit code 7: that index fails without retries; the others complete.
    // (FailIndex needs backoffLimitPerIndex.)
    let rules = json!({"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [7]}}]});
    let spec = json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 3,
        "podFailurePolicy": rules});
    let annotations = json!({"sim.krate.dev/run-for": "0", "sim.krate.dev/exit-codes-by-index": "0=7"});
    let jobs = create(&client, &job("fail-index", spec, annotations)).await;
    let failed = until_condition(&jobs, "fail-index", "Failed").await;
    assert_eq!(condition(&failed, "Failed").unwrap().0, "FailedIndexes");
    let status = failed.status.unwrap();
    assert_eq!((status.failed_indexes.as_deref(), status.completed_indexes.as_deref()), (Some("0"), Some("1")));
    assert_eq!(status.failed, Some(1));
}

#[tokio::test]
async fn pod_failure_policy_ignores_disruptions() {
    let (_cluster, client) = cluster().await;
    let rules = json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});
    let spec = json!({"completions": 1, "backoffLimit": 0, "podFailurePolicy": rules});
    let jobs = create(&client, &job("disrupted", spec, json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let first = eventually("a running pod", WAIT, || async {
        let p = pods_of(&client, "disrupted").await.into_iter().next()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;
    // As an eviction or preemption would: the pod fails with DisruptionTarget.
    let name = first.metadata.name.clone().unwrap();
    let status = json!({"status": {"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    // Ignored: not counted against backoffLimit 0, and replaced.
    eventually("a replacement pod", WAIT, || async {
        let all = pods_of(&client, "disrupted").await;
        (all.len() == 2).then_some(())
    })
    .await;
    let job = jobs.get("disrupted").await.unwrap();
    assert!(condition(&job, "Failed").is_none());
    assert_eq!(job.status.unwrap().failed.unwrap_or(0), 0);
}

#[tokio::test]
async fn active_deadline_fails_the_job_and_deletes_its_pods() {
    let (_cluster, client) = cluster().await;
    let spec = json!({"completions": 2, "parallelism": 2, "activeDeadlineSeconds": 2});
    let jobs = create(&client, &job("slow", spec, json!({}))).await;
    let failed = until_condition(&jobs, "slow", "Failed").await;
    let (reason, message) = condition(&failed, "Failed").unwrap();
    assert_eq!(
        (reason.as_str(), message.as_str()),
        ("DeadlineExceeded", "Job was active longer than specified deadline")
    );
    let status = failed.status.unwrap();
    assert_eq!((status.active.unwrap_or(0), status.failed), (0, Some(2)));
    eventually("pods removed", WAIT, || async { pods_of(&client, "slow").await.is_empty().then_some(()) }).await;
    assert!(event_reasons(&client, "slow").await.contains(&"DeadlineExceeded".to_string()));
}

#[tokio::test]
async fn suspend_deletes_pods_and_resume_starts_again() {
    let (_cluster, client) = cluster().await;
    let spec = json!({"completions": 2, "parallelism": 2, "suspend": true});
    let jobs = create(&client, &job("later", spec, json!({"sim.krate.dev/run-for": "1"}))).await;
    let suspended = until_condition(&jobs, "later", "Suspended").await;
    assert_eq!(condition(&suspended, "Suspended").unwrap().0, "JobSuspended");
    assert!(suspended.status.as_ref().unwrap().start_time.is_none());
    assert!(pods_of(&client, "later").await.is_empty());

    jobs.patch("later", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    let done = until_condition(&jobs, "later", "Complete").await;
    let suspended =
        done.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Suspended").cloned();
    let suspended = suspended.unwrap();
    assert_eq!((suspended.status.as_str(), suspended.reason.as_deref()), ("False", Some("JobResumed")));

    // Suspending a running Job deletes its active pods.
    let spec = json!({"completions": 1, "parallelism": 1});
    let jobs = create(&client, &job("paused", spec, json!({}))).await;
    eventually("a pod", WAIT, || async { (!pods_of(&client, "paused").await.is_empty()).then_some(()) }).await;
    jobs.patch("paused", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await.unwrap();
    until_condition(&jobs, "paused", "Suspended").await;
    eventually("pods removed", WAIT, || async { pods_of(&client, "paused").await.is_empty().then_some(()) }).await;
    eventually("Suspended and SuccessfulDelete events", WAIT, || async {
        let reasons = event_reasons(&client, "paused").await;
        (reasons.contains(&"Suspended".to_string()) && reasons.contains(&"SuccessfulDelete".to_string())).then_some(())
    })
    .await;
}

#[tokio::test]
async fn success_policy_completes_early_and_removes_the_rest() {
    let (_cluster, client) = cluster().await;
    // One pod at a time: index 0 succeeds, which the success policy deems enough.
    let spec = json!({"completions": 3, "parallelism": 1, "completionMode": "Indexed",
        "successPolicy": {"rules": [{"succeededIndexes": "0", "succeededCount": 1}]}});
    let j = job("leader", spec, json!({"sim.krate.dev/run-for": "1"}));
    let jobs = create(&client, &j).await;
    let done = until_condition(&jobs, "leader", "Complete").await;
    let (reason, message) = condition(&done, "Complete").unwrap();
    assert_eq!((reason.as_str(), message.as_str()), ("SuccessPolicy", "Matched rules at index 0"));
    assert_eq!(condition(&done, "SuccessCriteriaMet").unwrap().0, "SuccessPolicy");
    let status = done.status.unwrap();
    assert_eq!((status.completed_indexes.as_deref(), status.succeeded), (Some("0"), Some(1)));
}

#[tokio::test]
async fn pod_replacement_policy_failed_waits_for_terminating_pods() {
    let (_cluster, client) = cluster().await;
    // The pod lingers 3 s after deletion (sim.krate.dev/terminate-for) before failing.
    let spec = json!({"completions": 1, "podReplacementPolicy": "Failed"});
    let jobs = create(&client, &job("careful", spec, json!({"sim.krate.dev/terminate-for": "3"}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let first = eventually("a running pod", WAIT, || async {
        let p = pods_of(&client, "careful").await.into_iter().next()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;
    eventually("status.ready 1", WAIT, || async {
        let status = jobs.get("careful").await.unwrap().status?;
        (status.ready == Some(1) && status.active == Some(1)).then_some(())
    })
    .await;
    pods.delete(first.metadata.name.as_ref().unwrap(), &Default::default()).await.unwrap();
    let terminating = eventually("status.terminating 1", WAIT, || async {
        let job = jobs.get("careful").await.unwrap();
        (job.status.as_ref()?.terminating == Some(1)).then_some(job)
    })
    .await;
    assert_eq!(terminating.status.unwrap().active.unwrap_or(0), 0);
    assert_eq!(pods_of(&client, "careful").await.len(), 1, "no replacement while the pod terminates");
    // Once it has failed, it is replaced.
    eventually("a replacement", WAIT, || async {
        let all = pods_of(&client, "careful").await;
        all.iter().any(|p| p.metadata.uid != first.metadata.uid).then_some(())
    })
    .await;
    let job = jobs.get("careful").await.unwrap();
    assert_eq!(job.status.unwrap().failed, Some(1));
}

#[tokio::test]
async fn restarts_count_against_the_backoff_limit_with_restart_policy_on_failure() {
    let (_cluster, client) = cluster().await;
    let mut j = job(
        "restarts",
        json!({"completions": 1, "backoffLimit": 2}),
        json!({
        "sim.krate.dev/run-for": "0.2", "sim.krate.dev/exit-code": "1"}),
    );
    j.spec.as_mut().unwrap().template.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    let jobs = create(&client, &j).await;
    let failed = until_condition(&jobs, "restarts", "Failed").await;
    assert_eq!(condition(&failed, "Failed").unwrap().0, "BackoffLimitExceeded");
    eventually("BackoffLimitExceeded event", WAIT, || async {
        event_reasons(&client, "restarts").await.contains(&"BackoffLimitExceeded".to_string()).then_some(())
    })
    .await;
}
