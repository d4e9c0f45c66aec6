//! The Deployment controller (with the ReplicaSet controller) through the real API
//! server with simulated nodes: rollouts within maxSurge/maxUnavailable at every
//! observed moment, Recreate, the progress deadline, pause/resume, rollback with real
//! kubectl, revision history, proportional scaling, and upstream's events.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use krate_testkit::{TestCluster, eventually, merge_json, pod_ready};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

struct Fixture {
    _cluster: TestCluster,
    kubeconfig: std::path::PathBuf,
    deployments: Api<Deployment>,
    rss: Api<ReplicaSet>,
    pods: Api<Pod>,
    events: Api<Event>,
    node: String,
}

async fn fixture() -> Fixture {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["deployment", "replicaset"]);
    let node = cluster.simulated_nodes(1).await.remove(0);
    let client = cluster.admin().await;
    Fixture {
        kubeconfig: cluster.running.kubeconfig_path.clone(),
        _cluster: cluster,
        deployments: Api::namespaced(client.clone(), "default"),
        rss: Api::namespaced(client.clone(), "default"),
        pods: Api::namespaced(client.clone(), "default"),
        events: Api::namespaced(client, "default"),
        node,
    }
}

/// A Deployment of `replicas` pods on `node` whose pods get Ready `ready_after` seconds
/// after starting; `spec` is merged into its spec.
fn deployment(name: &str, replicas: i32, node: &str, ready_after: u32, spec: Value) -> Deployment {
    let mut d = json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {"sim.krate.dev/ready-after": ready_after.to_string()}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1"}]},
            },
        },
    });
    merge_json(&mut d["spec"], spec);
    serde_json::from_value(d).unwrap()
}

impl Fixture {
    async fn create(&self, d: Deployment) {
        self.deployments.create(&PostParams::default(), &d).await.unwrap();
    }

    async fn patch(&self, name: &str, patch: Value) {
        self.deployments.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    }

    async fn set_image(&self, name: &str, image: &str) {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
        self.patch(name, patch).await;
    }

    /// Waits until the rollout is complete as `kubectl rollout status` judges it.
    async fn complete(&self, name: &str) -> Deployment {
        match tokio::time::timeout(WAIT, self.complete_quietly(name)).await {
            Ok(d) => d,
            Err(_) => {
                // Show what the rollout looked like when the wait ran out.
                let d =
                    self.deployments.get(name).await.map(|d| (d.metadata.annotations, d.metadata.generation, d.status));
                let rss: Vec<_> = self
                    .rss
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|rs| (rs.metadata.name, rs.spec.map(|s| s.replicas), rs.status))
                    .collect();
                let pods: Vec<_> = self
                    .pods
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|p| (p.metadata.name, p.status.and_then(|s| s.phase)))
                    .collect();
                panic!("deployment {name} not complete:\n{d:#?}\nreplica sets: {rss:#?}\npods: {pods:?}");
            }
        }
    }

    async fn complete_quietly(&self, name: &str) -> Deployment {
        eventually(&format!("deployment {name} complete"), WAIT * 2, || async {
            let d = self.deployments.get(name).await.unwrap();
            let s = d.status.clone()?;
            let want = d.spec.as_ref()?.replicas?;
            let progressing = s.conditions.iter().flatten().find(|c| c.type_ == "Progressing")?;
            let done = s.observed_generation >= d.metadata.generation
                && s.updated_replicas == Some(want)
                && s.replicas == Some(want)
                && s.available_replicas == Some(want)
                && progressing.reason.as_deref() == Some("NewReplicaSetAvailable");
            done.then_some(d)
        })
        .await
    }

    async fn live_pods(&self, app: &str) -> Vec<Pod> {
        let list = self.pods.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap();
        list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
    }

    async fn replica_sets(&self, app: &str) -> Vec<ReplicaSet> {
        self.rss.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap().items
    }

    async fn event_messages(&self, reason: &str) -> Vec<String> {
        let list = self.events.list(&ListParams::default()).await.unwrap().items;
        list.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.message).collect()
    }

    /// Runs real kubectl (off the test's runtime thread, which also serves the API).
    async fn kubectl(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .await
            .expect("kubectl runs");
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn hash(p: &Pod) -> String {
    p.labels().get("pod-template-hash").cloned().unwrap_or_default()
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, String, String)> {
    let c = d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

#[tokio::test]
async fn rolling_update_stays_within_max_surge_and_max_unavailable() {
    let f = Arc::new(fixture().await);
    let strategy =
        json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}});
    f.create(deployment("web", 4, &f.node, 1, strategy)).await;
    let first = f.complete("web").await;
    assert_eq!(first.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("1"));
    assert_eq!(condition(&first, "Available").unwrap().1, "MinimumReplicasAvailable");
    let first_hash = hash(&f.live_pods("web").await[0]);
    let rs = f.rss.get(&format!("web-{first_hash}")).await.expect("the ReplicaSet is named after the template hash");
    assert_eq!(rs.annotations().get("deployment.kubernetes.io/desired-replicas").map(String::as_str), Some("4"));
    assert_eq!(rs.annotations().get("deployment.kubernetes.io/max-replicas").map(String::as_str), Some("5"));

    // Watch every moment of the rollout: never more than 4 + 1 pods, never fewer than 4 - 1 ready.
    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new((0usize, usize::MAX, 0usize)));
    let watcher = {
        let (f, done, seen) = (f.clone(), done.clone(), seen.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let pods = f.live_pods("web").await;
                let ready = pods.iter().filter(|p| pod_ready(p)).count();
                {
                    let mut s = seen.lock();
                    s.0 = s.0.max(pods.len());
                    s.1 = s.1.min(ready);
                    s.2 += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    f.set_image("web", "busybox:2").await;
    let second = f.complete("web").await;
    done.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    let (max_pods, min_ready, samples) = *seen.lock();
    assert!(samples > 10, "the rollout was observed ({samples} samples)");
    assert!(max_pods <= 5, "maxSurge 1: saw {max_pods} pods");
    assert!(min_ready >= 3, "maxUnavailable 1: saw only {min_ready} ready");

    assert_eq!(second.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("2"));
    let pods = f.live_pods("web").await;
    assert_eq!(pods.len(), 4);
    assert!(pods.iter().all(|p| hash(p) != first_hash), "every pod is of the new template");
    let old = f.rss.get(&format!("web-{first_hash}")).await.unwrap();
    assert_eq!(old.spec.unwrap().replicas, Some(0), "the old ReplicaSet is kept, scaled to zero");
    let scaled = f.event_messages("ScalingReplicaSet").await;
    assert!(
        scaled.iter().any(|m| m.starts_with("Scaled up replica set web-") && m.ends_with("from 0 to 1")),
        "{scaled:?}"
    );
    assert!(
        scaled.iter().any(|m| m.starts_with(&format!("Scaled down replica set web-{first_hash} from 4 to"))),
        "{scaled:?}"
    );
}

#[tokio::test]
async fn recreate_stops_old_pods_before_starting_new_ones() {
    let f = Arc::new(fixture().await);
    f.create(deployment("batch", 3, &f.node, 0, json!({"strategy": {"type": "Recreate"}}))).await;
    f.complete("batch").await;
    let old_hash = hash(&f.live_pods("batch").await[0]);
    let done = Arc::new(AtomicBool::new(false));
    let mixed = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (f, done, mixed) = (f.clone(), done.clone(), mixed.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let pods = f.live_pods("batch").await;
                let old = pods.iter().any(|p| hash(p) == old_hash);
                let new = pods.iter().any(|p| hash(p) != old_hash);
                if old && new {
                    mixed.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    f.set_image("batch", "busybox:2").await;
    f.complete("batch").await;
    done.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    assert!(!mixed.load(Ordering::SeqCst), "old and new pods never run together");
    assert_eq!(f.live_pods("batch").await.len(), 3);
}

#[tokio::test]
async fn progress_deadline_exceeded_and_min_ready_seconds() {
    let f = fixture().await;
    // Pods never get Ready: the rollout cannot progress.
    f.create(deployment("stuck", 2, &f.node, 100_000, json!({"progressDeadlineSeconds": 3}))).await;
    let d = eventually("ProgressDeadlineExceeded", WAIT, || async {
        let d = f.deployments.get("stuck").await.unwrap();
        (condition(&d, "Progressing")?.1 == "ProgressDeadlineExceeded").then_some(d)
    })
    .await;
    let (status, _, message) = condition(&d, "Progressing").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.starts_with("ReplicaSet \"stuck-") && message.ends_with("\" has timed out progressing."),
        "{message}"
    );
    let (status, reason, _) = condition(&d, "Available").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "MinimumReplicasUnavailable"));

    // minReadySeconds: Ready pods count as available only after it.
    f.create(deployment("patient", 2, &f.node, 0, json!({"minReadySeconds": 4}))).await;
    eventually("ready, not yet available", WAIT, || async {
        let s = f.deployments.get("patient").await.unwrap().status?;
        (s.ready_replicas == Some(2) && s.available_replicas.unwrap_or(0) == 0).then_some(())
    })
    .await;
    let started = tokio::time::Instant::now();
    f.complete("patient").await;
    assert!(started.elapsed() >= Duration::from_secs(2), "availability waited for minReadySeconds");
}

#[tokio::test]
async fn paused_deployments_do_not_roll_out_until_resumed() {
    let f = fixture().await;
    f.create(deployment("app", 2, &f.node, 0, json!({}))).await;
    f.complete("app").await;
    f.patch("app", json!({"spec": {"paused": true}})).await;
    f.set_image("app", "busybox:2").await;
    let d = eventually("DeploymentPaused", WAIT, || async {
        let d = f.deployments.get("app").await.unwrap();
        (condition(&d, "Progressing")?.1 == "DeploymentPaused").then_some(d)
    })
    .await;
    assert_eq!(
        condition(&d, "Progressing").unwrap(),
        ("Unknown".into(), "DeploymentPaused".into(), "Deployment is paused".into())
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(f.replica_sets("app").await.len(), 1, "no new ReplicaSet while paused");
    // Scaling still works while paused.
    f.patch("app", json!({"spec": {"replicas": 3}})).await;
    eventually("scaled while paused", WAIT, || async { (f.live_pods("app").await.len() == 3).then_some(()) }).await;

    f.patch("app", json!({"spec": {"paused": false}})).await;
    let d = f.complete("app").await;
    assert_eq!(f.replica_sets("app").await.len(), 2);
    assert_eq!(d.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("2"));
    assert!(
        f.live_pods("app")
            .await
            .iter()
            .all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("busybox:2"))
    );
}

#[tokio::test]
async fn kubectl_rollout_undo_returns_to_the_previous_replica_set() {
    let f = fixture().await;
    f.create(deployment("undo", 2, &f.node, 0, json!({}))).await;
    f.complete("undo").await;
    let first_hash = hash(&f.live_pods("undo").await[0]);
    f.set_image("undo", "busybox:2").await;
    f.complete("undo").await;
    let history = f.kubectl(&["rollout", "history", "deployment/undo"]).await;
    assert!(history.contains('1') && history.contains('2'), "{history}");

    f.kubectl(&["rollout", "undo", "deployment/undo"]).await;
    let d = f.complete("undo").await;
    assert_eq!(d.spec.unwrap().template.spec.unwrap().containers[0].image.as_deref(), Some("busybox:1"));
    assert_eq!(d.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"], "3");
    let pods = f.live_pods("undo").await;
    assert!(pods.iter().all(|p| hash(p) == first_hash), "the first ReplicaSet is reused");
    let rs = f.rss.get(&format!("undo-{first_hash}")).await.unwrap();
    assert_eq!(rs.annotations()["deployment.kubernetes.io/revision"], "3");
    assert_eq!(f.replica_sets("undo").await.len(), 2);
}

#[tokio::test]
async fn revision_history_limit_deletes_the_oldest_replica_sets() {
    let f = fixture().await;
    f.create(deployment("hist", 1, &f.node, 0, json!({"revisionHistoryLimit": 1}))).await;
    for image in ["busybox:2", "busybox:3", "busybox:4"] {
        f.complete("hist").await;
        f.set_image("hist", image).await;
    }
    f.complete("hist").await;
    let rss = eventually("history trimmed to one old ReplicaSet", WAIT, || async {
        let rss = f.replica_sets("hist").await;
        (rss.len() == 2).then_some(rss)
    })
    .await;
    let mut revisions: Vec<String> =
        rss.iter().map(|rs| rs.annotations()["deployment.kubernetes.io/revision"].clone()).collect();
    revisions.sort();
    assert_eq!(revisions, ["3", "4"]);
}

#[tokio::test]
async fn scaling_during_a_rollout_is_proportional() {
    let f = fixture().await;
    let strategy = json!({"strategy": {"rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}}});
    f.create(deployment("prop", 10, &f.node, 0, strategy)).await;
    f.complete("prop").await;
    let old_hash = hash(&f.live_pods("prop").await[0]);
    // The new pods never get Ready: the rollout stops at 10 old + 3 new.
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"sim.krate.dev/ready-after": "100000"}}}}});
    f.patch("prop", patch).await;
    let sizes = |rss: &[ReplicaSet]| -> (i32, i32) {
        let (mut old, mut new) = (0, 0);
        for rs in rss {
            let n = rs.spec.as_ref().unwrap().replicas.unwrap();
            if rs.labels()["pod-template-hash"] == old_hash { old += n } else { new += n }
        }
        (old, new)
    };
    eventually("rollout stuck at 10 + 3", WAIT, || async {
        let rss = f.replica_sets("prop").await;
        (sizes(&rss) == (10, 3)).then_some(())
    })
    .await;
    f.patch("prop", json!({"spec": {"replicas": 20}})).await;
    // 23 allowed, spread by share of 13: old round(10*23/13)=18, new round(3*23/13)=5.
    eventually("proportionally scaled to 18 + 5", WAIT, || async {
        let rss = f.replica_sets("prop").await;
        (sizes(&rss) == (18, 5)).then_some(())
    })
    .await;
}
