//! The node side of the agent: registering the Node with the node's own credentials
//! (so the Node authorizer and NodeRestriction judge it), reporting its status — on
//! every change, checked each `status_update` (10 s), and at least every
//! `status_report` (5 min), as upstream's nodeStatusUpdateFrequency and
//! nodeStatusReportFrequency — and renewing its Lease in kube-node-lease every 10 s.

pub mod host;
pub mod lease;
pub mod status;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::metrics;
use status::{NodeIdentity, RuntimeStatus};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("registering node {node}: {source}")]
    Register { node: String, source: kube::Error },
    #[error("updating the status of node {node}: {source}")]
    Status { node: String, source: kube::Error },
}

#[derive(Clone)]
pub struct NodeOptions {
    pub identity: NodeIdentity,
    /// Where ephemeral storage lives (its filesystem is the node's ephemeral-storage).
    pub data_dir: PathBuf,
    pub status_update: Duration,
    pub status_report: Duration,
    pub lease_renew: Duration,
    pub lease_duration_seconds: i32,
}

impl NodeOptions {
    /// Upstream's kubelet defaults.
    pub fn new(identity: NodeIdentity, data_dir: PathBuf) -> NodeOptions {
        NodeOptions {
            identity,
            data_dir,
            status_update: Duration::from_secs(10),
            status_report: Duration::from_secs(300),
            lease_renew: Duration::from_secs(10),
            lease_duration_seconds: 40,
        }
    }
}

/// Reports the node's status; shared by the loop and shutdown.
pub struct StatusReporter {
    nodes: Api<Node>,
    options: NodeOptions,
    runtime: Option<Arc<dyn RuntimeStatus>>,
    host: host::Identity,
    last: parking_lot::Mutex<Option<(Value, Instant)>>,
}

impl StatusReporter {
    pub async fn new(client: kube::Client, options: NodeOptions, runtime: Option<Arc<dyn RuntimeStatus>>) -> Self {
        let host = tokio::task::spawn_blocking(host::Identity::read).await.unwrap_or_default();
        StatusReporter { nodes: Api::all(client), options, runtime, host, last: parking_lot::Mutex::new(None) }
    }

    fn name(&self) -> &str {
        &self.options.identity.name
    }

    /// Creates the Node if it does not exist (a restarted agent takes its Node back),
    /// then reports the status once.
    pub async fn register(&self) -> Result<(), NodeError> {
        let node: Node = serde_json::from_value(status::node_object(&self.options.identity)).expect("node literal");
        match self.nodes.create(&PostParams::default(), &node).await {
            Ok(_) => tracing::info!(node = self.name(), "registered the node"),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::info!(node = self.name(), "the node exists; taking it over")
            }
            Err(source) => return Err(NodeError::Register { node: self.name().into(), source }),
        }
        self.report(false, true).await
    }

    /// Writes the status if it changed, if `force`, or if the report period passed.
    pub async fn report(&self, shutting_down: bool, force: bool) -> Result<(), NodeError> {
        let dir = self.options.data_dir.clone();
        let resources = tokio::task::spawn_blocking(move || host::Resources::read(&dir)).await.unwrap_or_default();
        let runtime_ready = self.runtime.as_ref().map(|r| r.ready()).unwrap_or(Ok(()));
        let version = self.runtime.as_ref().map(|r| r.version()).unwrap_or_default();
        let conditions = status::conditions(&resources, runtime_ready, shutting_down);
        let known = self.last.lock().as_ref().map(|(s, _)| s["conditions"].as_array().cloned().unwrap_or_default());
        // The first report keeps the transition times the Node already has.
        let previous = match known {
            Some(p) => p,
            None => self.current_conditions().await,
        };
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let next =
            status::status(&self.options.identity, &self.host, &resources, &conditions, &version, &previous, &now);
        let due = match self.last.lock().as_ref() {
            None => true,
            Some((s, at)) => {
                status::without_times(s) != status::without_times(&next) || at.elapsed() >= self.options.status_report
            }
        };
        if !(due || force) {
            return Ok(());
        }
        let result = self
            .nodes
            .patch_status(self.name(), &PatchParams::default(), &Patch::Merge(&json!({"status": next})))
            .await;
        metrics::STATUS_UPDATES.with_label_values(&[if result.is_ok() { "success" } else { "error" }]).inc();
        result.map_err(|source| NodeError::Status { node: self.name().into(), source })?;
        *self.last.lock() = Some((next, Instant::now()));
        Ok(())
    }

    async fn current_conditions(&self) -> Vec<Value> {
        match self.nodes.get(self.name()).await {
            Ok(n) => serde_json::to_value(n.status.and_then(|s| s.conditions).unwrap_or_default())
                .unwrap_or_default()
                .as_array()
                .cloned()
                .unwrap_or_default(),
            Err(_) => vec![],
        }
    }

    /// Checks every `status_update`, writing when due, until dropped.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.options.status_update);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(error) = self.report(false, false).await {
                tracing::warn!(%error, "node status update failed");
            }
        }
    }
}
