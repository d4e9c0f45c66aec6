//! The proxy loop: reflectors keep Services and EndpointSlices in memory, and every
//! change (batched to at most one sync per `min_sync_interval`) renders the rules,
//! diffs them against what was last applied and applies the difference with one
//! `nft -f`. The first sync rebuilds the table; a failure makes the next one full.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::{Notify, watch};

use super::config::ProxyConfig;
use super::diff::{self, Applied, Plan, SyncMode};
use super::metrics;
use super::render::render;
use super::snapshot::Snapshot;
use crate::metrics_util::{gauge_value, set_to_now};
use crate::nft::{Nft, NftError, check_table_name};
use crate::sync_loop::{self, Aborting, LoopHandle, Pacing, SyncLoop, log_sync, reflect};

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
pub struct ProxyHandle(LoopHandle<SyncReport, ProxyError>);

impl ProxyHandle {
    /// The latest sync's report (None before the first).
    pub fn reports(&self) -> watch::Receiver<Option<Arc<SyncReport>>> {
        self.0.reports()
    }

    /// Stops syncing and deletes the table.
    pub async fn stop(self) -> Result<(), ProxyError> {
        self.0.stop(ProxyError::Task).await
    }
}

/// Starts the proxy on the current Tokio runtime.
pub fn start(client: kube::Client, config: ProxyConfig) -> ProxyHandle {
    ProxyHandle(LoopHandle::spawn(|shutdown, reports| run_reporting(client, config, shutdown, reports)))
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
    check_table_name(&config.table).map_err(ProxyError::Config)?;
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
    let ours = || watcher::Config::default().labels(SELECTOR);
    let (services, services_ready, services_task) =
        reflect::<Service>(Api::all(client.clone()), ours(), |_| {}, changed.clone(), "proxy");
    let (slices, slices_ready, slices_task) =
        reflect::<EndpointSlice>(Api::all(client), ours(), |_| {}, changed.clone(), "proxy");
    let _watches = Aborting(vec![services_task, slices_task]);
    tracing::info!(node = %config.node_name, table = %config.table, "service proxy starting");

    // Syncing before both lists are in would briefly reject traffic to services
    // whose endpoints are not yet known.
    let start = || LoopState::new(config.clone(), nft.clone(), services, slices);
    sync_loop::drive(shutdown, vec![services_ready, slices_ready], &changed, start, &reports).await;
    remove_table(&nft, &config).await
}

async fn remove_table(nft: &Nft, config: &ProxyConfig) -> Result<(), ProxyError> {
    nft.delete_table(&config.table).await.map_err(ProxyError::Cleanup)?;
    tracing::info!(table = %config.table, "service proxy stopped; table removed");
    Ok(())
}

/// The sync loop: what it reads and what it remembers.
struct LoopState {
    config: Arc<ProxyConfig>,
    nft: Nft,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    pacing: Pacing,
    applied: Applied,
    next_mode: SyncMode,
    number: u64,
}

impl LoopState {
    fn new(config: Arc<ProxyConfig>, nft: Nft, services: Store<Service>, slices: Store<EndpointSlice>) -> LoopState {
        LoopState {
            config,
            nft,
            services,
            slices,
            pacing: Pacing::starting_now(),
            applied: Applied::default(),
            next_mode: SyncMode::Recreate,
            number: 0,
        }
    }
}

impl SyncLoop for LoopState {
    type Report = SyncReport;

    fn pacing(&mut self) -> &mut Pacing {
        &mut self.pacing
    }

    /// Besides changes, retries and full resyncs, stale chains are due for deletion.
    fn due(&self) -> Instant {
        let config = &self.config;
        let stale = self.applied.next_stale_deletion(config);
        self.pacing.due(config.min_sync_interval, config.full_sync_interval, stale)
    }

    async fn sync(&mut self) -> Option<SyncReport> {
        let (config, nft, pacing) = (&self.config, &self.nft, &mut self.pacing);
        let started = Instant::now();
        let mut mode = self.next_mode;
        if mode == SyncMode::Partial && started >= pacing.last_full + config.full_sync_interval {
            mode = SyncMode::Full;
        }
        pacing.dirty = false;
        pacing.retry_at = None;

        let (services, slices, cfg) = (self.services.state(), self.slices.state(), config.clone());
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
        let Plan { script, next, .. } = plan;
        let result = nft.apply(&script).await;
        let duration = started.elapsed();
        pacing.last_sync = Some(Instant::now());
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
                    pacing.last_full = started;
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
                set_to_now(&metrics::LAST_SYNC);
                log_sync!(
                    mode != SyncMode::Partial,
                    mode = mode.as_str(),
                    ?duration,
                    chains = report.chains,
                    rules = report.rules,
                    "proxy rules synced"
                );
                self.applied = next;
                self.next_mode = SyncMode::Partial;
            }
            Err(error) => {
                metrics::SYNC_FAILURES.inc();
                // A failed partial sync is retried in full; a failed full one by
                // rebuilding the table, in case it no longer looks as we think.
                self.next_mode = if mode == SyncMode::Partial { SyncMode::Full } else { SyncMode::Recreate };
                pacing.retry_at = Some(Instant::now() + config.retry_interval);
                tracing::warn!(mode = mode.as_str(), %error, retry_in = ?config.retry_interval, "proxy rules sync failed");
            }
        }
        Some(report)
    }
}
