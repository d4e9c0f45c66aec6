//! What the scheduler writes besides decisions' bindings: pod status conditions,
//! nominated nodes, preemption of victims, and Events (events.k8s.io, upstream's
//! reasons and messages). Writes run concurrently off the scheduling loop.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;
use tokio::sync::mpsc;

use crate::framework::Profile;
use crate::scheduler::pod_key;

pub enum WriterRequest {
    Scheduled { pod: Arc<Pod>, node: String, scheduler: String },
    Unschedulable { pod: Arc<Pod>, message: String, nominated: Option<String>, scheduler: String },
    Gated(Arc<Pod>),
    Preempt { victim: Arc<Pod>, preemptor: Arc<Pod>, node: String, scheduler: String },
}

#[derive(Clone)]
pub struct Writer {
    tx: mpsc::UnboundedSender<WriterRequest>,
}

/// How many writes may be in flight at once.
const CONCURRENCY: usize = 32;

impl Writer {
    pub fn start(client: kube::Client, profiles: &[Profile]) -> Writer {
        let (tx, rx) = mpsc::unbounded_channel::<WriterRequest>();
        let instance = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
        let recorders: Arc<HashMap<String, Recorder>> = Arc::new(
            profiles
                .iter()
                .map(|p| {
                    let reporter = Reporter {
                        controller: p.scheduler_name.clone(),
                        instance: Some(match &instance {
                            Some(h) => format!("{}-{h}", p.scheduler_name),
                            None => p.scheduler_name.clone(),
                        }),
                    };
                    (p.scheduler_name.clone(), Recorder::new(client.clone(), reporter))
                })
                .collect(),
        );
        tokio::spawn(async move {
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
                .for_each_concurrent(CONCURRENCY, |request| {
                    let (client, recorders) = (client.clone(), recorders.clone());
                    async move { write(&client, &recorders, request).await }
                })
                .await;
        });
        Writer { tx }
    }

    pub fn send(&self, request: WriterRequest) {
        let _ = self.tx.send(request);
    }
}

/// POSTs the pods/binding subresource.
pub async fn bind(client: &kube::Client, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
    let name = pod.metadata.name.clone().unwrap_or_default();
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": pod.metadata.namespace, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    api.create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding).await?;
    Ok(())
}

async fn publish(recorders: &HashMap<String, Recorder>, scheduler: &str, pod: &Pod, event: Event) {
    let Some(recorder) = recorders.get(scheduler) else { return };
    if let Err(error) = recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(pod = %pod_key(pod), %error, "event not recorded");
    }
}

fn condition_is(pod: &Pod, type_: &str, status: &str, reason: &str, message: &str) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| {
        c.type_ == type_
            && c.status == status
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref().unwrap_or("") == message
    })
}

async fn patch_status(client: &kube::Client, pod: &Pod, status: serde_json::Value) {
    let api: Api<Pod> = Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let patch = json!({"metadata": {"uid": pod.metadata.uid}, "status": status});
    if let Err(error) = api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
        tracing::debug!(pod = %pod_key(pod), %error, "status not updated");
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
        "lastProbeTime": null, "lastTransitionTime": Timestamp::now().to_string()})
}

pub const GATED_MESSAGE: &str = "Scheduling is blocked due to non-empty scheduling gates";

async fn write(client: &kube::Client, recorders: &HashMap<String, Recorder>, request: WriterRequest) {
    match request {
        WriterRequest::Scheduled { pod, node, scheduler } => {
            let note = format!("Successfully assigned {} to {node}", pod_key(&pod));
            let event = Event {
                type_: EventType::Normal,
                reason: "Scheduled".into(),
                note: Some(note),
                action: "Binding".into(),
                secondary: None,
            };
            publish(recorders, &scheduler, &pod, event).await;
        }
        WriterRequest::Unschedulable { pod, message, nominated, scheduler } => {
            let current_nominated = pod.status.as_ref().and_then(|s| s.nominated_node_name.clone());
            let nominated_changes = nominated.is_some() && nominated != current_nominated;
            if !condition_is(&pod, "PodScheduled", "False", "Unschedulable", &message) || nominated_changes {
                let mut status = json!({"conditions": [condition("PodScheduled", "False", "Unschedulable", &message)]});
                if let Some(node) = &nominated {
                    status["nominatedNodeName"] = json!(node);
                }
                patch_status(client, &pod, status).await;
            }
            let event = Event {
                type_: EventType::Warning,
                reason: "FailedScheduling".into(),
                note: Some(message),
                action: "Scheduling".into(),
                secondary: None,
            };
            publish(recorders, &scheduler, &pod, event).await;
        }
        WriterRequest::Gated(pod) => {
            if !condition_is(&pod, "PodScheduled", "False", "SchedulingGated", GATED_MESSAGE) {
                let status =
                    json!({"conditions": [condition("PodScheduled", "False", "SchedulingGated", GATED_MESSAGE)]});
                patch_status(client, &pod, status).await;
            }
        }
        WriterRequest::Preempt { victim, preemptor, node, scheduler } => {
            let message = format!("{scheduler}: preempting to accommodate a higher priority pod");
            let status =
                json!({"conditions": [condition("DisruptionTarget", "True", "PreemptionByScheduler", &message)]});
            patch_status(client, &victim, status).await;
            let api: Api<Pod> =
                Api::namespaced(client.clone(), victim.metadata.namespace.as_deref().unwrap_or("default"));
            let name = victim.metadata.name.as_deref().unwrap_or_default();
            let params = DeleteParams { preconditions: None, ..Default::default() };
            match api.delete(name, &params).await {
                Ok(_) => {
                    let note = format!(
                        "Preempted by pod {} on node {node}",
                        preemptor.metadata.uid.as_deref().unwrap_or_default()
                    );
                    let event = Event {
                        type_: EventType::Normal,
                        reason: "Preempted".into(),
                        note: Some(note),
                        action: "Preempting".into(),
                        secondary: None,
                    };
                    publish(recorders, &scheduler, &victim, event).await;
                }
                Err(error) => tracing::info!(victim = %pod_key(&victim), %error, "preemption victim not deleted"),
            }
        }
    }
}
