//! The disruption controller and the pods/eviction subresource through the real API
//! server, on simulated nodes: PodDisruptionBudget status from the pods and their
//! controllers' scale, evictions refused with 429 or allowed, and both
//! unhealthyPodEvictionPolicy values.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(40);

/// The admin client, without kube's default retry of 429s (which would retry a refused
/// eviction for minutes instead of showing it).
async fn client_without_retries(cluster: &TestCluster) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.running.kubeconfig_path).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

async fn cluster(controllers: &[&str]) -> (kube::Client, TestCluster, String) {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(controllers);
    let node = cluster.simulated_nodes(1).await.remove(0);
    (client_without_retries(&cluster).await, cluster, node)
}

async fn budget(client: &kube::Client, name: &str, spec: serde_json::Value) {
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    Api::<PodDisruptionBudget>::default_namespaced(client.clone()).create(&PostParams::default(), &pdb).await.unwrap();
}

/// Waits for the budget's status (for its current generation) to satisfy `f`.
async fn status_where(
    client: &kube::Client,
    name: &str,
    what: &str,
    f: impl Fn(&PodDisruptionBudgetStatus) -> bool,
) -> PodDisruptionBudgetStatus {
    let api: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    eventually(what, WAIT, || async {
        let pdb = api.get(name).await.unwrap();
        let s = pdb.status?;
        (s.observed_generation == pdb.metadata.generation && f(&s)).then_some(s)
    })
    .await
}

/// A bare pod on `node`, Ready after `ready_after` seconds.
async fn pod(client: &kube::Client, node: &str, name: &str, app: &str, ready_after: u32, finalizer: bool) {
    let mut p = json!({
        "metadata": {"name": name, "labels": {"app": app}, "annotations": {"sim.krate.dev/ready-after": ready_after.to_string()}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    });
    if finalizer {
        p["metadata"]["finalizers"] = json!(["test.krate.dev/hold"]);
    }
    let p: Pod = serde_json::from_value(p).unwrap();
    Api::<Pod>::default_namespaced(client.clone()).create(&PostParams::default(), &p).await.unwrap();
}

async fn pods_ready(client: &kube::Client, names: &[&str]) {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    eventually(&format!("{names:?} ready"), WAIT, || async {
        for n in names {
            let p = pods.get(n).await.unwrap();
            let ready = p
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if !ready {
                return None;
            }
        }
        Some(())
    })
    .await
}

async fn pods_running(client: &kube::Client, names: &[&str]) {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    eventually(&format!("{names:?} running"), WAIT, || async {
        for n in names {
            let p = pods.get(n).await.unwrap();
            if p.status.and_then(|s| s.phase).as_deref() != Some("Running") {
                return None;
            }
        }
        Some(())
    })
    .await
}

fn refusal(result: Result<kube::core::Status, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn budget_status_follows_pods_and_their_controllers_scale() {
    let (client, _cluster, node) = cluster(&["statefulset", "disruption"]).await;
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "podManagementPolicy": "Parallel", "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}}},
    }))
    .unwrap();
    Api::<StatefulSet>::default_namespaced(client.clone()).create(&PostParams::default(), &set).await.unwrap();
    budget(&client, "web", json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}})).await;
    let s = status_where(&client, "web", "3 healthy, 1 allowed", |s| {
        s.current_healthy == Some(3) && s.disruptions_allowed == Some(1)
    })
    .await;
    assert_eq!((s.expected_pods, s.desired_healthy), (Some(3), Some(2)));
    let c = &s.conditions.unwrap()[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("DisruptionAllowed", "True", "SufficientPods")
    );

    // A percentage counts against the StatefulSet's scale, rounded up.
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": null, "minAvailable": "90%"}})),
    )
    .await
    .unwrap();
    let s = status_where(&client, "web", "90% of 3", |s| s.desired_healthy == Some(3)).await;
    assert_eq!(s.disruptions_allowed, Some(0));
    let c = &s.conditions.unwrap()[0];
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InsufficientPods"));
}

#[tokio::test]
async fn eviction_is_refused_by_the_budget_then_allowed_and_marks_the_pod() {
    let (client, _cluster, node) = cluster(&["disruption"]).await;
    pod(&client, &node, "db-0", "db", 0, true).await;
    pod(&client, &node, "db-1", "db", 0, false).await;
    pods_ready(&client, &["db-0", "db-1"]).await;
    budget(&client, "db", json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}})).await;
    status_where(&client, "db", "2 of 2 healthy", |s| s.current_healthy == Some(2) && s.desired_healthy == Some(2))
        .await;

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let refused = refusal(pods.evict("db-0", &EvictParams::default()).await);
    assert_eq!((refused.code, refused.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(refused.message, "Cannot evict pod as it would violate the pod's disruption budget.");
    let cause = &refused.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(cause.message, "The disruption budget db needs 2 healthy pods and has 2 currently");
    assert!(pods.get("db-0").await.unwrap().metadata.deletion_timestamp.is_none());

    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    pdbs.patch("db", &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 1}}))).await.unwrap();
    status_where(&client, "db", "1 allowed", |s| s.disruptions_allowed == Some(1)).await;
    pods.evict("db-0", &EvictParams::default()).await.unwrap();
    // The finalizer keeps it visible: marked as disrupted by the eviction, then deleted.
    let evicted = pods.get("db-0").await.unwrap();
    assert!(evicted.metadata.deletion_timestamp.is_some());
    let conditions = evicted.status.unwrap().conditions.unwrap();
    let target = conditions.iter().find(|c| c.type_ == "DisruptionTarget").expect("DisruptionTarget condition");
    assert_eq!((target.status.as_str(), target.reason.as_deref()), ("True", Some("EvictionByEvictionAPI")));
    // The budget was spent: the next eviction is refused.
    let s = pdbs.get("db").await.unwrap().status.unwrap();
    assert_eq!(s.disruptions_allowed, Some(0));
    let refused = refusal(pods.evict("db-1", &EvictParams::default()).await);
    assert_eq!(refused.code, 429);
    pods.patch("db-0", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    status_where(&client, "db", "db-0 gone", |s| s.current_healthy == Some(1) && s.disrupted_pods.is_none()).await;
}

#[tokio::test]
async fn unhealthy_pods_are_evicted_per_the_unhealthy_pod_eviction_policy() {
    let (client, _cluster, node) = cluster(&["disruption"]).await;
    for (name, ready_after) in [("c-0", 0), ("c-1", 0), ("c-2", 3600), ("c-3", 3600)] {
        pod(&client, &node, name, "cache", ready_after, false).await;
    }
    pods_ready(&client, &["c-0", "c-1"]).await;
    pods_running(&client, &["c-2", "c-3"]).await;
    budget(&client, "cache", json!({"minAvailable": 3, "selector": {"matchLabels": {"app": "cache"}}})).await;
    status_where(&client, "cache", "2 healthy of 3 wanted", |s| {
        s.current_healthy == Some(2) && s.desired_healthy == Some(3)
    })
    .await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    // IfHealthyBudget (the default): an unready pod goes only while the budget is met.
    assert_eq!(refusal(pods.evict("c-2", &EvictParams::default()).await).code, 429);

    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let always = json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}});
    pdbs.patch("cache", &PatchParams::default(), &Patch::Merge(always)).await.unwrap();
    status_where(&client, "cache", "the new generation observed", |_| true).await;
    pods.evict("c-2", &EvictParams::default()).await.unwrap();
    eventually("c-2 gone", WAIT, || async { pods.get_opt("c-2").await.unwrap().is_none().then_some(()) }).await;
    // A ready pod still needs the budget.
    assert_eq!(refusal(pods.evict("c-0", &EvictParams::default()).await).code, 429);

    let met = json!({"spec": {"unhealthyPodEvictionPolicy": "IfHealthyBudget", "minAvailable": 2}});
    pdbs.patch("cache", &PatchParams::default(), &Patch::Merge(met)).await.unwrap();
    status_where(&client, "cache", "budget met", |s| s.current_healthy == Some(2) && s.desired_healthy == Some(2))
        .await;
    pods.evict("c-3", &EvictParams::default()).await.unwrap();
    eventually("c-3 gone", WAIT, || async { pods.get_opt("c-3").await.unwrap().is_none().then_some(()) }).await;
    assert_eq!(refusal(pods.evict("c-1", &EvictParams::default()).await).code, 429);
}

#[tokio::test]
async fn eviction_answers_bad_requests_and_unprocessed_budgets_as_upstream() {
    // No disruption controller: a budget nobody has processed yet.
    let (client, _cluster, node) = cluster(&[]).await;
    pod(&client, &node, "p-0", "p", 0, false).await;
    pods_ready(&client, &["p-0"]).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    let missing = refusal(pods.evict("nope", &EvictParams::default()).await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    let other_name = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}});
    let mismatch = pods
        .create_subresource::<serde_json::Value, kube::core::Status>(
            "eviction",
            "p-0",
            &PostParams::default(),
            &other_name,
        )
        .await;
    let mismatch = refusal(mismatch);
    assert_eq!((mismatch.code, mismatch.message.as_str()), (400, "name in URL does not match name in Eviction object"));

    budget(&client, "p", json!({"minAvailable": 0, "selector": {"matchLabels": {"app": "p"}}})).await;
    let unprocessed = refusal(pods.evict("p-0", &EvictParams::default()).await);
    assert_eq!(unprocessed.code, 429);
    let cause = &unprocessed.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.message, "The disruption budget p is still being processed by the server.");

    budget(&client, "p2", json!({"maxUnavailable": 1, "selector": {}})).await;
    let two = refusal(pods.evict("p-0", &EvictParams::default()).await);
    assert_eq!(
        (two.code, two.message.as_str()),
        (500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
    );
    assert!(pods.get("p-0").await.unwrap().metadata.deletion_timestamp.is_none());
}
