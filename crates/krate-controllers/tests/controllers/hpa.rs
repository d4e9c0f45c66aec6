//! The HorizontalPodAutoscaler controller against a real API server: without the
//! resource metrics API it reports as upstream does (conditions and Warning events),
//! it clamps a Deployment's scale to minReplicas/maxReplicas through the scale
//! subresource, and a target scaled to zero disables it.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Event;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

async fn cluster() -> (TestCluster, kube::Client) {
    let mut cluster = TestCluster::start().await;
    cluster.controllers_with(&["horizontalpodautoscaling"], |s| s.hpa.sync_period = Duration::from_millis(500));
    let client = cluster.admin().await;
    (cluster, client)
}

async fn deployment(client: &kube::Client, name: &str, replicas: i32) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]},
            },
        },
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "default").create(&PostParams::default(), &d).await.unwrap();
}

async fn autoscaler(client: &kube::Client, name: &str, target: &str, min: i32, max: i32) {
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": min,
            "maxReplicas": max,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
        },
    }))
    .unwrap();
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &hpa)
        .await
        .unwrap();
}

async fn status(client: &kube::Client, name: &str) -> Value {
    let hpa = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), "default").get(name).await.unwrap();
    serde_json::to_value(hpa).unwrap()["status"].clone()
}

fn condition(status: &Value, t: &str) -> Option<Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == t).cloned()
}

/// The events about `name` with `reason`, as `kubectl describe` lists them.
async fn events(client: &kube::Client, name: &str, reason: &str) -> Vec<Event> {
    let all = Api::<Event>::namespaced(client.clone(), "default").list(&ListParams::default()).await.unwrap();
    all.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason))
        .collect()
}

async fn spec_replicas(client: &kube::Client, name: &str) -> i32 {
    let d = Api::<Deployment>::namespaced(client.clone(), "default").get(name).await.unwrap();
    d.spec.unwrap().replicas.unwrap()
}

const NO_METRICS: &str = "failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)";

#[tokio::test]
async fn without_the_metrics_api_the_autoscaler_reports_it_as_upstream() {
    let (_cluster, client) = cluster().await;
    deployment(&client, "web", 2).await;
    autoscaler(&client, "web", "web", 1, 5).await;

    let s = eventually("ScalingActive False", WAIT, || async {
        let s = status(&client, "web").await;
        condition(&s, "ScalingActive").is_some_and(|c| c["status"] == "False").then_some(s)
    })
    .await;
    let active = condition(&s, "ScalingActive").unwrap();
    assert_eq!(active["reason"], "FailedGetResourceMetric");
    assert_eq!(active["message"], format!("the HPA was unable to compute the replica count: {NO_METRICS}"));
    let able = condition(&s, "AbleToScale").unwrap();
    assert_eq!((able["status"].as_str(), able["reason"].as_str()), (Some("True"), Some("SucceededGetScale")));
    assert_eq!(s["currentReplicas"], 2);
    assert_eq!(s["currentMetrics"], json!([{"type": ""}]), "the failed metric's entry stays empty, as upstream");

    let failed = eventually("the FailedComputeMetricsReplicas event", WAIT, || async {
        let e = events(&client, "web", "FailedComputeMetricsReplicas").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        failed[0].message.as_deref(),
        Some(format!("invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: {NO_METRICS}").as_str())
    );
    let metric = events(&client, "web", "FailedGetResourceMetric").await;
    assert_eq!(metric[0].message.as_deref(), Some(NO_METRICS));
    assert_eq!(metric[0].type_.as_deref(), Some("Warning"));
    // Nothing was scaled.
    assert_eq!(spec_replicas(&client, "web").await, 2);
    assert!(events(&client, "web", "SuccessfulRescale").await.is_empty());
}

#[tokio::test]
async fn the_deployments_scale_is_clamped_to_min_and_max() {
    let (_cluster, client) = cluster().await;
    deployment(&client, "api", 1).await;
    autoscaler(&client, "api", "api", 3, 5).await;

    eventually("the deployment raised to minReplicas", WAIT, || async {
        (spec_replicas(&client, "api").await == 3).then_some(())
    })
    .await;
    let rescaled = eventually("SuccessfulRescale", WAIT, || async {
        let e = events(&client, "api", "SuccessfulRescale").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(rescaled[0].type_.as_deref(), Some("Normal"));
    assert_eq!(
        rescaled[0].message.as_deref(),
        Some("New size: 3; reason: Current number of replicas below Spec.MinReplicas")
    );
    let s = eventually("status after the rescale", WAIT, || async {
        let s = status(&client, "api").await;
        (s["desiredReplicas"] == 3).then_some(s)
    })
    .await;
    assert_eq!(s["currentReplicas"], 1);
    assert!(s["lastScaleTime"].is_string());
    let able = condition(&s, "AbleToScale").unwrap();
    assert_eq!(able["reason"], "SucceededRescale");
    assert_eq!(able["message"], "the HPA controller was able to update the target scale to 3");

    // Someone scales it past maxReplicas: the autoscaler brings it back.
    let deployments = Api::<Deployment>::namespaced(client.clone(), "default");
    deployments.patch("api", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 9}}))).await.unwrap();
    eventually("the deployment lowered to maxReplicas", WAIT, || async {
        (spec_replicas(&client, "api").await == 5).then_some(())
    })
    .await;
    eventually("the second SuccessfulRescale", WAIT, || async {
        events(&client, "api", "SuccessfulRescale")
            .await
            .iter()
            .any(|e| {
                e.message.as_deref() == Some("New size: 5; reason: Current number of replicas above Spec.MaxReplicas")
            })
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_target_scaled_to_zero_disables_autoscaling() {
    let (_cluster, client) = cluster().await;
    deployment(&client, "idle", 0).await;
    autoscaler(&client, "idle", "idle", 1, 4).await;
    let s = eventually("ScalingDisabled", WAIT, || async {
        let s = status(&client, "idle").await;
        condition(&s, "ScalingActive").is_some_and(|c| c["reason"] == "ScalingDisabled").then_some(s)
    })
    .await;
    let active = condition(&s, "ScalingActive").unwrap();
    assert_eq!(active["status"], "False");
    assert_eq!(active["message"], "scaling is disabled since the replica count of the target is zero");
    assert_eq!((s["currentReplicas"].as_i64(), s["desiredReplicas"].as_i64()), (Some(0), Some(0)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(spec_replicas(&client, "idle").await, 0, "never scaled up from zero");
}

#[tokio::test]
async fn a_missing_target_is_reported() {
    let (_cluster, client) = cluster().await;
    autoscaler(&client, "ghost", "nowhere", 1, 4).await;
    let s = eventually("AbleToScale False", WAIT, || async {
        let s = status(&client, "ghost").await;
        condition(&s, "AbleToScale").is_some_and(|c| c["status"] == "False").then_some(s)
    })
    .await;
    let able = condition(&s, "AbleToScale").unwrap();
    assert_eq!(able["reason"], "FailedGetScale");
    assert_eq!(
        able["message"],
        "the HPA controller was unable to get the target's current scale: deployments.apps \"nowhere\" not found"
    );
    let e = eventually("FailedGetScale event", WAIT, || async {
        let e = events(&client, "ghost", "FailedGetScale").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(e[0].message.as_deref(), Some("deployments.apps \"nowhere\" not found"));
}

#[tokio::test]
async fn two_autoscalers_over_the_same_pods_are_refused_as_ambiguous() {
    let (_cluster, client) = cluster().await;
    deployment(&client, "web", 1).await;
    // No Deployment controller runs here: the pods the target selects are made by hand.
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    }))
    .unwrap();
    Api::namespaced(client.clone(), "default").create(&PostParams::default(), &pod).await.unwrap();
    autoscaler(&client, "a", "web", 1, 5).await;
    autoscaler(&client, "b", "web", 1, 5).await;
    let expected = "pods by selector app=web are controlled by multiple HPAs: [default/a default/b]";
    for name in ["a", "b"] {
        let active = eventually(&format!("{name}: AmbiguousSelector"), WAIT, || async {
            let c = condition(&status(&client, name).await, "ScalingActive")?;
            (c["reason"] == "AmbiguousSelector").then_some(c)
        })
        .await;
        assert_eq!((active["status"].as_str(), active["message"].as_str()), (Some("False"), Some(expected)));
        let warned = eventually(&format!("{name}: AmbiguousSelector event"), WAIT, || async {
            let e = events(&client, name, "AmbiguousSelector").await;
            (!e.is_empty()).then_some(e)
        })
        .await;
        assert_eq!(warned[0].message.as_deref(), Some(expected));
    }
    // Once one goes, the other is no longer ambiguous (it fails on the missing metrics API).
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), "default")
        .delete("b", &Default::default())
        .await
        .unwrap();
    eventually("a: no longer ambiguous", WAIT, || async {
        let c = condition(&status(&client, "a").await, "ScalingActive")?;
        (c["reason"] == "FailedGetResourceMetric").then_some(())
    })
    .await;
}
