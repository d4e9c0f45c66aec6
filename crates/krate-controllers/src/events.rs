//! Events as upstream's controllers record them (events.k8s.io/v1 through kube-runtime's
//! recorder). A failed event write is logged, never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};

#[derive(Clone)]
pub struct Events {
    recorder: std::sync::Arc<Recorder>,
}

impl Events {
    /// `component` is upstream's event source ("statefulset-controller").
    pub fn new(client: kube::Client, component: &str) -> Events {
        let reporter = Reporter { controller: component.into(), instance: None };
        Events { recorder: std::sync::Arc::new(Recorder::new(client, reporter)) }
    }

    pub async fn normal<K: Resource<DynamicType = ()>>(&self, on: &K, reason: &str, note: String) {
        self.publish(on, EventType::Normal, reason, note).await
    }

    pub async fn warning<K: Resource<DynamicType = ()>>(&self, on: &K, reason: &str, note: String) {
        self.publish(on, EventType::Warning, reason, note).await
    }

    async fn publish<K: Resource<DynamicType = ()>>(&self, on: &K, type_: EventType, reason: &str, note: String) {
        let reference = ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(on.name_any()),
            namespace: on.namespace(),
            uid: on.meta().uid.clone(),
            resource_version: on.meta().resource_version.clone(),
            field_path: None,
        };
        let event = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, reason, "could not record event");
        }
    }
}
