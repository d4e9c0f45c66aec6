//! Events as upstream's controllers record them (events.k8s.io/v1 through kube-runtime's
//! Recorder). A Recorder folds events of one reason on one object into a series that
//! keeps the first note; "Created pod: a" and "Created pod: b" are different events
//! upstream, so each publish gets a fresh Recorder.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    reporter: Reporter,
}

impl Events {
    pub fn new(client: kube::Client, controller: &str) -> Events {
        Events { client, reporter: Reporter { controller: controller.into(), instance: None } }
    }

    /// Records one event in the background (a sync creating 500 pods does not wait for
    /// 500 event writes); a failure to record is logged, never fatal to the sync.
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
