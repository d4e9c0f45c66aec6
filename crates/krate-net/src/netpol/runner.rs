//! The enforcement loop: reflectors keep NetworkPolicies, Pods and Namespaces in
//! memory, and every change (batched to at most one sync per `min_sync_interval`)
//! resolves the policies, renders the table, diffs it against what was last applied
//! and applies the difference with one `nft -f`. The first sync, the one after a
//! failure and a periodic one rebuild the table.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

use super::config::NetpolConfig;
use super::metrics;
use super::plan::{Plan, SyncMode, plan};
use super::render::{EGRESS_ISOLATED, INGRESS_ISOLATED, Ruleset, render};
use super::snapshot::Snapshot;
use crate::proxy::{Nft, NftError};

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
pub struct NetpolHandle {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), NetpolError>>,
    reports: watch::Receiver<Option<Arc<SyncReport>>>,
}

impl NetpolHandle {
    /// The latest sync's report (None before the first).
    pub fn reports(&self) -> watch::Receiver<Option<Arc<SyncReport>>> {
        self.reports.clone()
    }

    /// Stops syncing and deletes the table.
    pub async fn stop(mut self) -> Result<(), NetpolError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.map_err(|e| NetpolError::Task(e.to_string()))?
    }
}

impl Drop for NetpolHandle {
    fn drop(&mut self) {
        // Dropping the sender is the stop signal; the task cleans up on its own.
        self.stop.take();
    }
}

/// Starts enforcement on the current Tokio runtime.
pub fn start(client: kube::Client, config: NetpolConfig) -> NetpolHandle {
    let (stop, stopped) = oneshot::channel::<()>();
    let (reports_tx, reports) = watch::channel(None);
    let task = tokio::spawn(run_reporting(
        client,
        config,
        async move {
            let _ = stopped.await;
        },
        reports_tx,
    ));
    NetpolHandle { stop: Some(stop), task, reports }
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
    let table_ok = config.table.starts_with(|c: char| c.is_ascii_alphabetic())
        && config.table.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !table_ok {
        return Err(NetpolError::Config(format!("table name {:?} is not a plain nft identifier", config.table)));
    }
    if config.nft_command.is_empty() {
        return Err(NetpolError::Config("nft_command is empty".into()));
    }
    if config.node_name.is_empty() {
        return Err(NetpolError::Config("node_name is empty".into()));
    }
    Ok(())
}

/// One kind's reflector: its store (objects trimmed by `trim` first), marked ready
/// after each complete list, with a nudge to the sync loop on every change.
fn reflect_kind<K>(
    api: Api<K>,
    changed: Arc<Notify>,
    trim: fn(&mut K),
) -> (Store<K>, watch::Receiver<bool>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let (ready_tx, ready) = watch::channel(false);
    let task = tokio::spawn(async move {
        let kind = K::kind(&()).to_string();
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff().modify(trim);
        let mut events = reflector::reflector(writer, stream).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::InitDone) => {
                    ready_tx.send_replace(true);
                    changed.notify_one();
                }
                Ok(Event::Apply(_) | Event::Delete(_)) => changed.notify_one(),
                Ok(Event::Init | Event::InitApply(_)) => {}
                Err(error) => tracing::warn!(kind, %error, "NetworkPolicy enforcement watch failed; retrying"),
            }
        }
    });
    (reader, ready, task)
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

struct Aborting(Vec<JoinHandle<()>>);

impl Drop for Aborting {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
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
    let (policies, policies_ready, policies_task) =
        reflect_kind::<NetworkPolicy>(Api::all(client.clone()), changed.clone(), trim_meta);
    let (pods, pods_ready, pods_task) = reflect_kind::<Pod>(Api::all(client.clone()), changed.clone(), trim_pod);
    let (namespaces, namespaces_ready, namespaces_task) =
        reflect_kind::<Namespace>(Api::all(client), changed.clone(), trim_meta);
    let _watches = Aborting(vec![policies_task, pods_task, namespaces_task]);
    let stores = Stores { policies, pods, namespaces };
    tracing::info!(node = %config.node_name, table = %config.table, "NetworkPolicy enforcement starting");

    tokio::pin!(shutdown);
    // Syncing with policies but without their peers would cut allowed traffic.
    let all_ready = async {
        for mut ready in [policies_ready, pods_ready, namespaces_ready] {
            let _ = ready.wait_for(|r| *r).await;
        }
    };
    tokio::select! {
        () = &mut shutdown => return remove_table(&nft, &config).await,
        () = all_ready => {}
    }

    let mut state = LoopState::new(Instant::now());
    loop {
        let due = state.due(&config);
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            () = tokio::time::sleep_until(due.into()) => {}
            () = changed.notified() => {
                state.dirty = true;
                continue;
            }
        }
        if let Some(report) = state.sync(&config, &nft, &stores).await {
            reports.send_replace(Some(Arc::new(report)));
        }
    }
    remove_table(&nft, &config).await
}

async fn remove_table(nft: &Nft, config: &NetpolConfig) -> Result<(), NetpolError> {
    nft.delete_table(&config.table).await.map_err(NetpolError::Cleanup)?;
    tracing::info!(table = %config.table, "NetworkPolicy enforcement stopped; table removed");
    Ok(())
}

/// The sync loop's memory.
struct LoopState {
    /// What the last successful sync left in the kernel; None when unknown.
    applied: Option<Ruleset>,
    next_mode: SyncMode,
    dirty: bool,
    last_sync: Option<Instant>,
    last_full: Instant,
    retry_at: Option<Instant>,
    number: u64,
}

impl LoopState {
    fn new(now: Instant) -> LoopState {
        LoopState {
            applied: None,
            next_mode: SyncMode::Full,
            dirty: true,
            last_sync: None,
            last_full: now,
            retry_at: None,
            number: 0,
        }
    }

    /// When the next sync should run: as soon as the minimum interval allows if
    /// anything changed, else at the next retry or periodic rebuild.
    fn due(&self, config: &NetpolConfig) -> Instant {
        let now = Instant::now();
        let earliest = self.last_sync.map_or(now, |t| t + config.min_sync_interval);
        let mut due = self.last_full + config.full_sync_interval;
        if self.dirty {
            due = now;
        }
        if let Some(at) = self.retry_at {
            due = due.min(at);
        }
        due.max(earliest)
    }

    async fn sync(&mut self, config: &Arc<NetpolConfig>, nft: &Nft, stores: &Stores) -> Option<SyncReport> {
        let started = Instant::now();
        let mut mode = self.next_mode;
        if started >= self.last_full + config.full_sync_interval {
            mode = SyncMode::Full;
        }
        self.dirty = false;
        self.retry_at = None;

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
                self.retry_at = Some(Instant::now() + config.retry_interval);
                return None;
            }
        };
        self.applied = applied;
        if plan.empty {
            self.last_sync = Some(Instant::now());
            return None;
        }

        self.number += 1;
        let Plan { mode, script, .. } = plan;
        let result = nft.apply(&script).await;
        let duration = started.elapsed();
        self.last_sync = Some(Instant::now());
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
                    self.last_full = started;
                }
                metrics::POLICIES.set(gauge_value(report.policies));
                metrics::RULES.set(gauge_value(report.rules));
                metrics::SETS.set(gauge_value(report.sets));
                metrics::ELEMENTS.set(gauge_value(report.elements));
                for (direction, set) in [("ingress", INGRESS_ISOLATED), ("egress", EGRESS_ISOLATED)] {
                    let count = desired.sets.get(set).map_or(0, |s| s.elements.len());
                    metrics::ISOLATED.with_label_values(&[direction]).set(gauge_value(count));
                }
                let unix = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
                metrics::LAST_SYNC.set(i64::try_from(unix.as_secs()).unwrap_or(i64::MAX));
                if mode == SyncMode::Full {
                    tracing::info!(
                        mode = mode.as_str(),
                        ?duration,
                        policies = report.policies,
                        rules = report.rules,
                        elements = report.elements,
                        "NetworkPolicy rules synced"
                    );
                } else {
                    tracing::debug!(
                        mode = mode.as_str(),
                        ?duration,
                        policies = report.policies,
                        rules = report.rules,
                        elements = report.elements,
                        "NetworkPolicy rules synced"
                    );
                }
                self.applied = Some(desired);
                self.next_mode = SyncMode::Partial;
            }
            Err(error) => {
                metrics::SYNC_FAILURES.inc();
                // One transaction: a failure left the kernel as it was, but rebuild
                // anyway in case it no longer looks as we think.
                self.next_mode = SyncMode::Full;
                self.retry_at = Some(Instant::now() + config.retry_interval);
                tracing::warn!(mode = mode.as_str(), %error, retry_in = ?config.retry_interval, "NetworkPolicy rules sync failed");
            }
        }
        Some(report)
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
