//! A pod's probe tasks (upstream's prober manager and workers): one task per probe per
//! running container, replaced when the container is, stopped when it stops. Tasks
//! record Unhealthy events and metrics and publish settled results; the pod worker
//! reads them (`health`) for containerStatuses[].ready/started and acts on liveness
//! and startup failures (`take_kills`). A changed result pokes the pod worker.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{Found, Kind, Outcome, Settings, Target, Tracker};
use crate::runtime::cri::Cri;
use crate::runtime::events::PodEvents;
use crate::runtime::metrics;
use crate::runtime::pod_status::{Health, Seen};

/// What probe tasks need from the node.
#[derive(Clone)]
pub struct ProbeContext {
    pub cri: Cri,
    pub events: PodEvents,
}

/// A container a liveness or startup probe found failed: to be killed (and restarted
/// under the restart policy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub container: String,
    pub container_id: String,
    pub kind: Kind,
    /// The probe's terminationGracePeriodSeconds, if set.
    pub grace: Option<i64>,
}

#[derive(Default)]
struct Results {
    /// Settled results by container name and probe, with the container id they are about.
    settled: HashMap<(String, Kind), (String, Outcome)>,
    kills: Vec<Kill>,
}

struct Shared {
    results: Mutex<Results>,
    poke: Arc<Notify>,
}

impl Shared {
    /// Publishes a settled result; pokes the pod worker when it changed.
    fn set(&self, container: &str, id: &str, kind: Kind, outcome: Outcome) {
        let mut results = self.results.lock();
        let value = (id.to_string(), outcome);
        let previous = results.settled.insert((container.to_string(), kind), value.clone());
        drop(results);
        if previous != Some(value) {
            self.poke.notify_one();
        }
    }

    fn get(&self, container: &str, id: &str, kind: Kind) -> Option<Outcome> {
        let results = self.results.lock();
        results.settled.get(&(container.to_string(), kind)).filter(|(i, _)| i == id).map(|(_, o)| *o)
    }
}

/// The probes of one pod.
pub struct PodProbes {
    shared: Arc<Shared>,
    tasks: HashMap<(String, Kind), (String, JoinHandle<()>)>,
    /// namespace, name, uid of the pod (for the metrics' labels).
    pod_labels: Option<[String; 3]>,
}

impl Drop for PodProbes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The containers that may have probes: sidecars (restartable init containers) and
/// the main containers.
fn probed(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let sidecars = spec.into_iter().flat_map(|s| s.init_containers.iter().flatten());
    let sidecars = sidecars.filter(|c| c.restart_policy.as_deref() == Some("Always"));
    sidecars.chain(spec.into_iter().flat_map(|s| s.containers.iter()))
}

const RUNNING: i32 = cri::ContainerState::ContainerRunning as i32;

/// Whether a container killed for a failed probe starts again (sidecars always).
pub fn restarts(pod: &Pod, container: &str) -> bool {
    let spec = pod.spec.as_ref();
    let sidecar = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .any(|c| c.name == container && c.restart_policy.as_deref() == Some("Always"));
    sidecar || spec.and_then(|s| s.restart_policy.as_deref()) != Some("Never")
}

impl PodProbes {
    pub fn new(poke: Arc<Notify>) -> PodProbes {
        PodProbes {
            shared: Arc::new(Shared { results: Mutex::default(), poke }),
            tasks: HashMap::new(),
            pod_labels: None,
        }
    }

    /// Runs one task per probe of each running container (started for a container
    /// new since the last call) and stops those of containers no longer running.
    pub fn sync(&mut self, ctx: &ProbeContext, pod: &Arc<Pod>, pod_ip: Option<&str>, seen: &HashMap<String, Seen>) {
        let m = &pod.metadata;
        let labels = [m.namespace.clone(), m.name.clone(), m.uid.clone()].map(Option::unwrap_or_default);
        self.pod_labels = Some(labels.clone());
        for c in probed(pod) {
            let running = seen.get(&c.name).and_then(|s| s.latest.as_ref()).filter(|s| s.state == RUNNING);
            for kind in Kind::ALL {
                let key = (c.name.clone(), kind);
                let Some(probe) = kind.of(c) else { continue };
                let Some(status) = running else {
                    if let Some((_, task)) = self.tasks.remove(&key) {
                        task.abort();
                    }
                    continue;
                };
                if self.tasks.get(&key).is_some_and(|(id, _)| id == &status.id) {
                    continue;
                }
                if let Some((_, old)) = self.tasks.remove(&key) {
                    old.abort();
                }
                if let Some(initial) = kind.initial() {
                    self.shared.set(&c.name, &status.id, kind, initial);
                }
                let task = ProbeTask {
                    ctx: ctx.clone(),
                    shared: self.shared.clone(),
                    pod: pod.clone(),
                    container: c.clone(),
                    container_id: status.id.clone(),
                    started_at: status.started_at,
                    pod_ip: pod_ip.map(String::from),
                    kind,
                    settings: Settings::of(kind, probe),
                    has_startup: c.startup_probe.is_some(),
                    labels: labels.clone(),
                };
                tracing::debug!(pod = labels[1], container = c.name, probe = kind.title(), "probe started");
                self.tasks.insert(key, (status.id.clone(), tokio::spawn(task.run())));
            }
        }
    }

    /// started and ready of each running probed container, by name (containers without
    /// probes are absent: started and ready while running).
    pub fn health(&self, pod: &Pod, seen: &HashMap<String, Seen>) -> HashMap<String, Health> {
        let mut out = HashMap::new();
        for c in probed(pod) {
            if c.startup_probe.is_none() && c.readiness_probe.is_none() {
                continue;
            }
            let Some(s) = seen.get(&c.name).and_then(|s| s.latest.as_ref()).filter(|s| s.state == RUNNING) else {
                continue;
            };
            out.insert(c.name.clone(), self.health_of(c, &s.id));
        }
        out
    }

    fn health_of(&self, c: &Container, id: &str) -> Health {
        let passed = |kind| self.shared.get(&c.name, id, kind) == Some(Outcome::Success);
        let started = c.startup_probe.is_none() || passed(Kind::Startup);
        let ready = started && (c.readiness_probe.is_none() || passed(Kind::Readiness));
        Health { started, ready }
    }

    /// Liveness and startup failures not yet acted on.
    pub fn take_kills(&self) -> Vec<Kill> {
        std::mem::take(&mut self.shared.results.lock().kills)
    }

    /// Stops every task (the pod is stopping or gone) and forgets its metric series.
    pub fn stop_all(&mut self) {
        for (_, (_, task)) in self.tasks.drain() {
            task.abort();
        }
        if let Some([namespace, name, uid]) = self.pod_labels.take() {
            metrics::forget_probes(&namespace, &name, &uid);
        }
    }
}

/// One probe of one container.
struct ProbeTask {
    ctx: ProbeContext,
    shared: Arc<Shared>,
    pod: Arc<Pod>,
    container: Container,
    container_id: String,
    /// When the container started (ns since the epoch), for initialDelaySeconds.
    started_at: i64,
    pod_ip: Option<String>,
    kind: Kind,
    settings: Settings,
    has_startup: bool,
    /// namespace, name, uid.
    labels: [String; 3],
}

/// How long an identical Unhealthy event is held back.
const EVENT_REPEAT: Duration = Duration::from_secs(60);

impl ProbeTask {
    async fn run(self) {
        let started = std::time::UNIX_EPOCH + Duration::from_nanos(self.started_at.max(0) as u64);
        let since = std::time::SystemTime::now().duration_since(started).unwrap_or_default();
        tokio::time::sleep(self.settings.initial_delay.saturating_sub(since)).await;
        let mut tracker = Tracker::new(&self.settings);
        let mut recorded: HashMap<String, Instant> = HashMap::new();
        let name = &self.container.name;
        // A probe every period from the start of the last (upstream's ticker).
        let mut ticker = tokio::time::interval(self.settings.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let gated = self.kind != Kind::Startup
                && self.has_startup
                && self.shared.get(name, &self.container_id, Kind::Startup) != Some(Outcome::Success);
            if !gated {
                let outcome = self.probe_once(&mut recorded).await;
                if let Some(settled) = tracker.record(outcome) {
                    self.shared.set(name, &self.container_id, self.kind, settled);
                    match (self.kind, settled) {
                        (Kind::Liveness | Kind::Startup, Outcome::Failure) => {
                            tracing::info!(
                                pod = self.labels[1],
                                container = name,
                                probe = self.kind.title(),
                                "probe failed past its threshold; the container will be killed"
                            );
                            let kill = Kill {
                                container: name.clone(),
                                container_id: self.container_id.clone(),
                                kind: self.kind,
                                grace: self.settings.termination_grace,
                            };
                            self.shared.results.lock().kills.push(kill);
                            self.shared.poke.notify_one();
                            tracker.reset();
                            // On hold until the container is replaced (this task with it).
                            return;
                        }
                        // Startup probing ends once the container has started.
                        (Kind::Startup, Outcome::Success) => return,
                        _ => {}
                    }
                }
            }
        }
    }

    /// Runs the action once; records the event and the metric.
    async fn probe_once(&self, recorded: &mut HashMap<String, Instant>) -> Outcome {
        let probe = self.kind.of(&self.container).cloned().unwrap_or_default();
        let target = Target {
            ctx: &self.ctx,
            container: &self.container,
            container_id: &self.container_id,
            pod_ip: self.pod_ip.as_deref(),
        };
        let began = Instant::now();
        let found = super::run(&probe, &target, self.settings.timeout).await;
        let title = self.kind.title();
        let (outcome, result, event) = match found {
            Ok(Found::Success) => (Outcome::Success, "successful", None),
            Ok(Found::Warning(m)) => {
                (Outcome::Success, "successful", Some(("ProbeWarning", format!("{title} probe warning: {m}"))))
            }
            Ok(Found::Failure(m)) => {
                (Outcome::Failure, "failed", Some(("Unhealthy", format!("{title} probe failed: {m}"))))
            }
            Err(e) => (
                Outcome::Failure,
                "unknown",
                Some(("Unhealthy", format!("{title} probe errored and resulted in unknown state: {e}"))),
            ),
        };
        let [namespace, pod, uid] = &self.labels;
        metrics::probe_result(self.kind.label(), result, &self.container.name, pod, namespace, uid);
        if outcome == Outcome::Success {
            metrics::probe_duration(self.kind.label(), &self.container.name, pod, namespace, began.elapsed());
        }
        tracing::debug!(pod, container = self.container.name, probe = title, result, "probe ran");
        if let Some((reason, message)) = event {
            recorded.retain(|_, at| at.elapsed() < EVENT_REPEAT);
            if !recorded.contains_key(&message) {
                recorded.insert(message.clone(), Instant::now());
                self.ctx.events.container(&self.pod, &self.container.name, "Warning", reason, message);
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(policy: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u"},
            "spec": {"restartPolicy": policy,
                "initContainers": [{"name": "side", "restartPolicy": "Always",
                    "readinessProbe": {"exec": {"command": ["true"]}}}],
                "containers": [
                    {"name": "plain"},
                    {"name": "web", "startupProbe": {"exec": {"command": ["true"]}},
                        "readinessProbe": {"exec": {"command": ["true"]}}}]}
        }))
        .unwrap()
    }

    fn running(id: &str) -> Seen {
        Seen {
            latest: Some(cri::ContainerStatus { id: id.into(), state: RUNNING, ..Default::default() }),
            previous: None,
        }
    }

    #[test]
    fn restart_after_a_kill_follows_the_policy() {
        assert!(restarts(&pod("Always"), "web"));
        assert!(restarts(&pod("OnFailure"), "web"));
        assert!(!restarts(&pod("Never"), "web"));
        assert!(restarts(&pod("Never"), "side"));
    }

    #[test]
    fn health_from_settled_results_of_the_current_container() {
        let probes = PodProbes::new(Arc::new(Notify::new()));
        let p = pod("Always");
        let seen: HashMap<String, Seen> =
            [("side", "s1"), ("plain", "p1"), ("web", "w1")].map(|(n, id)| (n.to_string(), running(id))).into();
        let h = probes.health(&p, &seen);
        assert!(!h.contains_key("plain"), "no probes: started and ready as it runs");
        assert_eq!(h["web"], Health { started: false, ready: false });
        assert_eq!(h["side"], Health { started: true, ready: false });
        // Readiness alone does not make a container that has not started ready.
        probes.shared.set("web", "w1", Kind::Readiness, Outcome::Success);
        assert_eq!(probes.health(&p, &seen)["web"], Health { started: false, ready: false });
        probes.shared.set("web", "w1", Kind::Startup, Outcome::Success);
        assert_eq!(probes.health(&p, &seen)["web"], Health { started: true, ready: true });
        // Results about an earlier container do not count for its replacement.
        let mut replaced = seen.clone();
        replaced.insert("web".into(), running("w2"));
        assert_eq!(probes.health(&p, &replaced)["web"], Health { started: false, ready: false });
        probes.shared.set("side", "s1", Kind::Readiness, Outcome::Success);
        assert_eq!(probes.health(&p, &seen)["side"], Health { started: true, ready: true });
    }

    #[test]
    fn only_changes_poke_the_worker() {
        use futures::FutureExt;
        let poke = Arc::new(Notify::new());
        let probes = PodProbes::new(poke.clone());
        probes.shared.set("web", "w1", Kind::Readiness, Outcome::Failure);
        assert!(poke.notified().now_or_never().is_some(), "a new result pokes");
        probes.shared.set("web", "w1", Kind::Readiness, Outcome::Failure);
        assert!(poke.notified().now_or_never().is_none(), "the same result does not");
        probes.shared.set("web", "w1", Kind::Readiness, Outcome::Success);
        assert!(poke.notified().now_or_never().is_some(), "a changed result pokes");
    }
}
