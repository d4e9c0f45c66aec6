//! The CronJob controller through the real API server. Schedule maths (DST, missed
//! times) is unit-tested with a driven clock; here time is driven through the status:
//! a lastScheduleTime minutes ago makes the current minute due at once, so nothing
//! waits for the wall clock.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use krate_testkit::{TestCluster, eventually};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

async fn cluster() -> (TestCluster, kube::Client) {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["cronjob", "job"]);
    cluster.simulated_nodes(1).await;
    let client = cluster.admin().await;
    (cluster, client)
}

fn cronjob(name: &str, extra: Value, run_for: Option<&str>) -> CronJob {
    let annotations = run_for.map_or(json!({}), |r| json!({"sim.krate.dev/run-for": r}));
    let mut spec = json!({
        "schedule": "* * * * *",
        "jobTemplate": {"metadata": {"labels": {"from": name}}, "spec": {"template": {
            "metadata": {"annotations": annotations},
            "spec": {"nodeName": "sim-node-0", "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// Makes the CronJob look as if it last ran `minutes` ago, so the current minute is due.
async fn last_ran_minutes_ago(cronjobs: &Api<CronJob>, name: &str, minutes: i64) {
    let at = Timestamp::from_second(Timestamp::now().as_second() - minutes * 60).unwrap();
    let patch = json!({"status": {"lastScheduleTime": at.to_string()}});
    cronjobs.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

async fn jobs_from(client: &kube::Client, name: &str) -> Vec<Job> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.list(&ListParams::default().labels(&format!("from={name}"))).await.unwrap().items
}

async fn reasons(client: &kube::Client, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap().items;
    list.into_iter().filter(|e| e.involved_object.name.as_deref() == Some(name)).filter_map(|e| e.reason).collect()
}

#[tokio::test]
async fn due_schedule_creates_a_job_named_by_minute_in_the_time_zone() {
    let (_cluster, client) = cluster().await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let cj = cronjob("kolkata", json!({"timeZone": "Asia/Kolkata"}), Some("0"));
    cronjobs.create(&PostParams::default(), &cj).await.unwrap();
    last_ran_minutes_ago(&cronjobs, "kolkata", 3).await;
    let job = eventually("a job", WAIT, || async { jobs_from(&client, "kolkata").await.into_iter().next() }).await;
    let stamp = job.annotations()["batch.kubernetes.io/cronjob-scheduled-timestamp"].clone();
    assert!(stamp.ends_with("+05:30"), "{stamp}");
    let scheduled: Timestamp = stamp.parse().unwrap();
    assert_eq!(scheduled.as_second() % 60, 0);
    assert_eq!(job.name_any(), format!("kolkata-{}", scheduled.as_second() / 60));
    let owner = &job.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("CronJob", Some(true)));

    // The Job completes: it leaves status.active and sets lastSuccessfulTime.
    let cj = eventually("lastSuccessfulTime", WAIT, || async {
        let cj = cronjobs.get("kolkata").await.unwrap();
        let status = cj.status.clone()?;
        (status.last_successful_time.is_some() && status.active.unwrap_or_default().is_empty()).then_some(cj)
    })
    .await;
    assert_eq!(cj.status.unwrap().last_schedule_time.unwrap().0, scheduled);
    let seen = reasons(&client, "kolkata").await;
    assert!(
        seen.contains(&"SuccessfulCreate".to_string()) && seen.contains(&"SawCompletedJob".to_string()),
        "{seen:?}"
    );
}

/// A long-running Job the CronJob owns, as if an earlier schedule made it.
async fn earlier_job(client: &kube::Client, cj: &CronJob) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let mut job: Job = serde_json::from_value(json!({"metadata": {"name": format!("{}-earlier", cj.name_any()),
        "labels": {"from": cj.name_any()}, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
        "name": cj.name_any(), "uid": cj.uid().unwrap(), "controller": true}]}}))
    .unwrap();
    job.spec = cj.spec.job_template.spec.clone();
    jobs.create(&PostParams::default(), &job).await.unwrap();
}

#[tokio::test]
async fn concurrency_policy_forbid_and_replace() {
    let (_cluster, client) = cluster().await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    for policy in ["Forbid", "Replace"] {
        let name = policy.to_lowercase();
        let cj = cronjobs
            .create(&PostParams::default(), &cronjob(&name, json!({"concurrencyPolicy": policy}), None))
            .await
            .unwrap();
        earlier_job(&client, &cj).await;
        eventually("the earlier job active", WAIT, || async {
            let status = cronjobs.get(&name).await.unwrap().status?;
            (status.active?.len() == 1).then_some(())
        })
        .await;
        last_ran_minutes_ago(&cronjobs, &name, 3).await;
        if policy == "Forbid" {
            eventually("JobAlreadyActive", WAIT, || async {
                reasons(&client, &name).await.contains(&"JobAlreadyActive".to_string()).then_some(())
            })
            .await;
            assert_eq!(jobs_from(&client, &name).await.len(), 1);
        } else {
            let active = eventually("the new job replaces the earlier", WAIT, || async {
                let active = cronjobs.get(&name).await.unwrap().status?.active?;
                (active.len() == 1 && active[0].name.as_deref() != Some("replace-earlier")).then_some(active)
            })
            .await;
            assert!(active[0].name.as_ref().unwrap().starts_with("replace-"));
            let seen = reasons(&client, &name).await;
            assert!(seen.contains(&"SuccessfulDelete".to_string()), "{seen:?}");
            let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
            let earlier = jobs.get_opt("replace-earlier").await.unwrap();
            assert!(earlier.is_none_or(|j| j.metadata.deletion_timestamp.is_some()));
        }
    }
}

#[tokio::test]
async fn history_limits_keep_the_newest_finished_jobs_and_suspend_stops_scheduling() {
    let (_cluster, client) = cluster().await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let spec = json!({"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 0, "suspend": true});
    let cj = cronjobs.create(&PostParams::default(), &cronjob("tidy", spec, Some("0"))).await.unwrap();
    // Suspended: a due time makes no Job.
    last_ran_minutes_ago(&cronjobs, "tidy", 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(jobs_from(&client, "tidy").await.is_empty());

    // Three finished Jobs of this CronJob: only the newest successful one stays.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        let mut job: Job = serde_json::from_value(json!({"metadata": {"name": format!("tidy-old-{i}"),
            "labels": {"from": "tidy"}, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
            "name": "tidy", "uid": cj.uid().unwrap(), "controller": true}]}}))
        .unwrap();
        job.spec = cj.spec.job_template.spec.clone();
        jobs.create(&PostParams::default(), &job).await.unwrap();
        eventually("job complete", WAIT, || async {
            let j = jobs.get_opt(&format!("tidy-old-{i}")).await.unwrap()?;
            j.status?.completion_time.map(|_| ())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let left = eventually("one job left", WAIT, || async {
        let left: Vec<String> = jobs_from(&client, "tidy")
            .await
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .map(|j| j.name_any())
            .collect();
        (left.len() == 1).then_some(left)
    })
    .await;
    assert_eq!(left, ["tidy-old-2"]);
}
