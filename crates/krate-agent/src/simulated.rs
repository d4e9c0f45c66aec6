//! Simulated nodes, as kwok makes them: Nodes that register, report Ready, renew their
//! Lease like a kubelet, and move the pods bound to them through their lifecycle without
//! running anything — so the controllers and the scheduler can be exercised with
//! thousands of nodes on one machine. Real nodes come from the node agent.
//!
//! A pod steers its simulated life with annotations (set them in a workload's template):
//! - `sim.krate.dev/ready-after`: seconds from start until the pod is Ready (default 0);
//! - `sim.krate.dev/run-for`: seconds until its containers exit (default: run forever);
//! - `sim.krate.dev/exit-code`: their exit code then (default 0);
//! - `sim.krate.dev/exit-codes-by-index`: `"2=42,3=1"`, exit codes by the pod's
//!   `batch.kubernetes.io/job-completion-index` (others use exit-code);
//! - `sim.krate.dev/terminate-for`: seconds a deleted pod keeps running before its
//!   containers stop (exit code 143, phase Failed) and it is removed; without it a
//!   deleted pod is removed at once.
//!
//! Exits follow the restart policy as the kubelet does: `Never` ends the pod
//! (Succeeded on 0, Failed otherwise), `OnFailure` restarts failed containers, `Always`
//! restarts every exit. A pod being deleted is removed at once (grace period 0).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use prometheus::{IntCounterVec, IntGauge, register_int_counter_vec, register_int_gauge};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

pub const READY_AFTER: &str = "sim.krate.dev/ready-after";
pub const RUN_FOR: &str = "sim.krate.dev/run-for";
pub const EXIT_CODE: &str = "sim.krate.dev/exit-code";
pub const EXIT_CODES_BY_INDEX: &str = "sim.krate.dev/exit-codes-by-index";
pub const TERMINATE_FOR: &str = "sim.krate.dev/terminate-for";
/// Marks a Node as simulated (and by which group of simulated nodes).
pub const SIMULATED_LABEL: &str = "sim.krate.dev/node";
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

static NODES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("krate_simulated_nodes", "Simulated nodes registered by this process.").expect("registers once")
});
static POD_UPDATES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "krate_simulated_pod_updates_total",
        "Pod changes made by simulated nodes, by what was done and result.",
        &["action", "result"]
    )
    .expect("registers once")
});

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("registering simulated node {node}: {source}")]
    Register { node: String, source: kube::Error },
}

/// What the simulated nodes look like.
#[derive(Clone, Debug)]
pub struct Options {
    pub count: usize,
    /// Nodes are named `{prefix}{i}`.
    pub prefix: String,
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
    /// Nodes are spread over this many zones (`topology.kubernetes.io/zone=zone-{i % zones}`).
    pub zones: usize,
    pub labels: Vec<(String, String)>,
    /// How often each node renews its Lease (the kubelet's 10 s; the lease lasts 4×).
    pub lease_renew: Duration,
    /// At most this many pod status writes at once.
    pub concurrency: usize,
    /// Whether the nodes move their pods through their lifecycle (false: pods bound to
    /// them stay as the scheduler left them, as upstream's scheduler_perf nodes do).
    pub run_pods: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            count: 1,
            prefix: "sim-node-".into(),
            cpu: "32".into(),
            memory: "256Gi".into(),
            pods: 110,
            zones: 1,
            labels: Vec::new(),
            lease_renew: Duration::from_secs(10),
            concurrency: 32,
            run_pods: true,
        }
    }
}

impl Options {
    pub fn name(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }
}

/// Registers the nodes (creating or taking over their Node objects), then keeps them
/// alive and runs their pods until dropped. Returns the node names once registered.
pub async fn start(client: kube::Client, options: Options) -> Result<(Vec<String>, Running), Error> {
    let names: Vec<String> = (0..options.count).map(|i| options.name(i)).collect();
    let nodes: Api<Node> = Api::all(client.clone());
    let registering = futures::stream::iter(0..options.count)
        .map(|i| {
            let (nodes, options) = (nodes.clone(), &options);
            async move { register(&nodes, options, i).await }
        })
        .buffer_unordered(options.concurrency.max(1));
    let results: Vec<Result<(), Error>> = registering.collect().await;
    results.into_iter().collect::<Result<(), Error>>()?;
    NODES.add(options.count as i64);
    let mut tasks = vec![tokio::spawn(renew_leases(client.clone(), names.clone(), options.lease_renew))];
    if options.run_pods {
        tasks.push(tokio::spawn(run_pods(client, names.iter().cloned().collect(), options.clone())));
    }
    Ok((names, Running { tasks, count: options.count }))
}

/// The simulated nodes' loops; dropping this stops them (their Node objects stay, and go
/// NotReady as a stopped kubelet's would).
pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    count: usize,
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        NODES.sub(self.count as i64);
    }
}

fn node_ip(i: usize) -> String {
    format!("10.{}.{}.{}", 200 + (i >> 16) % 50, (i >> 8) & 255, i & 255)
}

fn now() -> Time {
    Time(Timestamp::now())
}

async fn register(nodes: &Api<Node>, options: &Options, i: usize) -> Result<(), Error> {
    let name = options.name(i);
    let mut labels = serde_json::Map::new();
    for (k, v) in [
        ("kubernetes.io/hostname", name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("node.kubernetes.io/instance-type", "krate-sim"),
        (SIMULATED_LABEL, options.prefix.trim_end_matches('-')),
    ] {
        labels.insert(k.into(), v.into());
    }
    labels.insert("topology.kubernetes.io/zone".into(), format!("zone-{}", i % options.zones.max(1)).into());
    for (k, v) in &options.labels {
        labels.insert(k.clone(), v.clone().into());
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {},
    }))
    .expect("node literal");
    let err = |source| Error::Register { node: name.clone(), source };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(err(e)),
    }
    let resources = json!({"cpu": options.cpu, "memory": options.memory, "pods": options.pods.to_string(),
        "ephemeral-storage": "100Gi"});
    let heartbeat = now();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": heartbeat, "lastTransitionTime": heartbeat})
    };
    let status = json!({"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status (simulated)"),
        ],
        "addresses": [{"type": "InternalIP", "address": node_ip(i)}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": format!("sim-{i}"), "systemUUID": format!("sim-{i}"), "bootID": format!("sim-{i}"),
            "kernelVersion": "simulated", "osImage": "krate simulated node", "containerRuntimeVersion": "sim://1.0",
            "kubeletVersion": "v1.36.0-krate-sim", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64"},
    }});
    nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.map_err(err)?;
    Ok(())
}

/// Every node renews its Lease in kube-node-lease, spread over the interval so the API
/// server sees a steady rate rather than bursts.
async fn renew_leases(client: kube::Client, names: Vec<String>, every: Duration) {
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let gap = every.checked_div(names.len().max(1) as u32).unwrap_or_default();
    let mut tick = tokio::time::interval(gap.max(Duration::from_micros(100)));
    let duration = (every.as_secs() * 4).max(1) as i32;
    for name in names.iter().cycle() {
        tick.tick().await;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration,
                "renewTime": MicroTime(Timestamp::now())},
        });
        let params = PatchParams::apply("krate-simulated-node").force();
        let result = leases.patch(name, &params, &Patch::Apply(&lease)).await;
        if let Err(error) = result {
            tracing::debug!(node = %name, %error, "lease renewal failed");
        }
    }
}

/// What the node does with one pod next.
#[derive(Debug, PartialEq)]
enum Step {
    /// Remove a pod being deleted.
    Remove,
    /// Write this status (a merge patch of `status`).
    Status(Value),
    /// Come back to the pod after this long.
    Later(Duration),
    Nothing,
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn seconds(pod: &Pod, key: &str) -> Option<Duration> {
    annotation(pod, key)?.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64)
}

fn exit_code(pod: &Pod) -> i32 {
    let index = pod.metadata.annotations.as_ref().and_then(|a| a.get(COMPLETION_INDEX));
    let by_index = annotation(pod, EXIT_CODES_BY_INDEX).zip(index).and_then(|(table, index)| {
        table.split(',').find_map(|entry| {
            let (i, code) = entry.split_once('=')?;
            (i.trim() == index).then(|| code.trim().parse().ok()).flatten()
        })
    });
    by_index.or_else(|| annotation(pod, EXIT_CODE)?.parse().ok()).unwrap_or(0)
}

fn started_at(pod: &Pod) -> Option<Timestamp> {
    pod.status.as_ref()?.start_time.as_ref().map(|t| t.0)
}

fn restarts(pod: &Pod) -> i32 {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    statuses.and_then(|s| s.iter().map(|c| c.restart_count).max()).unwrap_or(0)
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Decides the next step for a pod bound to one of our nodes, at time `now`.
fn next_step(pod: &Pod, node_index: usize, pod_ip: &str, now: Timestamp) -> Step {
    if let Some(deletion) = &pod.metadata.deletion_timestamp {
        if !is_terminal(pod)
            && let Some(linger) = seconds(pod, TERMINATE_FOR)
        {
            // The deletion was asked for a grace period before its timestamp.
            let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0) as u64;
            let asked = deletion.0 - Duration::from_secs(grace);
            let since = Duration::try_from(now.duration_since(asked)).unwrap_or_default();
            if since < linger {
                return Step::Later(linger - since);
            }
            let began = last_run_began(pod).or_else(|| started_at(pod)).unwrap_or(now);
            return Step::Status(terminated_status(pod, 143, began, now));
        }
        return Step::Remove;
    }
    if is_terminal(pod) {
        return Step::Nothing;
    }
    let Some(start) = started_at(pod) else {
        return Step::Status(running_status(pod, node_index, pod_ip, now, now, 0, false));
    };
    // The current run began at the start, or at the last restart.
    let run_began = last_run_began(pod).unwrap_or(start);
    let elapsed = Duration::try_from(now.duration_since(run_began)).unwrap_or_default();
    if let Some(run_for) = seconds(pod, RUN_FOR)
        && elapsed >= run_for
    {
        let code = exit_code(pod);
        let policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always");
        let restart = policy == "Always" || (policy == "OnFailure" && code != 0);
        if restart {
            return Step::Status(running_status(pod, node_index, pod_ip, start, now, restarts(pod) + 1, false));
        }
        return Step::Status(terminated_status(pod, code, run_began, now));
    }
    let ready_after = seconds(pod, READY_AFTER).unwrap_or_default();
    if !is_ready(pod) {
        if elapsed >= ready_after {
            return Step::Status(running_status(pod, node_index, pod_ip, start, run_began, restarts(pod), true));
        }
        return Step::Later(ready_after - elapsed);
    }
    match seconds(pod, RUN_FOR) {
        Some(run_for) => Step::Later(run_for.saturating_sub(elapsed)),
        None => Step::Nothing,
    }
}

fn last_run_began(pod: &Pod) -> Option<Timestamp> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref().map(|t| t.0)).max()
}

fn containers(pod: &Pod) -> Vec<(String, String)> {
    let spec = pod.spec.as_ref();
    let list = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    list.iter().map(|c| (c.name.clone(), c.image.clone().unwrap_or_default())).collect()
}

fn conditions(ready: bool, at: &Time) -> Value {
    let ready = if ready { "True" } else { "False" };
    let not_ready_reason = if ready == "True" { Value::Null } else { "ContainersNotReady".into() };
    json!([
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": at},
        {"type": "Initialized", "status": "True", "lastTransitionTime": at},
        {"type": "Ready", "status": ready, "lastTransitionTime": at, "reason": not_ready_reason},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": at, "reason": not_ready_reason},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": at},
    ])
}

fn running_status(
    pod: &Pod,
    node_index: usize,
    pod_ip: &str,
    start: Timestamp,
    run_began: Timestamp,
    restart_count: i32,
    ready: bool,
) -> Value {
    let began = Time(run_began);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let statuses: Vec<Value> = containers(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": format!("sim://{image}"),
                "containerID": format!("sim://{uid}/{name}/{restart_count}"), "ready": ready, "started": true,
                "restartCount": restart_count, "state": {"running": {"startedAt": began}}})
        })
        .collect();
    json!({
        "phase": "Running", "hostIP": node_ip(node_index), "hostIPs": [{"ip": node_ip(node_index)}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": Time(start),
        "conditions": conditions(ready, &Time(Timestamp::now())), "containerStatuses": statuses,
    })
}

fn terminated_status(pod: &Pod, code: i32, began: Timestamp, now: Timestamp) -> Value {
    let (phase, reason) = if code == 0 { ("Succeeded", "Completed") } else { ("Failed", "Error") };
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let restart_count = restarts(pod);
    let statuses: Vec<Value> = containers(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": format!("sim://{image}"),
                "containerID": format!("sim://{uid}/{name}/{restart_count}"), "ready": false, "started": false,
                "restartCount": restart_count, "state": {"terminated": {"exitCode": code, "reason": reason,
                    "startedAt": Time(began), "finishedAt": Time(now),
                    "containerID": format!("sim://{uid}/{name}/{restart_count}")}}})
        })
        .collect();
    let at = Time(now);
    json!({
        "phase": phase,
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": at},
            {"type": "Initialized", "status": "True", "lastTransitionTime": at, "reason": "PodCompleted"},
            {"type": "Ready", "status": "False", "lastTransitionTime": at, "reason": "PodCompleted"},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": at, "reason": "PodCompleted"},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at},
        ],
        "containerStatuses": statuses,
    })
}

/// Pod IPs: node i's pods get 10.{128 + i / 256}.{i % 256}.{1..254}, a pod keeping its
/// address while it exists.
#[derive(Default)]
struct Addresses {
    by_pod: HashMap<String, String>,
    next: HashMap<usize, u32>,
}

impl Addresses {
    fn for_pod(&mut self, key: &str, node_index: usize) -> String {
        if let Some(ip) = self.by_pod.get(key) {
            return ip.clone();
        }
        let n = self.next.entry(node_index).or_insert(0);
        *n += 1;
        let host = (*n - 1) % 254 + 1;
        let ip = format!("10.{}.{}.{host}", 128 + (node_index / 256) % 64, node_index % 256);
        self.by_pod.insert(key.to_string(), ip.clone());
        ip
    }
}

/// Watches the pods bound to any node (the field selector the kubelet uses, widened)
/// and drives those on our nodes; at most `concurrency` writes at once, one at a time
/// per pod, the newest state of a pod winning over older queued ones.
async fn run_pods(client: kube::Client, nodes: HashSet<String>, options: Options) {
    let pods: Api<Pod> = Api::all(client.clone());
    let index: Arc<HashMap<String, usize>> =
        Arc::new((0..options.count).map(|i| (options.name(i), i)).filter(|(n, _)| nodes.contains(n)).collect());
    let state =
        Arc::new(PodWork { client, addresses: Mutex::default(), busy: Mutex::default(), waiting: Mutex::default() });
    let permits = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let config = watcher::Config::default().fields("spec.nodeName!=");
    let mut events = kube::runtime::watcher(pods, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let pod = match event {
            Ok(Event::Apply(pod) | Event::InitApply(pod)) => pod,
            Ok(Event::Delete(pod)) => {
                state.addresses.lock().by_pod.remove(&key(&pod));
                continue;
            }
            Ok(_) => continue,
            Err(error) => {
                tracing::warn!(%error, "simulated nodes: pod watch failed; retrying");
                continue;
            }
        };
        let Some(&node_index) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| index.get(n)) else {
            continue;
        };
        state.clone().offer(pod, node_index, permits.clone());
    }
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

struct PodWork {
    client: kube::Client,
    addresses: Mutex<Addresses>,
    /// Pods with work in flight, and the newer state seen meanwhile, if any.
    busy: Mutex<HashMap<String, Option<(Pod, usize)>>>,
    /// Pods waiting for a timed change, woken early by a newer state (a deletion).
    waiting: Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
}

impl PodWork {
    fn offer(self: Arc<Self>, pod: Pod, node_index: usize, permits: Arc<Semaphore>) {
        let k = key(&pod);
        {
            let mut busy = self.busy.lock();
            if let Some(newer) = busy.get_mut(&k) {
                *newer = Some((pod, node_index));
                drop(busy);
                if let Some(waiting) = self.waiting.lock().get(&k) {
                    waiting.notify_one();
                }
                return;
            }
            busy.insert(k.clone(), None);
        }
        tokio::spawn(async move {
            let mut current = Some((pod, node_index));
            while let Some((pod, node_index)) = current.take() {
                let permit = permits.clone().acquire_owned().await.expect("semaphore stays open");
                let later = self.step(&pod, node_index).await;
                drop(permit);
                if let Some(wait) = later {
                    let wake = Arc::new(tokio::sync::Notify::new());
                    self.waiting.lock().insert(k.clone(), wake.clone());
                    // A state queued before the waker was in place is seen here.
                    if !self.busy.lock().get(&k).is_some_and(Option::is_some) {
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = wake.notified() => {}
                        }
                    }
                    self.waiting.lock().remove(&k);
                    // Come back with the newest state: a queued one, or this one again.
                    let queued = self.busy.lock().get_mut(&k).and_then(Option::take);
                    current = Some(queued.unwrap_or((pod, node_index)));
                    continue;
                }
                let mut busy = self.busy.lock();
                match busy.get_mut(&k).and_then(Option::take) {
                    Some(newer) => current = Some(newer),
                    None => {
                        busy.remove(&k);
                    }
                }
            }
        });
    }

    /// Takes one step; returns how long to wait before looking again, if the pod has a
    /// timed change ahead.
    async fn step(&self, pod: &Pod, node_index: usize) -> Option<Duration> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let ip = self.addresses.lock().for_pod(&key(pod), node_index);
        let (action, result) = match next_step(pod, node_index, &ip, Timestamp::now()) {
            Step::Nothing => return None,
            Step::Later(wait) => return Some(wait),
            Step::Remove => {
                let params = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
                let result = pods.delete(&name, &params).await.map(|_| ());
                ("remove", result)
            }
            Step::Status(status) => {
                let patch = json!({"status": status});
                let result = pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ());
                ("status", result)
            }
        };
        let outcome = match &result {
            Ok(()) => "success",
            // Gone, or changed meanwhile: the watch brings the newer state.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => "stale",
            Err(_) => "error",
        };
        POD_UPDATES.with_label_values(&[action, outcome]).inc();
        if outcome == "error" {
            tracing::debug!(pod = %key(pod), action, error = ?result.err(), "simulated node: pod update failed; retrying");
            return Some(Duration::from_millis(500));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)], restart: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1",
                "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>()},
            "spec": {"nodeName": "sim-node-0", "restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap()
    }

    fn advance(pod: &mut Pod, ip: &str, at: Timestamp) {
        let step = next_step(pod, 0, ip, at);
        let Step::Status(status) = step else { panic!("expected a status, got {step:?}") };
        let mut value = serde_json::to_value(&*pod).unwrap();
        value["status"] = status;
        *pod = serde_json::from_value(value).unwrap();
    }

    fn phase(pod: &Pod) -> &str {
        pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
    }

    #[test]
    fn pods_start_ready_unless_asked_to_wait() {
        let t0 = Timestamp::now();
        let mut p = pod(&[], "Always");
        advance(&mut p, "10.128.0.2", t0);
        assert_eq!(phase(&p), "Running");
        assert!(!is_ready(&p));
        advance(&mut p, "10.128.0.2", t0);
        assert!(is_ready(&p));
        assert_eq!(next_step(&p, 0, "10.128.0.2", t0), Step::Nothing);

        let mut slow = pod(&[(READY_AFTER, "5")], "Always");
        advance(&mut slow, "ip", t0);
        assert!(matches!(next_step(&slow, 0, "ip", t0), Step::Later(d) if d > Duration::from_secs(4)));
    }

    #[test]
    fn exits_follow_the_restart_policy_and_index_table() {
        let t0 = Timestamp::now();
        let later = t0 + Duration::from_secs(10);
        let annotations = [(RUN_FOR, "1"), (EXIT_CODES_BY_INDEX, "2=42"), (EXIT_CODE, "3")];
        let mut p = pod(&annotations, "Never");
        p.metadata.annotations.as_mut().unwrap().insert(COMPLETION_INDEX.into(), "2".into());
        advance(&mut p, "ip", t0);
        advance(&mut p, "ip", later);
        assert_eq!(phase(&p), "Failed");
        let code = p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap();
        assert_eq!(code.terminated.as_ref().unwrap().exit_code, 42);

        let mut q = pod(&[(RUN_FOR, "1"), (EXIT_CODE, "1")], "OnFailure");
        advance(&mut q, "ip", t0);
        advance(&mut q, "ip", later);
        assert_eq!(phase(&q), "Running");
        assert_eq!(restarts(&q), 1);

        let mut ok = pod(&[(RUN_FOR, "0")], "OnFailure");
        advance(&mut ok, "ip", t0);
        advance(&mut ok, "ip", later);
        assert_eq!(phase(&ok), "Succeeded");
        assert_eq!(next_step(&ok, 0, "ip", later), Step::Nothing);
    }

    #[test]
    fn deleted_pods_are_removed() {
        let mut p = pod(&[], "Always");
        p.metadata.deletion_timestamp = Some(now());
        assert_eq!(next_step(&p, 0, "ip", Timestamp::now()), Step::Remove);
    }

    #[test]
    fn deleted_pods_may_linger_then_fail() {
        let t0 = Timestamp::now();
        let mut p = pod(&[(TERMINATE_FOR, "3")], "Always");
        advance(&mut p, "ip", t0);
        p.metadata.deletion_timestamp = Some(Time(t0 + Duration::from_secs(30)));
        p.metadata.deletion_grace_period_seconds = Some(30);
        assert!(
            matches!(next_step(&p, 0, "ip", t0 + Duration::from_secs(1)), Step::Later(d) if d == Duration::from_secs(2))
        );
        advance(&mut p, "ip", t0 + Duration::from_secs(4));
        assert_eq!(phase(&p), "Failed");
        assert_eq!(next_step(&p, 0, "ip", t0 + Duration::from_secs(5)), Step::Remove);
    }
}
