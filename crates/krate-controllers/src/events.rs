//! Events as upstream's controllers record them (events.k8s.io/v1 through kube-runtime's
//! Recorder). A Recorder folds events of one reason on one object into a series that
//! keeps the first note; "Created pod: a" and "Created pod: b" are different events
//! upstream, so each publish gets a fresh Recorder. Events are written in the background
//! (a sync creating 500 pods does not wait for 500 event writes); a failure to record
//! is logged, never fatal to the sync.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};

#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    reporter: Reporter,
}

impl Events {
    /// `controller` is upstream's event source ("statefulset-controller").
    pub fn new(client: kube::Client, controller: &str) -> Events {
        Events { client, reporter: Reporter { controller: controller.into(), instance: None } }
    }

    pub async fn normal<K: Resource<DynamicType = ()>>(&self, on: &K, reason: &str, note: String) {
        self.publish(&reference(on), EventType::Normal, reason, note).await
    }

    pub async fn warning<K: Resource<DynamicType = ()>>(&self, on: &K, reason: &str, note: String) {
        self.publish(&reference(on), EventType::Warning, reason, note).await
    }

    pub async fn publish(&self, regarding: &ObjectReference, type_: EventType, reason: &str, note: String) {
        let event = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        let (regarding, reason) = (regarding.clone(), reason.to_string());
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &regarding).await {
                tracing::debug!(%error, reason, "event not recorded");
            }
        });
    }
}

/// The reference an event about `on` carries.
pub fn reference<K: Resource<DynamicType = ()>>(on: &K) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(on.name_any()),
        namespace: on.namespace(),
        uid: on.meta().uid.clone(),
        resource_version: on.meta().resource_version.clone(),
        field_path: None,
    }
}
