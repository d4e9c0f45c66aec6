//! The pod network loop: a reflector keeps the Nodes in memory; every change (batched
//! to at most one sync per `min_sync_interval`) recomputes the routes, and a sync
//! whose wanted state differs from the last one (or that is due: a retry, a periodic
//! resync) brings the kernel's routes and the nft table in line. This node's own
//! podCIDR goes to the callback on a task of its own, so a slow or failing callback
//! never holds the routes up.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::{Notify, watch};

use super::config::{IpForward, PodNetConfig};
use super::metrics;
use super::plan::{self, Desired, RouteTarget, Skipped};
use super::routes::Routes;
use super::rules;
use crate::command::{self, CommandError};
use crate::metrics_util::{gauge_value, set_to_now};
use crate::nft::{Nft, NftError};
use crate::proxy::Ipv4Cidr;
use crate::sync_loop::{self, Aborting, LoopHandle, Pacing, SyncLoop, reflect};

#[derive(Debug, thiserror::Error)]
pub enum PodNetError {
    #[error("invalid pod network configuration: {0}")]
    Config(String),
    #[error("removing the pod network's routes: {0}")]
    Routes(#[source] CommandError),
    #[error("removing the pod network's table: {0}")]
    Table(#[source] NftError),
    #[error("the pod network task ended abnormally: {0}")]
    Task(String),
}

/// A route the kernel refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteFailure {
    pub cidr: Ipv4Cidr,
    pub target: RouteTarget,
    pub error: String,
}

/// What one sync did, for logs and tests.
#[derive(Clone, Debug)]
pub struct SyncReport {
    /// Syncs run so far, this one included (syncs with nothing new to do are not run).
    pub number: u64,
    /// This node's podCIDR as its Node has it (the callback may still be running).
    pub own_pod_cidr: Option<Ipv4Cidr>,
    /// Our routes in the kernel after the sync.
    pub routes: BTreeMap<Ipv4Cidr, RouteTarget>,
    /// Routes added or changed, and deleted, by this sync.
    pub replaced: Vec<Ipv4Cidr>,
    pub deleted: Vec<Ipv4Cidr>,
    /// Routes the kernel refused (a gateway not on a connected network, typically).
    pub failed: Vec<RouteFailure>,
    /// Other nodes given no route, and why.
    pub skipped: Vec<Skipped>,
    /// Steps that failed: forwarding, the table, listing or deleting routes.
    pub errors: Vec<String>,
    pub duration: Duration,
}

impl SyncReport {
    /// No failed step and no refused route.
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && self.failed.is_empty()
    }
}

/// Told this node's podCIDR (as `10.42.3.0/24`) when it first appears and whenever it
/// changes; an error is retried after `retry_interval`.
type Callback = Arc<dyn Fn(String) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// A running pod network. `stop` removes its routes and table; dropping the handle
/// stops it too, in the background.
pub struct PodNetHandle {
    running: LoopHandle<SyncReport, PodNetError>,
    pod_cidr: watch::Receiver<Option<Ipv4Cidr>>,
}

impl PodNetHandle {
    /// This node's podCIDR, set once the callback has accepted it (None before).
    pub fn pod_cidr(&self) -> watch::Receiver<Option<Ipv4Cidr>> {
        self.pod_cidr.clone()
    }

    /// Waits until this node has a podCIDR the callback accepted; None when the loop
    /// ended first (a bad configuration, or stopped).
    pub async fn wait_pod_cidr(&self) -> Option<Ipv4Cidr> {
        let mut cidr = self.pod_cidr.clone();
        cidr.wait_for(Option::is_some).await.ok().and_then(|c| *c)
    }

    /// The latest sync's report (None before the first).
    pub fn reports(&self) -> watch::Receiver<Option<Arc<SyncReport>>> {
        self.running.reports()
    }

    /// Stops, deleting this loop's routes and table.
    pub async fn stop(self) -> Result<(), PodNetError> {
        self.running.stop(PodNetError::Task).await
    }
}

fn boxed<F, Fut, E>(on_pod_cidr: F) -> Callback
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    Arc::new(move |cidr| {
        let call = on_pod_cidr(cidr);
        Box::pin(async move { call.await.map_err(|e| e.to_string()) })
    })
}

/// Starts the pod network on the current Tokio runtime. `client` must be allowed to
/// list and watch all Nodes (a node's own identity is not: see the module docs).
pub fn start<F, Fut, E>(client: kube::Client, config: PodNetConfig, on_pod_cidr: F) -> PodNetHandle
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    let (pod_cidr_tx, pod_cidr) = watch::channel(None);
    let running = LoopHandle::spawn(|shutdown, reports| {
        run_reporting(client, config, boxed(on_pod_cidr), shutdown, reports, pod_cidr_tx)
    });
    PodNetHandle { running, pod_cidr }
}

/// Runs the pod network until `shutdown` completes, then deletes its routes and table.
pub async fn run<F, Fut, E>(
    client: kube::Client,
    config: PodNetConfig,
    on_pod_cidr: F,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), PodNetError>
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    let (reports, pod_cidr) = (watch::channel(None).0, watch::channel(None).0);
    run_reporting(client, config, boxed(on_pod_cidr), shutdown, reports, pod_cidr).await
}

/// Deletes the loop's routes (those with its protocol) and its table, if any.
pub async fn cleanup(config: &PodNetConfig) -> Result<(), PodNetError> {
    let routes = Routes::new(config.ip_command.clone(), config.route_protocol, config.command_timeout);
    let nft = Nft::new(config.nft_command.clone(), config.command_timeout);
    let deleted = routes.delete_all().await.map_err(PodNetError::Routes);
    let table = nft.delete_table(&config.table).await.map_err(PodNetError::Table);
    metrics::ROUTES.set(0);
    let deleted = deleted?;
    table?;
    tracing::info!(routes = deleted, table = %config.table, "pod network removed");
    Ok(())
}

/// Switches IPv4 forwarding on.
pub async fn enable_ip_forward(how: &IpForward, timeout: Duration) -> Result<(), String> {
    match how {
        IpForward::Leave => Ok(()),
        IpForward::Proc => {
            let path = "/proc/sys/net/ipv4/ip_forward";
            let write = tokio::fs::write(path, b"1\n");
            match tokio::time::timeout(timeout, write).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("writing {path}: {e}")),
                Err(_) => Err(format!("writing {path} did not finish within {timeout:?}")),
            }
        }
        IpForward::Sysctl(command) => {
            let args = ["-w", "net.ipv4.ip_forward=1"];
            command::run(command, &args, None, timeout).await.map(drop).map_err(|e| e.to_string())
        }
    }
}

/// Hands each new podCIDR of this node to the callback, retrying failures, and
/// publishes it once accepted.
async fn own_pod_cidr(
    mut wanted: watch::Receiver<Option<Ipv4Cidr>>,
    callback: Callback,
    accepted: watch::Sender<Option<Ipv4Cidr>>,
    retry: Duration,
) {
    let mut applied: Option<Ipv4Cidr> = None;
    loop {
        let want = *wanted.borrow_and_update();
        if let Some(cidr) = want.filter(|_| want != applied) {
            match callback(cidr.to_string()).await {
                Ok(()) => {
                    tracing::info!(pod_cidr = %cidr, previous = ?applied.map(|c| c.to_string()), "this node's pod CIDR is set");
                    applied = want;
                    accepted.send_replace(want);
                }
                Err(error) => {
                    tracing::warn!(pod_cidr = %cidr, %error, retry_in = ?retry, "applying this node's pod CIDR failed");
                    tokio::select! {
                        () = tokio::time::sleep(retry) => continue,
                        changed = wanted.changed() => match changed {
                            Ok(()) => continue,
                            Err(_) => return,
                        },
                    }
                }
            }
        }
        if wanted.changed().await.is_err() {
            return;
        }
    }
}

async fn run_reporting(
    client: kube::Client,
    config: PodNetConfig,
    callback: Callback,
    shutdown: impl Future<Output = ()> + Send,
    reports: watch::Sender<Option<Arc<SyncReport>>>,
    accepted: watch::Sender<Option<Ipv4Cidr>>,
) -> Result<(), PodNetError> {
    config.validate().map_err(PodNetError::Config)?;
    let config = Arc::new(config);
    let changed = Arc::new(Notify::new());
    let (nodes, ready, nodes_task) =
        reflect::<Node>(Api::all(client), watcher::Config::default(), |_| {}, changed.clone(), "pod network's node");
    let (wanted_tx, wanted) = watch::channel(None);
    let callback_task = tokio::spawn(own_pod_cidr(wanted, callback, accepted, config.retry_interval));
    let watches = Aborting(vec![nodes_task, callback_task]);
    tracing::info!(
        node = %config.node_name,
        cluster_cidr = %config.cluster_cidr,
        table = %config.table,
        route_protocol = config.route_protocol,
        "pod network starting"
    );

    // Until the Nodes are listed, every route of ours would look stale.
    let start = || LoopState::new(config.clone(), nodes, wanted_tx);
    sync_loop::drive(shutdown, vec![ready], &changed, start, &reports).await;
    drop(watches);
    cleanup(&config).await
}

/// The sync loop: what it reads and what it remembers.
struct LoopState {
    config: Arc<PodNetConfig>,
    nodes: Store<Node>,
    /// This node's podCIDR, for the callback's task.
    wanted: watch::Sender<Option<Ipv4Cidr>>,
    routes: Routes,
    nft: Nft,
    number: u64,
    pacing: Pacing,
    /// What the last sync worked towards.
    last_desired: Option<Desired>,
    /// The table script last applied without error.
    table: Option<String>,
    forwarding: bool,
    /// Routes failing now, with their error, so each failure is logged once.
    failing: BTreeMap<Ipv4Cidr, String>,
}

impl LoopState {
    fn new(config: Arc<PodNetConfig>, nodes: Store<Node>, wanted: watch::Sender<Option<Ipv4Cidr>>) -> LoopState {
        LoopState {
            routes: Routes::new(config.ip_command.clone(), config.route_protocol, config.command_timeout),
            nft: Nft::new(config.nft_command.clone(), config.command_timeout),
            config,
            nodes,
            wanted,
            number: 0,
            pacing: Pacing::starting_now(),
            last_desired: None,
            table: None,
            forwarding: false,
            failing: BTreeMap::new(),
        }
    }
}

impl SyncLoop for LoopState {
    type Report = SyncReport;

    fn pacing(&mut self) -> &mut Pacing {
        &mut self.pacing
    }

    fn due(&self) -> Instant {
        self.pacing.due(self.config.min_sync_interval, self.config.resync_interval, None)
    }

    async fn sync(&mut self) -> Option<SyncReport> {
        // Its own handle on the config, so the steps below may borrow `self` mutably.
        let config = self.config.clone();
        let config = &*config;
        let started = Instant::now();
        self.pacing.dirty = false;
        let resync = started >= self.pacing.last_full + config.resync_interval;
        let retry = self.pacing.retry_at.is_some_and(|at| started >= at);
        let forced = resync || retry || self.last_desired.is_none();

        let desired = plan::desired(self.nodes.state().iter().map(AsRef::as_ref), config);
        self.wanted.send_if_modified(|own| {
            let changed = *own != desired.own_pod_cidr && desired.own_pod_cidr.is_some();
            if changed {
                *own = desired.own_pod_cidr;
            }
            changed
        });
        if !forced && self.last_desired.as_ref() == Some(&desired) {
            self.pacing.last_sync = Some(started);
            return None;
        }
        if resync {
            self.pacing.last_full = started;
        }
        self.pacing.retry_at = None;
        self.number += 1;
        let mut errors = Vec::new();

        if forced || !self.forwarding {
            match enable_ip_forward(&config.ip_forward, config.command_timeout).await {
                Ok(()) => self.forwarding = true,
                Err(error) => {
                    self.forwarding = false;
                    errors.push(format!("enabling IP forwarding: {error}"));
                }
            }
        }

        let script = rules::render(config, desired.own_pod_cidr);
        if forced || self.table.as_deref() != Some(script.as_str()) {
            match self.nft.apply(&script).await {
                Ok(()) => {
                    tracing::debug!(table = %config.table, "pod network rules applied");
                    self.table = Some(script);
                }
                Err(error) => {
                    self.table = None;
                    errors.push(format!("applying table {}: {error}", config.table));
                }
            }
        }

        let mut report = SyncReport {
            number: self.number,
            own_pod_cidr: desired.own_pod_cidr,
            routes: BTreeMap::new(),
            replaced: Vec::new(),
            deleted: Vec::new(),
            failed: Vec::new(),
            skipped: desired.skipped.clone(),
            errors: Vec::new(),
            duration: Duration::ZERO,
        };
        match self.routes.list().await {
            Ok(kernel) => self.reconcile(&desired, &kernel, &mut report, &mut errors).await,
            Err(error) => errors.push(format!("listing routes: {error}")),
        }
        report.errors = errors;
        report.duration = started.elapsed();
        self.finish(config, desired, &report);
        Some(report)
    }
}

impl LoopState {
    async fn reconcile(
        &mut self,
        desired: &Desired,
        kernel: &plan::KernelRoutes,
        report: &mut SyncReport,
        errors: &mut Vec<String>,
    ) {
        let plan = plan::plan(&desired.routes, kernel);
        let mut installed: BTreeMap<Ipv4Cidr, Option<Ipv4Addr>> = kernel.ours.clone();
        for cidr in &plan.delete {
            match self.routes.delete(*cidr).await {
                Ok(()) => {
                    installed.remove(cidr);
                    report.deleted.push(*cidr);
                }
                Err(error) => errors.push(format!("deleting the route to {cidr}: {error}")),
            }
        }
        for (cidr, target) in &plan.conflicts {
            report.skipped.push(Skipped {
                node: target.node.clone(),
                reason: format!("a route to {cidr} that krate does not own exists"),
            });
        }
        for (cidr, target) in &plan.replace {
            match self.routes.replace(*cidr, target.gateway).await {
                Ok(()) => {
                    installed.insert(*cidr, Some(target.gateway));
                    report.replaced.push(*cidr);
                }
                Err(error) => {
                    let error = error.stderr().map_or_else(|| error.to_string(), str::to_string);
                    // The old route (a changed gateway) is wrong now: better none.
                    if installed.contains_key(cidr) && self.routes.delete(*cidr).await.is_ok() {
                        installed.remove(cidr);
                    }
                    report.failed.push(RouteFailure { cidr: *cidr, target: target.clone(), error });
                }
            }
        }
        report.routes = desired
            .routes
            .iter()
            .filter(|(cidr, target)| installed.get(cidr) == Some(&Some(target.gateway)))
            .map(|(cidr, target)| (*cidr, target.clone()))
            .collect();
    }

    fn finish(&mut self, config: &PodNetConfig, desired: Desired, report: &SyncReport) {
        self.pacing.last_sync = Some(Instant::now());
        metrics::SYNC_DURATION.observe(report.duration.as_secs_f64());
        metrics::ROUTES.set(gauge_value(report.routes.len()));
        metrics::ROUTE_FAILURES.set(gauge_value(report.failed.len()));
        metrics::SKIPPED_NODES.set(gauge_value(report.skipped.len()));

        let mut failing = BTreeMap::new();
        for failure in &report.failed {
            let RouteFailure { cidr, target, error } = failure;
            if self.failing.get(cidr) != Some(error) {
                tracing::warn!(
                    node = %target.node,
                    pod_cidr = %cidr,
                    gateway = %target.gateway,
                    %error,
                    "cannot route to the node's pods (host-gw needs its InternalIP on a directly connected network)"
                );
            }
            failing.insert(*cidr, error.clone());
        }
        for cidr in self.failing.keys().filter(|c| !failing.contains_key(c)) {
            tracing::info!(pod_cidr = %cidr, "route no longer failing");
        }
        self.failing = failing;
        if !report.replaced.is_empty() || !report.deleted.is_empty() {
            let show = |c: &[Ipv4Cidr]| c.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            tracing::info!(
                replaced = %show(&report.replaced),
                deleted = %show(&report.deleted),
                routes = report.routes.len(),
                "pod network routes synced"
            );
        }
        for error in &report.errors {
            tracing::warn!(%error, retry_in = ?config.retry_interval, "pod network sync step failed");
        }
        if report.ok() {
            set_to_now(&metrics::LAST_SYNC);
        } else {
            metrics::SYNC_ERRORS.inc();
            self.pacing.retry_at = Some(Instant::now() + config.retry_interval);
        }
        self.last_desired = Some(desired);
    }
}
