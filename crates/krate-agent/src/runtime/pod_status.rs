//! A pod's status from what the runtime reports: container states, phase and
//! conditions, computed as the kubelet does (upstream's getPhase and status helpers).
//! Pure, so it is unit tested without a runtime.

use std::collections::{BTreeMap, HashMap};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The latest and previous runtime containers of one pod container.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub latest: Option<cri::ContainerStatus>,
    pub previous: Option<cri::ContainerStatus>,
}

/// What a container's probes say of it (only for running containers with a startup
/// or readiness probe; others are started and ready while running).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub started: bool,
    pub ready: bool,
}

/// Everything the status is computed from.
pub struct Observed<'a> {
    pub pod: &'a Pod,
    pub host_ip: &'a str,
    pub pod_ips: &'a [String],
    pub sandbox_ready: bool,
    pub containers: &'a HashMap<String, Seen>,
    /// Why a container is waiting (back-off, image or create failures), by name.
    pub waiting: &'a HashMap<String, (String, String)>,
    /// Probe results by container name.
    pub health: &'a HashMap<String, Health>,
    pub initialized: bool,
    pub start_time: Timestamp,
    /// The status last written (transition times carry over from it).
    pub previous: Option<&'a PodStatus>,
    pub now: Timestamp,
}

const RUNNING: i32 = cri::ContainerState::ContainerRunning as i32;
const EXITED: i32 = cri::ContainerState::ContainerExited as i32;

fn time(ns: i64) -> Option<Time> {
    (ns > 0).then(|| Time(Timestamp::from_nanosecond(ns as i128).unwrap_or(Timestamp::UNIX_EPOCH)))
}

/// The terminated state of an exited runtime container.
pub fn terminated(c: &cri::ContainerStatus) -> ContainerStateTerminated {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: Some(reason),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: time(c.started_at),
        finished_at: time(c.finished_at),
        container_id: Some(format!("containerd://{}", c.id)),
        signal: None,
    }
}

fn waiting(reason: &str, message: Option<&str>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message: message.map(Into::into) }),
        ..Default::default()
    }
}

/// One container's status. `not_reached` names the waiting reason for a container
/// whose turn has not come (PodInitializing), else ContainerCreating.
fn container_status(o: &Observed, spec: &Container, not_reached: &str, init_regular: bool) -> ContainerStatus {
    let seen = o.containers.get(&spec.name).cloned().unwrap_or_default();
    let latest = seen.latest.as_ref();
    let last_terminated = |c: Option<&cri::ContainerStatus>| {
        c.filter(|c| c.state == EXITED)
            .map(|c| ContainerState { terminated: Some(terminated(c)), ..Default::default() })
    };
    let (state, last_state) = match (o.waiting.get(&spec.name), latest) {
        (Some((reason, message)), latest) => (
            waiting(reason, Some(message)),
            last_terminated(latest).or_else(|| last_terminated(seen.previous.as_ref())),
        ),
        (None, Some(c)) if c.state == RUNNING => (
            ContainerState {
                running: Some(ContainerStateRunning { started_at: time(c.started_at) }),
                ..Default::default()
            },
            last_terminated(seen.previous.as_ref()),
        ),
        (None, Some(c)) if c.state == EXITED => (
            ContainerState { terminated: Some(terminated(c)), ..Default::default() },
            last_terminated(seen.previous.as_ref()),
        ),
        (None, Some(_)) => (waiting("ContainerCreating", None), last_terminated(seen.previous.as_ref())),
        (None, None) => (waiting(not_reached, None), None),
    };
    let running = state.running.is_some();
    let health = o.health.get(&spec.name).filter(|_| running);
    let started = running && health.is_none_or(|h| h.started);
    let completed = state.terminated.as_ref().is_some_and(|t| t.exit_code == 0);
    ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: latest.map(|c| c.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|c| format!("containerd://{}", c.id)),
        // A running container is ready once its probes say so (at once without
        // probes); a completed init container too.
        ready: if init_regular { completed } else { started && health.is_none_or(|h| h.ready) },
        started: Some(started),
        restart_count: latest.and_then(|c| c.metadata.as_ref()).map_or(0, |m| m.attempt as i32),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ..Default::default()
    }
}

/// Upstream's getPhase over the main containers.
fn phase(o: &Observed, statuses: &[ContainerStatus], init_statuses: &[ContainerStatus]) -> &'static str {
    let policy = o.pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always");
    if !o.initialized {
        let init_failed = init_statuses.iter().zip(init_specs(o.pod)).any(|(s, spec)| {
            spec.restart_policy.as_deref() != Some("Always")
                && s.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code != 0)
        });
        return if init_failed && policy == "Never" { "Failed" } else { "Pending" };
    }
    let (mut running, mut waiting_n, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in statuses {
        let state = s.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s.last_state.as_ref().is_some_and(|l| l.terminated.is_some()) {
            stopped += 1;
        } else {
            waiting_n += 1;
        }
    }
    match () {
        _ if waiting_n > 0 => "Pending",
        _ if running > 0 => "Running",
        _ if stopped > 0 => match policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "OnFailure" => "Running",
            _ => "Failed",
        },
        _ => "Pending",
    }
}

/// Ephemeral containers (never ready, never restarted).
fn ephemeral_statuses(o: &Observed) -> Option<Vec<ContainerStatus>> {
    let specs = o.pod.spec.iter().flat_map(|s| s.ephemeral_containers.iter().flatten());
    let statuses: Vec<ContainerStatus> = specs
        .filter_map(ephemeral_as_container)
        .map(|c| ContainerStatus { ready: false, ..container_status(o, &c, "ContainerCreating", false) })
        .collect();
    (!statuses.is_empty()).then_some(statuses)
}

fn init_specs(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten())
}

fn main_specs(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| s.containers.iter())
}

/// Whether the phase is final (the pod's containers will not run again).
pub fn is_terminal(phase: &str) -> bool {
    phase == "Succeeded" || phase == "Failed"
}

/// An ephemeral container's spec as a Container (the same fields, less the target).
pub fn ephemeral_as_container(e: &k8s_openapi::api::core::v1::EphemeralContainer) -> Option<Container> {
    serde_json::to_value(e).ok().and_then(|v| serde_json::from_value(v).ok())
}

pub fn compute(o: &Observed) -> PodStatus {
    let init_statuses: Vec<ContainerStatus> = init_specs(o.pod)
        .map(|c| container_status(o, c, "PodInitializing", c.restart_policy.as_deref() != Some("Always")))
        .collect();
    let not_reached = if o.initialized { "ContainerCreating" } else { "PodInitializing" };
    let statuses: Vec<ContainerStatus> =
        main_specs(o.pod).map(|c| container_status(o, c, not_reached, false)).collect();
    let phase = phase(o, &statuses, &init_statuses);

    let incomplete: Vec<&str> = init_statuses.iter().filter(|s| !s.ready).map(|s| s.name.as_str()).collect();
    let sidecars_unready = init_statuses
        .iter()
        .zip(init_specs(o.pod))
        .filter(|(s, spec)| spec.restart_policy.as_deref() == Some("Always") && !s.ready)
        .map(|(s, _)| s.name.as_str());
    let unready: Vec<&str> =
        sidecars_unready.chain(statuses.iter().filter(|s| !s.ready).map(|s| s.name.as_str())).collect();
    let gates_ok = o.pod.spec.iter().flat_map(|s| s.readiness_gates.iter().flatten()).all(|g| {
        let conditions = o.pod.status.iter().flat_map(|s| s.conditions.iter().flatten());
        conditions.clone().any(|c| c.type_ == g.condition_type && c.status == "True")
    });

    let mut owned: Vec<(&str, bool, Option<&str>, Option<String>)> = Vec::new();
    owned.push(("PodReadyToStartContainers", o.sandbox_ready, None, None));
    owned.push((
        "Initialized",
        o.initialized,
        (!o.initialized).then_some("ContainersNotInitialized"),
        (!o.initialized).then(|| format!("containers with incomplete status: [{}]", incomplete.join(" "))),
    ));
    let terminal = is_terminal(phase);
    let containers_ready = unready.is_empty() && !terminal;
    let (reason, message) = if terminal {
        (Some("PodCompleted"), None)
    } else if !unready.is_empty() {
        (Some("ContainersNotReady"), Some(format!("containers with unready status: [{}]", unready.join(" "))))
    } else {
        (None, None)
    };
    owned.push(("ContainersReady", containers_ready, reason, message.clone()));
    let (ready_reason, ready_message) = if containers_ready && !gates_ok {
        (Some("ReadinessGatesNotReady"), Some("the status of pod readiness gate is not \"True\"".to_string()))
    } else {
        (reason, message)
    };
    owned.push(("Ready", containers_ready && gates_ok, ready_reason, ready_message));

    let before: BTreeMap<&str, &PodCondition> =
        o.previous.iter().flat_map(|s| s.conditions.iter().flatten()).map(|c| (c.type_.as_str(), c)).collect();
    let mut conditions: Vec<PodCondition> = o
        .pod
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| !owned.iter().any(|(t, ..)| *t == c.type_))
        .cloned()
        .collect();
    // A pod the agent runs was scheduled, whoever bound it (upstream adds the condition too).
    if !conditions.iter().any(|c| c.type_ == "PodScheduled") {
        let since = before.get("PodScheduled").and_then(|c| c.last_transition_time.clone()).unwrap_or(Time(o.now));
        conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: Some(since),
            ..Default::default()
        });
    }
    for (type_, ok, reason, message) in owned {
        let status = if ok { "True" } else { "False" };
        let since = before
            .get(type_)
            .filter(|c| c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(o.now));
        conditions.push(PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            message,
            last_transition_time: Some(since),
            ..Default::default()
        });
    }

    let existing = o.pod.status.clone().unwrap_or_default();
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(o.host_ip.into()),
        host_ips: Some(vec![HostIP { ip: o.host_ip.into() }]),
        pod_ip: o.pod_ips.first().cloned(),
        pod_ips: (!o.pod_ips.is_empty()).then(|| o.pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: Some(existing.start_time.clone().unwrap_or(Time(o.start_time))),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ephemeral_container_statuses: ephemeral_statuses(o),
        qos_class: existing.qos_class.clone(),
        observed_generation: o.pod.metadata.generation,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(policy: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u1"},
            "spec": {"restartPolicy": policy,
                "initContainers": [{"name": "init", "image": "i"}, {"name": "side", "image": "i", "restartPolicy": "Always"}],
                "containers": [{"name": "main", "image": "i"}]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]},
        }))
        .unwrap()
    }

    fn cri_status(id: &str, attempt: u32, state: cri::ContainerState, exit: i32) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata { name: "x".into(), attempt }),
            state: state as i32,
            started_at: 1_700_000_000_000_000_000,
            finished_at: if state == cri::ContainerState::ContainerExited { 1_700_000_001_000_000_000 } else { 0 },
            exit_code: exit,
            ..Default::default()
        }
    }

    fn observe<'a>(
        pod: &'a Pod,
        containers: &'a HashMap<String, Seen>,
        waiting: &'a HashMap<String, (String, String)>,
        initialized: bool,
    ) -> PodStatus {
        compute(&Observed {
            pod,
            host_ip: "10.0.0.1",
            pod_ips: &["10.42.0.2".to_string()],
            sandbox_ready: true,
            containers,
            waiting,
            health: &HashMap::new(),
            initialized,
            start_time: Timestamp::UNIX_EPOCH,
            previous: None,
            now: Timestamp::UNIX_EPOCH,
        })
    }

    fn condition<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn ephemeral_containers_get_statuses_but_no_say_in_readiness() {
        let mut p = pod("Always");
        let e = serde_json::json!([{"name": "debugger", "image": "i", "targetContainerName": "main"}]);
        p.spec.as_mut().unwrap().ephemeral_containers = Some(serde_json::from_value(e).unwrap());
        let running =
            |id| Seen { latest: Some(cri_status(id, 0, cri::ContainerState::ContainerRunning, 0)), previous: None };
        let mut seen = HashMap::from([("main".to_string(), running("m")), ("side".to_string(), running("s"))]);
        let s = observe(&p, &seen, &HashMap::new(), true);
        let debugger = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            debugger.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(),
            Some("ContainerCreating")
        );
        assert_eq!(condition(&s, "Ready").status, "True");
        seen.insert("debugger".into(), running("d"));
        let s = observe(&p, &seen, &HashMap::new(), true);
        let debugger = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
        assert!(debugger.state.as_ref().unwrap().running.is_some() && !debugger.ready);
        assert_eq!(debugger.container_id.as_deref(), Some("containerd://d"));
    }

    #[test]
    fn probes_decide_started_and_ready() {
        let p = pod("Always");
        let mut seen = HashMap::new();
        for name in ["init", "side", "main"] {
            let state = if name == "init" {
                cri::ContainerState::ContainerExited
            } else {
                cri::ContainerState::ContainerRunning
            };
            seen.insert(name.to_string(), Seen { latest: Some(cri_status(name, 0, state, 0)), previous: None });
        }
        let none = HashMap::new();
        let mut health = HashMap::new();
        health.insert("main".to_string(), Health { started: true, ready: false });
        health.insert("side".to_string(), Health { started: false, ready: false });
        let s = compute(&Observed {
            pod: &p,
            host_ip: "10.0.0.1",
            pod_ips: &[],
            sandbox_ready: true,
            containers: &seen,
            waiting: &none,
            health: &health,
            initialized: true,
            start_time: Timestamp::UNIX_EPOCH,
            previous: None,
            now: Timestamp::UNIX_EPOCH,
        });
        let main = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!((main.started, main.ready), (Some(true), false));
        let side = &s.init_container_statuses.as_ref().unwrap()[1];
        assert_eq!((side.started, side.ready), (Some(false), false));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let ready = condition(&s, "ContainersReady");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.message.as_deref(), Some("containers with unready status: [side main]"));
        assert_eq!(condition(&s, "Ready").status, "False");

        health.insert("main".to_string(), Health { started: true, ready: true });
        health.insert("side".to_string(), Health { started: true, ready: true });
        let s = observe_with(&p, &seen, &none, &health);
        assert_eq!(condition(&s, "ContainersReady").status, "True");
        assert_eq!(condition(&s, "Ready").status, "True");
    }

    #[test]
    fn readiness_gates_hold_ready_until_true() {
        let mut p = pod("Always");
        p.spec.as_mut().unwrap().readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: "example.com/gate".into() }]);
        let mut seen = HashMap::new();
        seen.insert(
            "init".to_string(),
            Seen { latest: Some(cri_status("i", 0, cri::ContainerState::ContainerExited, 0)), previous: None },
        );
        for name in ["side", "main"] {
            seen.insert(
                name.to_string(),
                Seen { latest: Some(cri_status(name, 0, cri::ContainerState::ContainerRunning, 0)), previous: None },
            );
        }
        let none = HashMap::new();
        let s = observe_with(&p, &seen, &none, &HashMap::new());
        assert_eq!(condition(&s, "ContainersReady").status, "True");
        let ready = condition(&s, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("ReadinessGatesNotReady")));
        p.status.as_mut().unwrap().conditions.as_mut().unwrap().push(PodCondition {
            type_: "example.com/gate".into(),
            status: "True".into(),
            ..Default::default()
        });
        let s = observe_with(&p, &seen, &none, &HashMap::new());
        assert_eq!(condition(&s, "Ready").status, "True");
    }

    fn observe_with<'a>(
        pod: &'a Pod,
        containers: &'a HashMap<String, Seen>,
        waiting: &'a HashMap<String, (String, String)>,
        health: &'a HashMap<String, Health>,
    ) -> PodStatus {
        compute(&Observed {
            pod,
            host_ip: "10.0.0.1",
            pod_ips: &[],
            sandbox_ready: true,
            containers,
            waiting,
            health,
            initialized: true,
            start_time: Timestamp::UNIX_EPOCH,
            previous: None,
            now: Timestamp::UNIX_EPOCH,
        })
    }

    #[test]
    fn pending_while_initializing_then_running_and_ready() {
        let p = pod("Always");
        let mut seen = HashMap::new();
        seen.insert(
            "init".into(),
            Seen { latest: Some(cri_status("a", 0, cri::ContainerState::ContainerRunning, 0)), previous: None },
        );
        let none = HashMap::new();
        let s = observe(&p, &seen, &none, false);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(
            condition(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [init side]")
        );
        let main = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(main.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("PodInitializing"));
        assert_eq!(condition(&s, "PodScheduled").status, "True");

        seen.insert(
            "init".into(),
            Seen { latest: Some(cri_status("a", 0, cri::ContainerState::ContainerExited, 0)), previous: None },
        );
        seen.insert(
            "side".into(),
            Seen { latest: Some(cri_status("b", 0, cri::ContainerState::ContainerRunning, 0)), previous: None },
        );
        seen.insert(
            "main".into(),
            Seen { latest: Some(cri_status("c", 0, cri::ContainerState::ContainerRunning, 0)), previous: None },
        );
        let s = observe(&p, &seen, &none, true);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(condition(&s, "Ready").status, "True");
        assert_eq!(condition(&s, "Initialized").status, "True");
        let init = &s.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!(init.state.as_ref().unwrap().terminated.as_ref().unwrap().reason.as_deref(), Some("Completed"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.42.0.2"));
    }

    #[test]
    fn crash_loop_shows_waiting_reason_last_state_and_restarts() {
        let p = pod("Always");
        let mut seen = HashMap::new();
        for name in ["init", "side"] {
            let state = if name == "init" {
                cri::ContainerState::ContainerExited
            } else {
                cri::ContainerState::ContainerRunning
            };
            seen.insert(name.to_string(), Seen { latest: Some(cri_status(name, 0, state, 0)), previous: None });
        }
        seen.insert(
            "main".into(),
            Seen {
                latest: Some(cri_status("c2", 2, cri::ContainerState::ContainerExited, 3)),
                previous: Some(cri_status("c1", 1, cri::ContainerState::ContainerExited, 3)),
            },
        );
        let waiting = HashMap::from([("main".to_string(), ("CrashLoopBackOff".to_string(), "back-off".to_string()))]);
        let s = observe(&p, &seen, &waiting, true);
        let main = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(main.restart_count, 2);
        assert_eq!(main.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("CrashLoopBackOff"));
        let last = main.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(condition(&s, "ContainersReady").message.as_deref(), Some("containers with unready status: [main]"));
    }

    #[test]
    fn never_policy_ends_succeeded_or_failed() {
        let mut p = pod("Never");
        p.spec.as_mut().unwrap().init_containers = None;
        let none = HashMap::new();
        let mut seen = HashMap::new();
        seen.insert(
            "main".into(),
            Seen { latest: Some(cri_status("c", 0, cri::ContainerState::ContainerExited, 0)), previous: None },
        );
        let s = observe(&p, &seen, &none, true);
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(condition(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        seen.insert(
            "main".into(),
            Seen { latest: Some(cri_status("c", 0, cri::ContainerState::ContainerExited, 1)), previous: None },
        );
        assert_eq!(observe(&p, &seen, &none, true).phase.as_deref(), Some("Failed"));
    }
}
