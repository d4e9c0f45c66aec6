//! Kinds served in two versions share one storage and convert between them.

use std::time::Duration;

use crate::common::TestServer;
use futures::StreamExt;
use k8s_openapi::api::autoscaling::{v1 as hpa1, v2 as hpa2};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[tokio::test]
async fn hpa_reads_and_watches_in_either_version() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let v1: Api<hpa1::HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "default");
    let v2: Api<hpa2::HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "default");
    let rv = v1.list(&Default::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch_v1 = v1.watch(&WatchParams::default(), &rv).await.unwrap().boxed();

    let old: hpa1::HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "cpu"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 4, "targetCPUUtilizationPercentage": 60},
    }))
    .unwrap();
    v1.create(&PostParams::default(), &old).await.unwrap();
    let seen_v2 = v2.get("cpu").await.unwrap();
    let metric = &seen_v2.spec.metrics.as_ref().unwrap()[0];
    assert_eq!(metric.resource.as_ref().unwrap().target.average_utilization, Some(60));

    let new: hpa2::HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "qps"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 4,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}],
        },
    }))
    .unwrap();
    v2.create(&PostParams::default(), &new).await.unwrap();
    let as_v1 = v1.get("qps").await.unwrap();
    assert!(as_v1.spec.target_cpu_utilization_percentage.is_none());
    assert!(as_v1.metadata.annotations.unwrap()["autoscaling.alpha.kubernetes.io/metrics"].contains("qps"));
    // Updating through v1 keeps what only v2 can express.
    let mut again = v1.get("qps").await.unwrap();
    again.spec.max_replicas = 9;
    v1.replace("qps", &PostParams::default(), &again).await.unwrap();
    let back = v2.get("qps").await.unwrap().spec;
    assert_eq!((back.max_replicas, back.metrics.unwrap()[0].type_.as_str()), (9, "Pods"));

    // The v1 watcher sees both objects in v1, whichever version wrote them.
    for name in ["cpu", "qps"] {
        let ev = tokio::time::timeout(Duration::from_secs(10), watch_v1.next()).await.unwrap().unwrap().unwrap();
        match ev {
            WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some(name)),
            other => panic!("expected ADDED {name}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn events_are_one_resource_in_two_versions() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let newer: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let e: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started", "message": "started container", "type": "Normal", "count": 3,
    }))
    .unwrap();
    core.create(&PostParams::default(), &e).await.unwrap();
    let n = newer.get("e1").await.unwrap();
    assert_eq!(n.note.as_deref(), Some("started container"));
    assert_eq!(n.regarding.unwrap().name.as_deref(), Some("p"));
    assert_eq!(n.deprecated_count, Some(3));
    assert_eq!(newer.list(&Default::default()).await.unwrap().items.len(), 1);
}
