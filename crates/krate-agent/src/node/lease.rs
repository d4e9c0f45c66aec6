//! The node's heartbeat: its Lease in kube-node-lease (named after the node, owned by
//! the Node so it goes with it), renewed every 10 s with a 40 s duration as upstream's
//! kubelet does. The node lifecycle controller reads it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::metrics;

pub const NAMESPACE: &str = "kube-node-lease";

pub struct Heartbeat {
    leases: Api<Lease>,
    nodes: Api<Node>,
    node: String,
    duration_seconds: i32,
}

impl Heartbeat {
    pub fn new(client: kube::Client, node: &str, duration_seconds: i32) -> Heartbeat {
        Heartbeat {
            leases: Api::namespaced(client.clone(), NAMESPACE),
            nodes: Api::all(client),
            node: node.into(),
            duration_seconds,
        }
    }

    /// Renews the Lease, creating it when missing.
    pub async fn renew(&self) -> Result<(), kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let patch = json!({"spec": {"holderIdentity": self.node, "leaseDurationSeconds": self.duration_seconds,
            "renewTime": now}});
        let result = match self.leases.patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => self.create(now).await,
            other => other.map(|_| ()),
        };
        metrics::LEASE_RENEWALS.with_label_values(&[if result.is_ok() { "success" } else { "error" }]).inc();
        result
    }

    async fn create(&self, now: MicroTime) -> Result<(), kube::Error> {
        let node = self.nodes.get(&self.node).await?;
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": self.node, "namespace": NAMESPACE, "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": self.node,
                "uid": node.metadata.uid.unwrap_or_default()}]},
            "spec": {"holderIdentity": self.node, "leaseDurationSeconds": self.duration_seconds, "renewTime": now},
        }))
        .expect("lease literal");
        match self.leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Renews every `every` until dropped; failures retry at the next tick.
    pub async fn run(self, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(error) = self.renew().await {
                tracing::warn!(node = %self.node, %error, "lease renewal failed");
            }
        }
    }
}
