//! Authorization metrics: decisions per authorizer (upstream's
//! apiserver_authorization_decisions_total, with type and name labels).

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use prometheus::{IntCounterVec, register_int_counter_vec};

use super::{Attributes, Authorizer, Decision};

pub static DECISIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "apiserver_authorization_decisions_total",
        "Authorization decisions by authorizer type, name and decision (allowed, denied, no opinion).",
        &["type", "name", "decision"]
    )
    .expect("metric registers once")
});

/// Counts the decisions of the authorizer it wraps.
pub struct Counted {
    pub kind: &'static str,
    pub name: &'static str,
    pub inner: Arc<dyn Authorizer>,
}

fn label(d: &Decision) -> &'static str {
    match d {
        Decision::Allow => "allowed",
        Decision::Deny(_) => "denied",
        Decision::NoOpinion(_) => "noopinion",
    }
}

#[async_trait]
impl Authorizer for Counted {
    async fn authorize(&self, a: &Attributes<'_>) -> Decision {
        let d = self.inner.authorize(a).await;
        DECISIONS.with_label_values(&[self.kind, self.name, label(&d)]).inc();
        d
    }
    async fn authorize_explained(&self, a: &Attributes<'_>) -> (Decision, String) {
        let (d, reason) = self.inner.authorize_explained(a).await;
        DECISIONS.with_label_values(&[self.kind, self.name, label(&d)]).inc();
        (d, reason)
    }
}
