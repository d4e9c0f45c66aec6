//! Helpers shared by the scheduler's behaviour tests.
#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use krate_testkit::eventually;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

pub const WAIT: Duration = Duration::from_secs(20);

pub fn pod(name: &str, cpu: &str, extra_spec: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu}}}]});
    for (k, v) in extra_spec.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("pod literal")
}

pub fn labelled(mut pod: Pod, labels: Value) -> Pod {
    pod.metadata.labels = serde_json::from_value(labels).ok();
    pod
}

pub async fn create(pods: &Api<Pod>, pod: Pod) {
    pods.create(&PostParams::default(), &pod).await.expect("pod created");
}

/// The node a pod is bound to, once it is.
pub async fn bound_node(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("{name} bound"), WAIT, || async {
        pods.get(name).await.ok()?.spec?.node_name.filter(|n| !n.is_empty())
    })
    .await
}

/// Waits until the pod has PodScheduled=False with this reason; returns the message.
pub async fn unschedulable(pods: &Api<Pod>, name: &str, reason: &str) -> String {
    eventually(&format!("{name} PodScheduled=False/{reason}"), WAIT, || async {
        let pod = pods.get(name).await.ok()?;
        let conditions = pod.status?.conditions?;
        let c = conditions.into_iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        (c.reason.as_deref() == Some(reason)).then(|| c.message.unwrap_or_default())
    })
    .await
}

/// The message of the pod's latest event with `reason` (core/v1 view, as kubectl shows).
pub async fn event_message(client: &kube::Client, namespace: &str, pod: &str, reason: &str) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    eventually(&format!("{reason} event for {pod}"), WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(pod) && e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.message)
            .next_back()
    })
    .await
}

/// Asserts the pod stays unbound for a while.
pub async fn stays_pending(pods: &Api<Pod>, name: &str) {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pod = pods.get(name).await.expect("pod");
    assert_eq!(pod.spec.and_then(|s| s.node_name), None, "{name} must not be bound");
}
