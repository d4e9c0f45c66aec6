//! The enforcement loop: reflectors keep NetworkPolicies, Pods and Namespaces in
//! memory, and every change (batched to at most one sync per `min_sync_interval`)
//! resolves the policies, renders the table, diffs it against what was last applied
//! and applies the difference with one `nft -f`. The first sync, the one after a
//! failure and a periodic one rebuild the table.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::{Notify, watch};

use super::config::NetpolConfig;
use super::metrics;
use super::plan::{Plan, SyncMode, plan};
use super::render::{EGRESS_ISOLATED, INGRESS_ISOLATED, Ruleset, render};
use super::snapshot::Snapshot;
use crate::metrics_util::{gauge_value, set_to_now};
use crate::nft::{Nft, NftError, check_table_name};
use crate::sync_loop::{self, Aborting, LoopHandle, Pacing, SyncLoop, log_sync, reflect};

#[derive(Debug, thiserror::Error)]
pub enum NetpolError {
    #[error("invalid NetworkPolicy enforcement configuration: {0}")]
    Config(String),
    #[error("removing the NetworkPolicy table: {0}")]
    Cleanup(#[source] NftError),
    #[error("the NetworkPolicy task ended abnormally: {0}")]
    Task(String),
}

/// What one sync did, for logs and tests.
#[derive(Clone, Debug)]
pub struct SyncReport {
    /// Syncs attempted so far, this one included (syncs with nothing to do are not
    /// attempted).
    pub number: u64,
    pub mode: SyncMode,
    /// The script given to `nft -f`.
    pub script: Arc<str>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    pub duration: Duration,
    /// Policies selecting local pods, and the table's rules, sets and set elements.
    pub policies: usize,
    pub rules: usize,
    pub sets: usize,
    pub elements: usize,
}

/// Running enforcement. `stop` removes its table; dropping the handle stops it too,
/// in the background.
pub struct NetpolHandle(LoopHandle<SyncReport, NetpolError>);

impl NetpolHandle {
    /// The latest sync's report (None before the first).
    pub fn reports(&self) -> watch::Receiver<Option<Arc<SyncReport>>> {
        self.0.reports()
    }

    /// Stops syncing and deletes the table.
    pub async fn stop(self) -> Result<(), NetpolError> {
        self.0.stop(NetpolError::Task).await
    }
}

/// Starts enforcement on the current Tokio runtime.
pub fn start(client: kube::Client, config: NetpolConfig) -> NetpolHandle {
    NetpolHandle(LoopHandle::spawn(|shutdown, reports| run_reporting(client, config, shutdown, reports)))
}

/// Runs enforcement until `shutdown` completes, then deletes the table.
pub async fn run(
    client: kube::Client,
    config: NetpolConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), NetpolError> {
    run_reporting(client, config, shutdown, watch::channel(None).0).await
}

/// Deletes the table, if there is one.
pub async fn cleanup(config: &NetpolConfig) -> Result<(), NftError> {
    Nft::new(config.nft_command.clone(), config.nft_timeout).delete_table(&config.table).await
}

fn validate(config: &NetpolConfig) -> Result<(), NetpolError> {
    check_table_name(&config.table).map_err(NetpolError::Config)?;
    if config.nft_command.is_empty() {
        return Err(NetpolError::Config("nft_command is empty".into()));
    }
    if config.node_name.is_empty() {
        return Err(NetpolError::Config("node_name is empty".into()));
    }
    Ok(())
}

/// Only what enforcement reads is kept of each pod: no managed fields or annotations.
fn trim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        for c in &mut spec.containers {
            c.env = None;
            c.volume_mounts = None;
            c.command = None;
            c.args = None;
        }
        spec.init_containers = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.conditions = None;
    }
}

fn trim_meta<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

struct Stores {
    policies: Store<NetworkPolicy>,
    pods: Store<Pod>,
    namespaces: Store<Namespace>,
}

async fn run_reporting(
    client: kube::Client,
    config: NetpolConfig,
    shutdown: impl Future<Output = ()> + Send,
    reports: watch::Sender<Option<Arc<SyncReport>>>,
) -> Result<(), NetpolError> {
    validate(&config)?;
    let config = Arc::new(config);
    let nft = Nft::new(config.nft_command.clone(), config.nft_timeout);
    let changed = Arc::new(Notify::new());
    let what = "NetworkPolicy enforcement";
    let (policies, policies_ready, policies_task) = reflect::<NetworkPolicy>(
        Api::all(client.clone()),
        watcher::Config::default(),
        trim_meta,
        changed.clone(),
        what,
    );
    let (pods, pods_ready, pods_task) =
        reflect::<Pod>(Api::all(client.clone()), watcher::Config::default(), trim_pod, changed.clone(), what);
    let (namespaces, namespaces_ready, namespaces_task) =
        reflect::<Namespace>(Api::all(client), watcher::Config::default(), trim_meta, changed.clone(), what);
    let _watches = Aborting(vec![policies_task, pods_task, namespaces_task]);
    let stores = Stores { policies, pods, namespaces };
    tracing::info!(node = %config.node_name, table = %config.table, "NetworkPolicy enforcement starting");

    // Syncing with policies but without their peers would cut allowed traffic.
    let ready = vec![policies_ready, pods_ready, namespaces_ready];
    let start = || LoopState::new(config.clone(), nft.clone(), stores);
    sync_loop::drive(shutdown, ready, &changed, start, &reports).await;
    remove_table(&nft, &config).await
}

async fn remove_table(nft: &Nft, config: &NetpolConfig) -> Result<(), NetpolError> {
    nft.delete_table(&config.table).await.map_err(NetpolError::Cleanup)?;
    tracing::info!(table = %config.table, "NetworkPolicy enforcement stopped; table removed");
    Ok(())
}

/// The sync loop: what it reads and what it remembers.
struct LoopState {
    config: Arc<NetpolConfig>,
    nft: Nft,
    stores: Stores,
    pacing: Pacing,
    /// What the last successful sync left in the kernel; None when unknown.
    applied: Option<Ruleset>,
    next_mode: SyncMode,
    number: u64,
}

impl LoopState {
    fn new(config: Arc<NetpolConfig>, nft: Nft, stores: Stores) -> LoopState {
        LoopState {
            config,
            nft,
            stores,
            pacing: Pacing::starting_now(),
            applied: None,
            next_mode: SyncMode::Full,
            number: 0,
        }
    }
}

impl SyncLoop for LoopState {
    type Report = SyncReport;

    fn pacing(&mut self) -> &mut Pacing {
        &mut self.pacing
    }

    fn due(&self) -> Instant {
        self.pacing.due(self.config.min_sync_interval, self.config.full_sync_interval, None)
    }

    async fn sync(&mut self) -> Option<SyncReport> {
        let (config, nft, stores, pacing) = (&self.config, &self.nft, &self.stores, &mut self.pacing);
        let started = Instant::now();
        let mut mode = self.next_mode;
        if started >= pacing.last_full + config.full_sync_interval {
            mode = SyncMode::Full;
        }
        pacing.dirty = false;
        pacing.retry_at = None;

        let (policies, pods, namespaces) = (stores.policies.state(), stores.pods.state(), stores.namespaces.state());
        let (cfg, applied) = (config.clone(), self.applied.take());
        // Resolving every policy against every pod is CPU work: off the async threads.
        let planned = tokio::task::spawn_blocking(move || {
            let snapshot = Snapshot::build(
                policies.iter().map(AsRef::as_ref),
                pods.iter().map(AsRef::as_ref),
                namespaces.iter().map(AsRef::as_ref),
            );
            let desired = render(&snapshot, &cfg.node_name);
            let plan = plan(mode, &cfg.table, applied.as_ref(), &desired);
            (plan, desired, applied)
        })
        .await;
        let (plan, desired, applied) = match planned {
            Ok(done) => done,
            Err(error) => {
                tracing::error!(%error, "rendering NetworkPolicy rules failed; rebuilding the table next");
                self.next_mode = SyncMode::Full;
                pacing.retry_at = Some(Instant::now() + config.retry_interval);
                return None;
            }
        };
        self.applied = applied;
        if plan.empty {
            pacing.last_sync = Some(Instant::now());
            return None;
        }

        self.number += 1;
        let Plan { mode, script, .. } = plan;
        let result = nft.apply(&script).await;
        let duration = started.elapsed();
        pacing.last_sync = Some(Instant::now());
        metrics::SYNC_DURATION.with_label_values(&[mode.as_str()]).observe(duration.as_secs_f64());
        let report = SyncReport {
            number: self.number,
            mode,
            script: script.into(),
            error: result.as_ref().err().map(ToString::to_string),
            duration,
            policies: desired.policies,
            rules: desired.rule_count(),
            sets: desired.sets.len(),
            elements: desired.element_count(),
        };
        match result {
            Ok(()) => {
                if mode == SyncMode::Full {
                    pacing.last_full = started;
                }
                metrics::POLICIES.set(gauge_value(report.policies));
                metrics::RULES.set(gauge_value(report.rules));
                metrics::SETS.set(gauge_value(report.sets));
                metrics::ELEMENTS.set(gauge_value(report.elements));
                for (direction, set) in [("ingress", INGRESS_ISOLATED), ("egress", EGRESS_ISOLATED)] {
                    let count = desired.sets.get(set).map_or(0, |s| s.elements.len());
                    metrics::ISOLATED.with_label_values(&[direction]).set(gauge_value(count));
                }
                set_to_now(&metrics::LAST_SYNC);
                log_sync!(
                    mode == SyncMode::Full,
                    mode = mode.as_str(),
                    ?duration,
                    policies = report.policies,
                    rules = report.rules,
                    elements = report.elements,
                    "NetworkPolicy rules synced"
                );
                self.applied = Some(desired);
                self.next_mode = SyncMode::Partial;
            }
            Err(error) => {
                metrics::SYNC_FAILURES.inc();
                // One transaction: a failure left the kernel as it was, but rebuild
                // anyway in case it no longer looks as we think.
                self.next_mode = SyncMode::Full;
                pacing.retry_at = Some(Instant::now() + config.retry_interval);
                tracing::warn!(mode = mode.as_str(), %error, retry_in = ?config.retry_interval, "NetworkPolicy rules sync failed");
            }
        }
        Some(report)
    }
}
