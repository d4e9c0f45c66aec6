//! The proxy loop: reflectors keep Services and EndpointSlices in memory, and every
//! change (batched to at most one sync per `min_sync_interval`) renders the rules,
//! diffs them against what was last applied and applies the difference with one
//! `nft -f`. The first sync rebuilds the table; a failure makes the next one full.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

use super::apply::{Nft, NftError};
use super::config::ProxyConfig;
use super::diff::{self, Applied, Plan, SyncMode};
use super::metrics;
use super::render::render;
use super::snapshot::Snapshot;

/// Objects another proxy implementation claims, and headless services' slices, are
/// not ours (kube-proxy's own informer selector).
const SELECTOR: &str = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid proxy configuration: {0}")]
    Config(String),
    #[error("removing the proxy's table: {0}")]
    Cleanup(#[source] NftError),
    #[error("the proxy task ended abnormally: {0}")]
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
    /// Render, diff and apply.
    pub duration: Duration,
    /// The service and endpoint chains, their rules and the map elements wanted.
    pub chains: usize,
    pub rules: usize,
    pub elements: usize,
}

/// A running proxy. `stop` removes its table; dropping the handle stops it too, in
/// the background.
pub struct ProxyHandle {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ProxyError>>,
    reports: watch::Receiver<Option<Arc<SyncReport>>>,
}

impl ProxyHandle {
    /// The latest sync's report (None before the first).
    pub fn reports(&self) -> watch::Receiver<Option<Arc<SyncReport>>> {
        self.reports.clone()
    }

    /// Stops syncing and deletes the table.
    pub async fn stop(mut self) -> Result<(), ProxyError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.map_err(|e| ProxyError::Task(e.to_string()))?
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        // Dropping the sender is the stop signal; the task cleans up on its own.
        self.stop.take();
    }
}

/// Starts the proxy on the current Tokio runtime.
pub fn start(client: kube::Client, config: ProxyConfig) -> ProxyHandle {
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
    ProxyHandle { stop: Some(stop), task, reports }
}

/// Runs the proxy until `shutdown` completes, then deletes its table.
pub async fn run(
    client: kube::Client,
    config: ProxyConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ProxyError> {
    run_reporting(client, config, shutdown, watch::channel(None).0).await
}

/// Deletes the proxy's table (kube-proxy's --cleanup), if there is one.
pub async fn cleanup(config: &ProxyConfig) -> Result<(), NftError> {
    Nft::new(config.nft_command.clone(), config.nft_timeout).delete_table(&config.table).await
}

fn validate(config: &ProxyConfig) -> Result<(), ProxyError> {
    let table_ok = config.table.starts_with(|c: char| c.is_ascii_alphabetic())
        && config.table.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !table_ok {
        return Err(ProxyError::Config(format!("table name {:?} is not a plain nft identifier", config.table)));
    }
    if config.nft_command.is_empty() {
        return Err(ProxyError::Config("nft_command is empty".into()));
    }
    if config.masquerade_bit > 31 {
        return Err(ProxyError::Config(format!("masquerade_bit {} is not in 0..=31", config.masquerade_bit)));
    }
    if config.node_name.is_empty() {
        return Err(ProxyError::Config("node_name is empty".into()));
    }
    Ok(())
}

/// One kind's reflector: its store, marked ready after each complete list, with a
/// nudge to the sync loop on every change.
fn reflect_kind<K>(api: Api<K>, changed: Arc<Notify>) -> (Store<K>, watch::Receiver<bool>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let (ready_tx, ready) = watch::channel(false);
    let task = tokio::spawn(async move {
        let kind = K::kind(&()).to_string();
        let config = watcher::Config::default().labels(SELECTOR);
        let mut events = reflector::reflector(writer, watcher::watcher(api, config).default_backoff()).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::InitDone) => {
                    ready_tx.send_replace(true);
                    changed.notify_one();
                }
                Ok(Event::Apply(_) | Event::Delete(_)) => changed.notify_one(),
                Ok(Event::Init | Event::InitApply(_)) => {}
                Err(error) => tracing::warn!(kind, %error, "proxy watch failed; retrying"),
            }
        }
    });
    (reader, ready, task)
}

struct Aborting(Vec<JoinHandle<()>>);

impl Drop for Aborting {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

async fn run_reporting(
    client: kube::Client,
    config: ProxyConfig,
    shutdown: impl Future<Output = ()> + Send,
    reports: watch::Sender<Option<Arc<SyncReport>>>,
) -> Result<(), ProxyError> {
    validate(&config)?;
    let config = Arc::new(config);
    let nft = Nft::new(config.nft_command.clone(), config.nft_timeout);
    let changed = Arc::new(Notify::new());
    let (services, services_ready, services_task) = reflect_kind::<Service>(Api::all(client.clone()), changed.clone());
    let (slices, slices_ready, slices_task) = reflect_kind::<EndpointSlice>(Api::all(client), changed.clone());
    let _watches = Aborting(vec![services_task, slices_task]);
    tracing::info!(node = %config.node_name, table = %config.table, "service proxy starting");

    tokio::pin!(shutdown);
    // Syncing before both lists are in would briefly reject traffic to services
    // whose endpoints are not yet known.
    let both_ready = async {
        let (mut a, mut b) = (services_ready, slices_ready);
        let _ = a.wait_for(|r| *r).await;
        let _ = b.wait_for(|r| *r).await;
    };
    tokio::select! {
        () = &mut shutdown => return remove_table(&nft, &config).await,
        () = both_ready => {}
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
        if let Some(report) = state.sync(&config, &nft, &services, &slices).await {
            reports.send_replace(Some(Arc::new(report)));
        }
    }
    remove_table(&nft, &config).await
}

async fn remove_table(nft: &Nft, config: &ProxyConfig) -> Result<(), ProxyError> {
    nft.delete_table(&config.table).await.map_err(ProxyError::Cleanup)?;
    tracing::info!(table = %config.table, "service proxy stopped; table removed");
    Ok(())
}

/// The sync loop's memory.
struct LoopState {
    applied: Applied,
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
            applied: Applied::default(),
            next_mode: SyncMode::Recreate,
            dirty: true,
            last_sync: None,
            last_full: now,
            retry_at: None,
            number: 0,
        }
    }

    /// When the next sync should run: as soon as the minimum interval allows if
    /// anything changed, else at the next retry, stale-chain deletion or full resync.
    fn due(&self, config: &ProxyConfig) -> Instant {
        let now = Instant::now();
        let earliest = self.last_sync.map_or(now, |t| t + config.min_sync_interval);
        let mut due = self.last_full + config.full_sync_interval;
        if self.dirty {
            due = now;
        }
        for at in [self.retry_at, self.applied.next_stale_deletion(config)].into_iter().flatten() {
            due = due.min(at);
        }
        due.max(earliest)
    }

    async fn sync(
        &mut self,
        config: &Arc<ProxyConfig>,
        nft: &Nft,
        services: &Store<Service>,
        slices: &Store<EndpointSlice>,
    ) -> Option<SyncReport> {
        let started = Instant::now();
        let mut mode = self.next_mode;
        if mode == SyncMode::Partial && started >= self.last_full + config.full_sync_interval {
            mode = SyncMode::Full;
        }
        self.dirty = false;
        self.retry_at = None;

        let (services, slices, cfg) = (services.state(), slices.state(), config.clone());
        let applied = std::mem::take(&mut self.applied);
        // Rendering thousands of services is CPU work: off the async threads.
        let planned = tokio::task::spawn_blocking(move || {
            let snapshot =
                Snapshot::build(services.iter().map(AsRef::as_ref), slices.iter().map(AsRef::as_ref), &cfg.node_name);
            let plan = diff::plan(mode, &cfg, &applied, render(&snapshot, &cfg), Instant::now());
            (plan, applied)
        })
        .await;
        let (plan, applied) = match planned {
            Ok(done) => done,
            Err(error) => {
                tracing::error!(%error, "rendering proxy rules failed; rebuilding the table next");
                self.next_mode = SyncMode::Recreate;
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
        let Plan { script, next, .. } = plan;
        let result = nft.apply(&script).await;
        let duration = started.elapsed();
        self.last_sync = Some(Instant::now());
        metrics::SYNC_DURATION.observe(duration.as_secs_f64());
        let desired = &next.rules;
        let report = SyncReport {
            number: self.number,
            mode,
            script: script.into(),
            error: result.as_ref().err().map(ToString::to_string),
            duration,
            chains: desired.chains.len(),
            rules: desired.rule_count(),
            elements: desired.element_count(),
        };
        match result {
            Ok(()) => {
                if mode == SyncMode::Partial {
                    metrics::PARTIAL_SYNC_DURATION.observe(duration.as_secs_f64());
                } else {
                    metrics::FULL_SYNC_DURATION.observe(duration.as_secs_f64());
                    self.last_full = started;
                }
                metrics::CHAINS.set(gauge_value(report.chains));
                metrics::RULES.set(gauge_value(report.rules));
                metrics::ELEMENTS.set(gauge_value(report.elements));
                metrics::NO_LOCAL_ENDPOINTS
                    .with_label_values(&["internal"])
                    .set(gauge_value(desired.no_local_internal));
                metrics::NO_LOCAL_ENDPOINTS
                    .with_label_values(&["external"])
                    .set(gauge_value(desired.no_local_external));
                let unix = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
                metrics::LAST_SYNC.set(i64::try_from(unix.as_secs()).unwrap_or(i64::MAX));
                let level_info = mode != SyncMode::Partial;
                if level_info {
                    tracing::info!(
                        mode = mode.as_str(),
                        ?duration,
                        chains = report.chains,
                        rules = report.rules,
                        "proxy rules synced"
                    );
                } else {
                    tracing::debug!(
                        mode = mode.as_str(),
                        ?duration,
                        chains = report.chains,
                        rules = report.rules,
                        "proxy rules synced"
                    );
                }
                self.applied = next;
                self.next_mode = SyncMode::Partial;
            }
            Err(error) => {
                metrics::SYNC_FAILURES.inc();
                // A failed partial sync is retried in full; a failed full one by
                // rebuilding the table, in case it no longer looks as we think.
                self.next_mode = if mode == SyncMode::Partial { SyncMode::Full } else { SyncMode::Recreate };
                self.retry_at = Some(Instant::now() + config.retry_interval);
                tracing::warn!(mode = mode.as_str(), %error, retry_in = ?config.retry_interval, "proxy rules sync failed");
            }
        }
        Some(report)
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
