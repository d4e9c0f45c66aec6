//! Events about pods as the kubelet records them: core/v1 Events with source
//! `kubelet` on this node (FailedMount, Failed, …). Written in the background; a
//! failure to record is logged, never fatal. The pod worker decides how often an
//! event repeats.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};

#[derive(Clone)]
pub struct PodEvents {
    client: kube::Client,
    node: String,
}

impl PodEvents {
    pub fn new(client: kube::Client, node: &str) -> PodEvents {
        PodEvents { client, node: node.to_string() }
    }

    pub fn warning(&self, pod: &Pod, reason: &str, message: String) {
        self.record(pod, "Warning", reason, message);
    }

    pub fn record(&self, pod: &Pod, type_: &str, reason: &str, message: String) {
        self.record_about(pod, None, type_, reason, message);
    }

    /// An event about one of the pod's containers: the involved object's fieldPath
    /// names it (`spec.containers{NAME}`, `spec.initContainers{NAME}`), as upstream's.
    pub fn container(&self, pod: &Pod, container: &str, type_: &str, reason: &str, message: String) {
        let init = pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten()).any(|c| c.name == container);
        let field = if init { "initContainers" } else { "containers" };
        self.record_about(pod, Some(format!("spec.{field}{{{container}}}")), type_, reason, message);
    }

    fn record_about(&self, pod: &Pod, field_path: Option<String>, type_: &str, reason: &str, message: String) {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let m = &pod.metadata;
        let namespace = m.namespace.clone().unwrap_or_else(|| "default".into());
        let now = k8s_openapi::jiff::Timestamp::now();
        let name = format!(
            "{}.{:x}{:x}",
            m.name.as_deref().unwrap_or_default(),
            now.as_nanosecond(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let event = Event {
            metadata: ObjectMeta { name: Some(name), namespace: Some(namespace.clone()), ..Default::default() },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                field_path,
            },
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some(type_.into()),
            source: Some(EventSource { component: Some("kubelet".into()), host: Some(self.node.clone()) }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: None::<MicroTime>,
            count: Some(1),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node.clone()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let reason = reason.to_string();
        tokio::spawn(async move {
            if let Err(error) = api.create(&PostParams::default(), &event).await {
                tracing::debug!(%error, reason, "event not recorded");
            }
        });
    }
}
