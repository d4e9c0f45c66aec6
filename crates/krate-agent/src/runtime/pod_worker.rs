//! One pod's worker: sets up the pod's volumes (refreshing them when a source they read
//! changes, on pod updates and every `volumes::RESYNC_PERIOD`), brings the pod to its
//! spec through CRI (sandbox, init containers in order, sidecars, containers with their
//! env and mounts, restarts with back-off), writes its status, and on deletion stops
//! everything within the grace period, removes the pod's volumes and the pod object.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus, Service};
use k8s_openapi::jiff::Timestamp;
use krate_client::informers::{Informer, Informers};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::{Notify, watch};

use super::backoff::Backoff;
use super::cri::Cri;
use super::cri_config::{self, LABEL_CONTAINER_NAME, LABEL_POD_UID, NodeSettings};
use super::env::{self, EnvContext, EnvError};
use super::events::PodEvents;
use super::hooks::{self, HookTarget};
use super::objects::ObjectCache;
use super::pod_status::{self, Health, Observed, Seen};
use super::probe::{self, PodProbes, ProbeContext};
use super::volumes::{self, PodVolumes, VolumeHost};
use super::{cgroups, images, metrics, service_env};

/// What all workers share.
pub struct Shared {
    pub cri: Cri,
    pub client: kube::Client,
    pub node: NodeSettings,
    pub node_name: String,
    pub informers: Arc<Informers>,
    /// All services, for the containers' service variables.
    pub services: Informer<Service>,
    pub events: PodEvents,
    pub volumes: VolumeHost,
}

/// How long a repeated warning event (the same message) is held back.
const EVENT_REPEAT: Duration = Duration::from_secs(60);
/// How long to wait for the first list of services before giving up on a container's
/// environment (upstream refuses to build it before services were read once).
const SERVICES_WAIT: Duration = Duration::from_secs(5);

/// The manager's end of a worker.
pub struct WorkerHandle {
    pub pod: watch::Sender<Option<Arc<Pod>>>,
    pub poke: Arc<Notify>,
    pub task: tokio::task::JoinHandle<()>,
}

pub fn spawn(shared: Arc<Shared>, pod: Arc<Pod>) -> WorkerHandle {
    let (tx, rx) = watch::channel(Some(pod.clone()));
    let poke = Arc::new(Notify::new());
    let worker = Worker {
        shared,
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        // A pod without init containers is initialized from the start.
        initialized: pod.spec.as_ref().is_none_or(|s| s.init_containers.as_ref().is_none_or(|i| i.is_empty())),
        last_pod: pod,
        sandbox: None,
        terminal: false,
        restarts: Backoff::default(),
        pulls: Backoff::default(),
        pull_failed_at: HashMap::new(),
        waiting: HashMap::new(),
        exited: HashMap::new(),
        written: None,
        start_time: Timestamp::now(),
        start_recorded: false,
        volumes: PodVolumes::default(),
        warned: HashMap::new(),
        pid_target: None,
        probes: PodProbes::new(poke.clone()),
        health: HashMap::new(),
    };
    let task = tokio::spawn(worker.run(rx, poke.clone()));
    WorkerHandle { pod: tx, poke, task }
}

#[derive(Clone, Debug)]
struct Sandbox {
    id: String,
    ips: Vec<String>,
    attempt: u32,
}

struct Worker {
    shared: Arc<Shared>,
    uid: String,
    last_pod: Arc<Pod>,
    sandbox: Option<Sandbox>,
    /// Set once the init containers have all completed; not re-run afterwards
    /// unless the sandbox is recreated.
    initialized: bool,
    /// The pod reached Succeeded or Failed: nothing more runs.
    terminal: bool,
    restarts: Backoff,
    pulls: Backoff,
    pull_failed_at: HashMap<String, SystemTime>,
    /// Why a container is waiting, by container name (shown as its waiting state).
    waiting: HashMap<String, (String, String)>,
    /// Statuses of exited containers, which never change again, by id.
    exited: HashMap<String, cri::ContainerStatus>,
    written: Option<PodStatus>,
    start_time: Timestamp,
    start_recorded: bool,
    volumes: PodVolumes,
    /// Warning events recorded, by reason and message, with when (to hold back repeats).
    warned: HashMap<(String, String), Instant>,
    /// The container an ephemeral container being started shares its PID namespace with.
    pid_target: Option<String>,
    /// The probes of the pod's running containers, and what they said at the last look.
    probes: PodProbes,
    health: HashMap<String, Health>,
}

const RUNNING: i32 = cri::ContainerState::ContainerRunning as i32;
const EXITED: i32 = cri::ContainerState::ContainerExited as i32;
const CREATED: i32 = cri::ContainerState::ContainerCreated as i32;

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn ns_time(ns: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}

/// Go's duration format for whole seconds (10s, 1m20s, 5m0s), as upstream's messages.
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 { format!("{}m{}s", s / 60, s % 60) } else { format!("{s}s") }
}

/// Keeps the earlier of two wake-ups.
fn sooner(wake: &mut Option<Duration>, after: Duration) {
    *wake = Some(wake.map_or(after, |w| w.min(after)));
}

impl Worker {
    fn name(&self) -> String {
        let m = &self.last_pod.metadata;
        format!("{}/{}", m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default())
    }

    async fn run(mut self, mut pod_rx: watch::Receiver<Option<Arc<Pod>>>, poke: Arc<Notify>) {
        loop {
            let current = pod_rx.borrow_and_update().clone();
            let wake = match current {
                None => {
                    // Gone from the API (deleted with grace 0 elsewhere): stop at once.
                    self.terminate(0).await;
                    return;
                }
                Some(pod) => {
                    self.last_pod = pod.clone();
                    if pod.metadata.deletion_timestamp.is_some() {
                        let grace = pod
                            .metadata
                            .deletion_grace_period_seconds
                            .or(pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
                            .unwrap_or(30);
                        self.terminate(grace).await;
                        self.remove_pod_object().await;
                        return;
                    }
                    match self.sync(&pod).await {
                        Ok(wake) => wake,
                        Err(error) => {
                            tracing::warn!(pod = self.name(), %error, "pod sync failed; retrying");
                            Some(Duration::from_secs(1))
                        }
                    }
                }
            };
            let volume_wake = self.volumes.wake();
            tokio::select! {
                changed = pod_rx.changed() => if changed.is_err() { return },
                _ = poke.notified() => {}
                _ = volume_wake.notify.notified() => {}
                _ = tokio::time::sleep(wake.unwrap_or(Duration::from_secs(60))) => {}
            }
        }
    }

    /// One pass towards the spec; returns when to look again (besides events).
    async fn sync(&mut self, pod: &Pod) -> Result<Option<Duration>, tonic::Status> {
        if self.terminal {
            return Ok(None);
        }
        // Finished before (this agent restarted since): never run it again.
        if pod.status.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(pod_status::is_terminal) {
            self.terminal = true;
            self.probes.stop_all();
            self.stop_containers(0, true).await;
            self.stop_sandboxes(false).await;
            self.tear_down_volumes().await;
            return Ok(None);
        }
        let spec = pod.spec.clone().unwrap_or_default();
        if self.volumes.due(pod) {
            let failures = self.volumes.sync(&self.shared.volumes, pod).await;
            for failure in failures {
                tracing::warn!(
                    pod = self.name(),
                    volume = failure.volume,
                    message = failure.message,
                    "volume not set up"
                );
                self.warn(pod, "FailedMount", failure.to_string());
            }
        }
        if !self.volumes.ready() {
            // As upstream's kubelet: no sandbox and no container until every volume is
            // there; the containers wait in ContainerCreating.
            let sandbox = self.sandbox.clone();
            self.write_status(pod, sandbox.as_ref(), &HashMap::new()).await;
            return Ok(Some(Duration::from_secs(2)));
        }
        let sandbox = match self.ensure_sandbox(pod).await {
            Ok(s) => s,
            Err(status) => {
                tracing::warn!(pod = self.name(), error = status.message(), "cannot create the pod sandbox");
                self.write_status(pod, None, &HashMap::new()).await;
                return Ok(Some(Duration::from_secs(2)));
            }
        };
        let mut seen = self.observe(&sandbox).await?;
        if self.kill_unhealthy(pod, &sandbox, &seen).await {
            seen = self.observe(&sandbox).await?;
        }
        let policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
        let mut wake = None;
        let init = spec.init_containers.clone().unwrap_or_default();
        let latest = |name: &str| seen.get(name).and_then(|s| s.latest.clone());

        if !self.initialized {
            let mut done = true;
            for c in &init {
                let current = latest(&c.name);
                match current.as_ref().map(|s| (s.state, s.exit_code)) {
                    // A sidecar lets the next init container go once it has started
                    // (its startup probe passed, as upstream).
                    Some((RUNNING, _)) if is_sidecar(c) && self.sidecar_started(pod, &c.name, &seen) => continue,
                    Some((EXITED, 0)) if !is_sidecar(c) => continue,
                    Some((RUNNING, _)) => {}
                    Some((CREATED, _)) => {
                        self.start_created(c, current.as_ref().unwrap()).await;
                    }
                    Some((EXITED, _)) if !is_sidecar(c) && policy == "Never" => {}
                    Some(_) => {
                        if self.restart_with_backoff(pod, c, current.as_ref().unwrap(), &sandbox, &mut wake).await {
                            sooner(&mut wake, Duration::ZERO);
                        }
                    }
                    None => {
                        if self.start(pod, c, 0, &sandbox, &mut wake).await {
                            // A started sidecar lets the next init container go now.
                            sooner(&mut wake, Duration::ZERO);
                        }
                    }
                }
                done = false;
                break;
            }
            self.initialized = done;
        }

        if self.initialized {
            for c in init.iter().filter(|c| is_sidecar(c)) {
                if let Some(s) = latest(&c.name).filter(|s| s.state == EXITED) {
                    self.restart_with_backoff(pod, c, &s, &sandbox, &mut wake).await;
                }
            }
            for c in &spec.containers {
                match latest(&c.name) {
                    None => {
                        self.start(pod, c, 0, &sandbox, &mut wake).await;
                    }
                    Some(s) if s.state == CREATED => self.start_created(c, &s).await,
                    Some(s) if s.state == EXITED => {
                        let restart = match policy.as_str() {
                            "Always" => true,
                            "OnFailure" => s.exit_code != 0,
                            _ => false,
                        };
                        if restart {
                            self.restart_with_backoff(pod, c, &s, &sandbox, &mut wake).await;
                        }
                    }
                    Some(_) => {}
                }
            }
            self.start_ephemeral(pod, &spec, &seen, &sandbox, &mut wake).await;
        }

        // Status from a fresh look, so what was just started shows as running.
        let seen = self.observe(&sandbox).await?;
        self.sync_probes(&sandbox, &seen);
        let phase = self.write_status(pod, Some(&sandbox), &seen).await;
        if pod_status::is_terminal(&phase) {
            tracing::info!(pod = self.name(), phase, "pod finished; stopping its sidecars and sandbox");
            self.terminal = true;
            self.probes.stop_all();
            self.stop_containers(0, false).await;
            self.stop_sandboxes(false).await;
            self.tear_down_volumes().await;
            return Ok(None);
        }
        sooner(&mut wake, volumes::RESYNC_PERIOD);
        Ok(wake)
    }

    /// Unmounts and removes the pod's volumes (it finished, or is gone) and forgets
    /// its tokens, as upstream's volume manager tears down a terminated pod's volumes.
    async fn tear_down_volumes(&mut self) {
        self.volumes.stop_watching(&self.shared.volumes, &self.uid);
        volumes::remove_pod_dir(&self.shared.volumes.pods_dir, &self.uid).await;
        self.shared.volumes.tokens.forget_pod(&self.uid);
    }

    /// Records a warning event, unless the same one was recorded in the last minute.
    fn warn(&mut self, pod: &Pod, reason: &str, message: String) {
        let key = (reason.to_string(), message.clone());
        if self.warned.get(&key).is_some_and(|at| at.elapsed() < EVENT_REPEAT) {
            return;
        }
        self.warned.retain(|_, at| at.elapsed() < EVENT_REPEAT);
        self.warned.insert(key, Instant::now());
        self.shared.events.warning(pod, reason, message);
    }

    /// The container's environment (upstream's makeEnvironmentVariables), with the
    /// config maps and secrets it names fetched as the node.
    async fn container_env(
        &self,
        pod: &Pod,
        c: &Container,
        pod_ips: &[String],
    ) -> Result<Vec<(String, String)>, EnvError> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let client = &self.shared.client;
        let (config_maps, secrets) = env::referenced_objects(c);
        let mut objects = ObjectCache::default();
        for name in &config_maps {
            objects.fetch_config_map(client, &namespace, name).await;
        }
        for name in &secrets {
            objects.fetch_secret(client, &namespace, name).await;
        }
        if tokio::time::timeout(SERVICES_WAIT, self.shared.services.ready()).await.is_err() {
            return Err(EnvError("services have not yet been read at least once, cannot construct envvars".into()));
        }
        let services = self.shared.services.store().state();
        let links = pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true);
        let service_env = service_env::pod_service_env(services.iter().map(|s| s.as_ref()), &namespace, links);
        env::container_env(
            pod,
            c,
            &EnvContext {
                host_ip: &self.shared.node.host_ip,
                pod_ips,
                allocatable: &self.shared.volumes.allocatable,
                service_env: &service_env,
                objects: &objects,
            },
        )
    }

    /// A container whose config cannot be made waits with CreateContainerConfigError.
    fn config_error(&mut self, pod: &Pod, c: &Container, message: String, wake: &mut Option<Duration>) {
        tracing::info!(pod = self.name(), container = c.name, message, "container config not made");
        self.warn(pod, "Failed", format!("Error: {message}"));
        self.waiting.insert(c.name.clone(), ("CreateContainerConfigError".into(), message));
        sooner(wake, Duration::from_secs(3));
    }

    /// Starts ephemeral containers not started yet (they never restart), in the PID
    /// namespace of their target container when they name one.
    async fn start_ephemeral(
        &mut self,
        pod: &Pod,
        spec: &k8s_openapi::api::core::v1::PodSpec,
        seen: &HashMap<String, Seen>,
        sandbox: &Sandbox,
        wake: &mut Option<Duration>,
    ) {
        for e in spec.ephemeral_containers.iter().flatten() {
            if seen.get(&e.name).is_some_and(|s| s.latest.is_some()) {
                continue;
            }
            let Some(c) = pod_status::ephemeral_as_container(e) else { continue };
            self.pid_target = e
                .target_container_name
                .as_ref()
                .and_then(|t| seen.get(t))
                .and_then(|s| s.latest.as_ref())
                .filter(|s| s.state == RUNNING)
                .map(|s| s.id.clone());
            self.start(pod, &c, 0, sandbox, wake).await;
            self.pid_target = None;
        }
    }

    /// Restarts an exited container unless it is in back-off (CrashLoopBackOff).
    async fn restart_with_backoff(
        &mut self,
        pod: &Pod,
        c: &Container,
        last: &cri::ContainerStatus,
        sandbox: &Sandbox,
        wake: &mut Option<Duration>,
    ) -> bool {
        let now = SystemTime::now();
        let failed_at = ns_time(last.finished_at);
        if let Some(remaining) = self.restarts.remaining(&c.name, failed_at, now) {
            let m = &pod.metadata;
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                go_duration(self.restarts.current(&c.name)),
                c.name,
                m.name.as_deref().unwrap_or_default(),
                m.namespace.as_deref().unwrap_or_default(),
                self.uid
            );
            self.waiting.insert(c.name.clone(), ("CrashLoopBackOff".into(), message));
            sooner(wake, remaining);
            return false;
        }
        self.restarts.next(&c.name, now);
        let attempt = last.metadata.as_ref().map_or(0, |m| m.attempt) + 1;
        self.start(pod, c, attempt, sandbox, wake).await
    }

    /// Starts a container created but never started (an agent restart between the two).
    async fn start_created(&mut self, c: &Container, s: &cri::ContainerStatus) {
        let request = cri::StartContainerRequest { container_id: s.id.clone() };
        if let Err(e) = self.shared.cri.runtime.clone().start_container(request).await {
            self.waiting.insert(c.name.clone(), ("RunContainerError".into(), e.message().to_string()));
        }
    }

    /// Pulls (as the policy says), creates and starts attempt `attempt` of `c`.
    async fn start(
        &mut self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        sandbox: &Sandbox,
        wake: &mut Option<Duration>,
    ) -> bool {
        let image = c.image.clone().unwrap_or_default();
        let now = SystemTime::now();
        if let Some(failed_at) = self.pull_failed_at.get(&c.name).copied()
            && let Some(remaining) = self.pulls.remaining(&c.name, failed_at, now)
        {
            self.waiting
                .insert(c.name.clone(), ("ImagePullBackOff".into(), format!("Back-off pulling image \"{image}\"")));
            sooner(wake, remaining);
            return false;
        }
        let policy = images::pull_policy(&image, c.image_pull_policy.as_deref());
        let image_ref = match images::ensure(&self.shared.cri, &image, &policy).await {
            Ok(r) => r,
            Err(failure) => {
                tracing::info!(pod = self.name(), container = c.name, reason = failure.reason, "{}", failure.message);
                if failure.reason == "ErrImagePull" {
                    self.pulls.next(&c.name, now);
                    self.pull_failed_at.insert(c.name.clone(), now);
                }
                self.waiting.insert(c.name.clone(), (failure.reason.into(), failure.message));
                sooner(wake, Duration::from_secs(10));
                return false;
            }
        };
        self.pull_failed_at.remove(&c.name);
        let env = match self.container_env(pod, c, &sandbox.ips).await {
            Ok(env) => env,
            Err(e) => {
                self.config_error(pod, c, e.0, wake);
                return false;
            }
        };
        let mounts = match self.volumes.container_mounts(c, &env).await {
            Ok(mounts) => mounts,
            Err(message) => {
                self.config_error(pod, c, message, wake);
                return false;
            }
        };
        let node = &self.shared.node;
        let mut config = cri_config::container_config(pod, c, attempt, &image_ref, env, mounts);
        if let Some(target) = self.pid_target.clone()
            && let Some(ns) = config.linux.as_mut().and_then(|l| l.security_context.as_mut())
        {
            // An ephemeral container sees its target's processes (NamespaceMode TARGET).
            ns.namespace_options.get_or_insert_default().pid = 3;
            ns.namespace_options.get_or_insert_default().target_id = target;
        }
        let request = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.id.clone(),
            config: Some(config),
            sandbox_config: Some(cri_config::sandbox_config(pod, sandbox.attempt, node)),
        };
        let started = std::time::Instant::now();
        let mut runtime = self.shared.cri.runtime.clone();
        let id = match runtime.create_container(request).await {
            Ok(r) => r.into_inner().container_id,
            Err(e) => {
                tracing::warn!(pod = self.name(), container = c.name, error = e.message(), "create container failed");
                self.waiting.insert(c.name.clone(), ("CreateContainerError".into(), e.message().to_string()));
                sooner(wake, Duration::from_secs(5));
                return false;
            }
        };
        metrics::runtime_operation("create_container", started.elapsed());
        let starting = std::time::Instant::now();
        if let Err(e) = runtime.start_container(cri::StartContainerRequest { container_id: id.clone() }).await {
            tracing::warn!(pod = self.name(), container = c.name, error = e.message(), "start container failed");
            self.waiting.insert(c.name.clone(), ("RunContainerError".into(), e.message().to_string()));
            return false;
        }
        metrics::runtime_operation("start_container", starting.elapsed());
        if !self.post_start(pod, c, &id, sandbox, wake).await {
            return false;
        }
        self.waiting.remove(&c.name);
        tracing::info!(pod = self.name(), container = c.name, attempt, id, elapsed = ?started.elapsed(), "container started");
        true
    }

    /// The sandbox to run in: the current one if still ready, one found in the runtime
    /// (after an agent restart), or a new one.
    async fn ensure_sandbox(&mut self, pod: &Pod) -> Result<Sandbox, tonic::Status> {
        let mut runtime = self.shared.cri.runtime.clone();
        let mut attempt = 0;
        if let Some(current) = self.sandbox.clone() {
            let status = runtime
                .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: current.id.clone(), verbose: false })
                .await;
            match status {
                Ok(s)
                    if s.get_ref()
                        .status
                        .as_ref()
                        .is_some_and(|s| s.state == cri::PodSandboxState::SandboxReady as i32) =>
                {
                    return Ok(current);
                }
                _ => {
                    tracing::warn!(pod = self.name(), sandbox = current.id, "sandbox is gone; making a new one");
                    self.remove_sandbox(&current.id).await;
                    self.sandbox = None;
                    self.initialized = false;
                    attempt = current.attempt + 1;
                }
            }
        } else if let Some(found) = self.adopt_sandbox().await? {
            self.sandbox = Some(found.clone());
            return Ok(found);
        }
        let started = std::time::Instant::now();
        let config = cri_config::sandbox_config(pod, attempt, &self.shared.node);
        let reply = runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
            .await?;
        let id = reply.into_inner().pod_sandbox_id;
        metrics::runtime_operation("run_podsandbox", started.elapsed());
        let ips = self.sandbox_ips(&id, pod).await?;
        tracing::info!(pod = self.name(), sandbox = id, ?ips, elapsed = ?started.elapsed(), "pod sandbox ready");
        let sandbox = Sandbox { id, ips, attempt };
        self.sandbox = Some(sandbox.clone());
        Ok(sandbox)
    }

    /// A ready sandbox of this pod already in the runtime (the agent restarted).
    async fn adopt_sandbox(&mut self) -> Result<Option<Sandbox>, tonic::Status> {
        let filter = cri::PodSandboxFilter {
            label_selector: HashMap::from([(LABEL_POD_UID.to_string(), self.uid.clone())]),
            state: Some(cri::PodSandboxStateValue { state: cri::PodSandboxState::SandboxReady as i32 }),
            ..Default::default()
        };
        let mut runtime = self.shared.cri.runtime.clone();
        let items =
            runtime.list_pod_sandbox(cri::ListPodSandboxRequest { filter: Some(filter) }).await?.into_inner().items;
        let Some(best) = items.into_iter().max_by_key(|s| s.metadata.as_ref().map_or(0, |m| m.attempt)) else {
            return Ok(None);
        };
        let pod = self.last_pod.clone();
        let ips = self.sandbox_ips(&best.id, &pod).await?;
        // Main containers there mean the init containers finished before the restart.
        let filter = cri::ContainerFilter { pod_sandbox_id: best.id.clone(), ..Default::default() };
        let containers =
            runtime.list_containers(cri::ListContainersRequest { filter: Some(filter) }).await?.into_inner().containers;
        let mains: Vec<&str> = pod.spec.iter().flat_map(|s| s.containers.iter()).map(|c| c.name.as_str()).collect();
        self.initialized =
            containers.iter().any(|c| c.metadata.as_ref().is_some_and(|m| mains.contains(&m.name.as_str())));
        tracing::info!(pod = self.name(), sandbox = best.id, "adopted the running sandbox");
        Ok(Some(Sandbox { id: best.id, ips, attempt: best.metadata.map_or(0, |m| m.attempt) }))
    }

    async fn sandbox_ips(&self, id: &str, pod: &Pod) -> Result<Vec<String>, tonic::Status> {
        if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
            return Ok(vec![self.shared.node.host_ip.clone()]);
        }
        let status = self
            .shared
            .cri
            .runtime
            .clone()
            .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: false })
            .await?
            .into_inner();
        let network = status.status.and_then(|s| s.network).unwrap_or_default();
        let mut ips: Vec<String> = vec![network.ip].into_iter().filter(|ip| !ip.is_empty()).collect();
        ips.extend(network.additional_ips.into_iter().map(|ip| ip.ip));
        Ok(ips)
    }

    /// The latest and previous runtime container of each container name; older
    /// exited attempts are removed (the kubelet keeps one dead container per name).
    async fn observe(&mut self, sandbox: &Sandbox) -> Result<HashMap<String, Seen>, tonic::Status> {
        let mut runtime = self.shared.cri.runtime.clone();
        let filter = cri::ContainerFilter { pod_sandbox_id: sandbox.id.clone(), ..Default::default() };
        let list = runtime.list_containers(cri::ListContainersRequest { filter: Some(filter) }).await?.into_inner();
        let mut by_name: HashMap<String, Vec<cri::Container>> = HashMap::new();
        for c in list.containers {
            let name = c
                .labels
                .get(LABEL_CONTAINER_NAME)
                .cloned()
                .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                .unwrap_or_default();
            by_name.entry(name).or_default().push(c);
        }
        let mut seen = HashMap::new();
        for (name, mut containers) in by_name {
            containers.sort_by_key(|c| std::cmp::Reverse((c.metadata.as_ref().map_or(0, |m| m.attempt), c.created_at)));
            for old in containers.iter().skip(2).filter(|c| c.state == EXITED) {
                let _ = runtime.remove_container(cri::RemoveContainerRequest { container_id: old.id.clone() }).await;
                self.exited.remove(&old.id);
            }
            let mut statuses = Vec::new();
            for c in containers.iter().take(2) {
                statuses.push(self.container_status(&c.id).await?);
            }
            let mut statuses = statuses.into_iter();
            seen.insert(name, Seen { latest: statuses.next().flatten(), previous: statuses.next().flatten() });
        }
        Ok(seen)
    }

    async fn container_status(&mut self, id: &str) -> Result<Option<cri::ContainerStatus>, tonic::Status> {
        if let Some(cached) = self.exited.get(id) {
            return Ok(Some(cached.clone()));
        }
        let request = cri::ContainerStatusRequest { container_id: id.to_string(), verbose: false };
        match self.shared.cri.runtime.clone().container_status(request).await {
            Ok(reply) => {
                let status = reply.into_inner().status;
                if let Some(s) = status.as_ref().filter(|s| s.state == EXITED) {
                    self.exited.insert(id.to_string(), s.clone());
                }
                Ok(status)
            }
            Err(e) if e.code() == tonic::Code::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Computes the status and writes it through pods/status if it changed; returns
    /// the phase.
    async fn write_status(&mut self, pod: &Pod, sandbox: Option<&Sandbox>, seen: &HashMap<String, Seen>) -> String {
        let status = pod_status::compute(&Observed {
            pod,
            host_ip: &self.shared.node.host_ip,
            pod_ips: sandbox.map(|s| s.ips.as_slice()).unwrap_or_default(),
            sandbox_ready: sandbox.is_some(),
            containers: seen,
            waiting: &self.waiting,
            health: &self.health,
            initialized: self.initialized,
            start_time: self.start_time,
            previous: self.written.as_ref().or(pod.status.as_ref()),
            now: Timestamp::now(),
        });
        let phase = status.phase.clone().unwrap_or_default();
        if self.written.as_ref() == Some(&status) {
            return phase;
        }
        let api: Api<Pod> =
            Api::namespaced(self.shared.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        let patch = serde_json::json!({ "status": status });
        let name = pod.metadata.name.clone().unwrap_or_default();
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                if phase == "Running" && !self.start_recorded {
                    self.start_recorded = true;
                    if let Some(created) = &pod.metadata.creation_timestamp {
                        let elapsed = Timestamp::now().duration_since(created.0);
                        metrics::POD_START.observe(elapsed.as_secs_f64().max(0.0));
                    }
                }
                self.written = Some(status);
            }
            Err(error) => tracing::warn!(pod = self.name(), %error, "pod status not written; will retry"),
        }
        phase
    }

    /// Stops the pod's running containers: main containers together within `grace`
    /// seconds, then sidecars in reverse order with what is left of it.
    async fn stop_containers(&mut self, grace: i64, include_main: bool) {
        let filter = cri::ContainerFilter {
            label_selector: HashMap::from([(LABEL_POD_UID.to_string(), self.uid.clone())]),
            state: Some(cri::ContainerStateValue { state: RUNNING }),
            ..Default::default()
        };
        let runtime = self.shared.cri.runtime.clone();
        let running = match runtime.clone().list_containers(cri::ListContainersRequest { filter: Some(filter) }).await {
            Ok(r) => r.into_inner().containers,
            Err(error) => {
                tracing::warn!(pod = self.name(), %error, "cannot list containers to stop");
                return;
            }
        };
        let spec = self.last_pod.spec.clone().unwrap_or_default();
        let sidecars: Vec<String> =
            spec.init_containers.iter().flatten().filter(|c| is_sidecar(c)).map(|c| c.name.clone()).collect();
        let name_of = |c: &cri::Container| c.labels.get(LABEL_CONTAINER_NAME).cloned().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(grace.max(0) as u64);
        let pod = self.last_pod.clone();
        let (shared, pod_ip) = (self.shared.clone(), self.sandbox.as_ref().and_then(|s| s.ips.first().cloned()));
        let specs: Vec<Container> =
            spec.init_containers.iter().flatten().chain(spec.containers.iter()).cloned().collect();
        // Each container's preStop hook first, then the stop (upstream's killContainer).
        let stop = |c: &cri::Container, timeout: i64| {
            let (id, name) = (c.id.clone(), name_of(c));
            let (shared, pod, pod_ip) = (shared.clone(), pod.clone(), pod_ip.clone());
            let container = specs.iter().find(|s| s.name == name).cloned().unwrap_or_default();
            async move {
                let target = HookTarget {
                    cri: &shared.cri,
                    pod: &pod,
                    container: &container,
                    container_id: &id,
                    pod_ip: pod_ip.as_deref(),
                };
                hooks::stop_container(&target, &shared.events, timeout).await;
            }
        };
        if include_main {
            let mains = running.iter().filter(|c| !sidecars.contains(&name_of(c))).map(|c| stop(c, grace));
            futures::future::join_all(mains).await;
        }
        for name in sidecars.iter().rev() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now()).as_secs() as i64;
            for c in running.iter().filter(|c| &name_of(c) == name) {
                stop(c, left.min(grace)).await;
            }
        }
    }

    /// Stops (and with `remove`, removes) every sandbox of the pod; removal also
    /// drops the pod's cgroup.
    async fn stop_sandboxes(&mut self, remove: bool) {
        let filter = cri::PodSandboxFilter {
            label_selector: HashMap::from([(LABEL_POD_UID.to_string(), self.uid.clone())]),
            ..Default::default()
        };
        let mut runtime = self.shared.cri.runtime.clone();
        let items = match runtime.list_pod_sandbox(cri::ListPodSandboxRequest { filter: Some(filter) }).await {
            Ok(r) => r.into_inner().items,
            Err(error) => {
                tracing::warn!(pod = self.name(), %error, "cannot list sandboxes");
                return;
            }
        };
        for s in items {
            if remove {
                self.remove_sandbox(&s.id).await;
            } else if let Err(error) =
                runtime.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: s.id.clone() }).await
            {
                tracing::warn!(sandbox = s.id, %error, "stop sandbox failed");
            }
        }
        if remove {
            cgroups::remove_tree(cri_config::pod_cgroup(&self.last_pod, &self.shared.node.cgroup_root)).await;
        }
    }

    async fn remove_sandbox(&self, id: &str) {
        let mut runtime = self.shared.cri.runtime.clone();
        let _ = runtime.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.to_string() }).await;
        if let Err(error) =
            runtime.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.to_string() }).await
        {
            tracing::warn!(sandbox = id, %error, "remove sandbox failed");
        }
    }

    /// Stops everything of the pod within `grace` seconds and removes its sandboxes.
    async fn terminate(&mut self, grace: i64) {
        let started = std::time::Instant::now();
        self.probes.stop_all();
        self.stop_containers(grace, true).await;
        self.stop_sandboxes(true).await;
        self.tear_down_volumes().await;
        let logs = cri_config::pod_log_dir(&self.last_pod, &self.shared.node.log_dir);
        if let Err(error) = tokio::fs::remove_dir_all(&logs).await
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(pod = self.name(), %error, "pod log directory not removed");
        }
        tracing::info!(pod = self.name(), grace, elapsed = ?started.elapsed(), "pod stopped and its sandbox removed");
    }

    /// Removes the terminated pod's object as the kubelet does: grace 0, on this uid only.
    async fn remove_pod_object(&self) {
        let m = &self.last_pod.metadata;
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), m.namespace.as_deref().unwrap_or("default"));
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(self.uid.clone()), resource_version: None }),
            ..Default::default()
        };
        match api.delete(m.name.as_deref().unwrap_or_default(), &params).await {
            Ok(_) => tracing::info!(pod = self.name(), "pod object removed"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(error) => tracing::warn!(pod = self.name(), %error, "pod object not removed"),
        }
    }
}

/// Probes and lifecycle hooks (`probe`, `hooks`).
impl Worker {
    fn probe_context(&self) -> ProbeContext {
        ProbeContext { cri: self.shared.cri.clone(), events: self.shared.events.clone() }
    }

    /// Starts and stops probe tasks for what runs now and takes their verdicts.
    fn sync_probes(&mut self, sandbox: &Sandbox, seen: &HashMap<String, Seen>) {
        let ctx = self.probe_context();
        let pod = self.last_pod.clone();
        self.probes.sync(&ctx, &pod, sandbox.ips.first().map(String::as_str), seen);
        self.health = self.probes.health(&pod, seen);
    }

    /// Whether a running sidecar counts as started (no startup probe, or it passed).
    fn sidecar_started(&self, pod: &Pod, name: &str, seen: &HashMap<String, Seen>) -> bool {
        self.probes.health(pod, seen).get(name).is_none_or(|h| h.started)
    }

    /// Kills the containers a liveness or startup probe failed (they restart under
    /// the restart policy); true if any was.
    async fn kill_unhealthy(&mut self, pod: &Pod, sandbox: &Sandbox, seen: &HashMap<String, Seen>) -> bool {
        let mut killed = false;
        for kill in self.probes.take_kills() {
            let current = seen.get(&kill.container).and_then(|s| s.latest.as_ref());
            if !current.is_some_and(|s| s.id == kill.container_id && s.state == RUNNING) {
                continue;
            }
            let spec = pod.spec.clone().unwrap_or_default();
            let Some(c) =
                spec.init_containers.iter().flatten().chain(spec.containers.iter()).find(|c| c.name == kill.container)
            else {
                continue;
            };
            let grace = kill.grace.or(spec.termination_grace_period_seconds).unwrap_or(30);
            let message = kill.kind.kill_message(&c.name, probe::restarts(pod, &c.name));
            tracing::info!(pod = self.name(), container = c.name, grace, "{message}");
            self.shared.events.container(pod, &c.name, "Normal", "Killing", message);
            let target = HookTarget {
                cri: &self.shared.cri,
                pod,
                container: c,
                container_id: &kill.container_id,
                pod_ip: sandbox.ips.first().map(String::as_str),
            };
            hooks::stop_container(&target, &self.shared.events, grace).await;
            killed = true;
        }
        killed
    }

    /// Runs the postStart hook of a just started container; on failure kills it
    /// (FailedPostStartHook) and leaves it waiting with PostStartHookError.
    async fn post_start(
        &mut self,
        pod: &Pod,
        c: &Container,
        id: &str,
        sandbox: &Sandbox,
        wake: &mut Option<Duration>,
    ) -> bool {
        let target = HookTarget {
            cri: &self.shared.cri,
            pod,
            container: c,
            container_id: id,
            pod_ip: sandbox.ips.first().map(String::as_str),
        };
        let Err(error) = hooks::post_start(&target).await else {
            return true;
        };
        tracing::warn!(pod = self.name(), container = c.name, %error, "postStart hook failed");
        // The event leaves the hook's output out, as upstream (it may hold secrets).
        self.shared.events.container(pod, &c.name, "Warning", "FailedPostStartHook", "PostStartHook failed".into());
        let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
        // Killed as any container is (its preStop hook too, as upstream's killContainer).
        hooks::stop_container(&target, &self.shared.events, grace).await;
        self.waiting.insert(c.name.clone(), ("PostStartHookError".into(), error.to_string()));
        sooner(wake, Duration::ZERO);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_prints_them() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
