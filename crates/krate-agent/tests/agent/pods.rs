//! Pods through the agent's runtime: lifecycle, ordering, restarts, statuses, deletion.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use krate_testkit::pod_ready;
use kube::api::DeleteParams;

use crate::common::{BUSYBOX, QUICK, TestNode};

fn statuses(pod: &Pod) -> Vec<ContainerStatus> {
    pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default()
}

fn init_statuses(pod: &Pod) -> Vec<ContainerStatus> {
    pod.status.as_ref().and_then(|s| s.init_container_statuses.clone()).unwrap_or_default()
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

fn sleeper(name: &str) -> serde_json::Value {
    serde_json::json!({"name": name, "image": BUSYBOX, "command": ["sleep", "3600"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busybox_pod_runs_ready_with_ip_env_and_working_dir() {
    let node = TestNode::start().await;
    let created = node
        .create_pod(
            "web",
            serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"], "workingDir": "/bin",
                "env": [
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "GREETING", "value": "hello $(POD) $$(POD) $(NOPE)"},
                    {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
            }]}),
        )
        .await;
    let started = Instant::now();
    let pod = node
        .wait_pod("web", "pod Running and Ready", QUICK, |p| (phase(p) == "Running" && pod_ready(p)).then(|| p.clone()))
        .await;
    eprintln!("pod Running and Ready after {:?}", started.elapsed());
    let status = pod.status.clone().unwrap();
    let ip = status.pod_ip.clone().expect("pod IP");
    let prefix = node.config.pod_cidr.rsplit_once('.').unwrap().0;
    assert!(ip.starts_with(prefix), "pod IP {ip} from {}", node.config.pod_cidr);
    assert_eq!(status.pod_ips.unwrap()[0].ip, ip);
    assert_eq!(status.host_ip.as_deref(), Some(node.config.node_ip.as_str()));
    assert!(status.start_time.is_some());
    for wanted in ["PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(condition(&pod, wanted).as_deref(), Some("True"), "{wanted}");
    }
    let c = &statuses(&pod)[0];
    assert!(c.ready && c.started == Some(true) && c.restart_count == 0);
    assert!(c.state.as_ref().unwrap().running.is_some());
    assert!(c.container_id.as_deref().unwrap().starts_with("containerd://"));

    let env = node.exec(&uid(&created), "c", &["sh", "-c", "echo \"$GREETING|$MY_IP|$(pwd)\""]).await;
    assert_eq!(env.trim(), format!("hello web $(POD) $(NOPE)|{ip}|/bin"));
    let hostname = node.exec(&uid(&created), "c", &["hostname"]).await;
    assert_eq!(hostname.trim(), "web");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_container_restarts_with_back_off() {
    let node = TestNode::start().await;
    node.create_pod(
        "crash",
        serde_json::json!({"containers": [
        {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", "exit 3"]}]}),
    )
    .await;
    // First crash: restarted at once; second: held back 10 s (CrashLoopBackOff).
    let pod = node
        .wait_pod("crash", "CrashLoopBackOff", QUICK, |p| {
            let c = statuses(p).into_iter().next()?;
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then(|| p.clone())
        })
        .await;
    let backoff_seen = Instant::now();
    let c = &statuses(&pod)[0];
    assert_eq!(c.restart_count, 1, "one immediate restart before the back-off");
    let message = c.state.as_ref().unwrap().waiting.as_ref().unwrap().message.clone().unwrap();
    assert!(message.starts_with("back-off 10s restarting failed container=c pod=crash_default("), "{message}");
    let last = c.last_state.as_ref().unwrap().terminated.as_ref().expect("lastState.terminated");
    assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
    assert!(!c.ready);
    assert_eq!(phase(&pod), "Running", "restartPolicy Always keeps the pod Running");
    assert_eq!(condition(&pod, "Ready").as_deref(), Some("False"));

    // The next restart comes only after the 10 s back-off.
    node.wait_pod("crash", "second restart", Duration::from_secs(25), |p| {
        (statuses(p).first()?.restart_count >= 2).then_some(())
    })
    .await;
    let waited = backoff_seen.elapsed();
    assert!(waited >= Duration::from_secs(5), "restarted after {waited:?}, before the back-off ran out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_before_containers() {
    let node = TestNode::start().await;
    node.create_pod(
        "inits",
        serde_json::json!({
            "initContainers": [
                {"name": "first", "image": BUSYBOX, "command": ["sleep", "1"]},
                {"name": "second", "image": BUSYBOX, "command": ["sleep", "1"]},
            ],
            "containers": [sleeper("main")],
        }),
    )
    .await;
    let pending = node
        .wait_pod("inits", "pod initializing", QUICK, |p| {
            let first = init_statuses(p).into_iter().next()?;
            first.state.as_ref()?.running.as_ref().map(|_| p.clone())
        })
        .await;
    assert_eq!(phase(&pending), "Pending");
    assert_eq!(condition(&pending, "Initialized").as_deref(), Some("False"));
    let main = &statuses(&pending)[0];
    assert_eq!(main.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("PodInitializing"));
    let second = &init_statuses(&pending)[1];
    assert!(second.state.as_ref().unwrap().waiting.is_some(), "second waits for first");

    let pod = node
        .wait_pod("inits", "pod Running", QUICK, |p| (phase(p) == "Running" && pod_ready(p)).then(|| p.clone()))
        .await;
    assert_eq!(condition(&pod, "Initialized").as_deref(), Some("True"));
    let inits = init_statuses(&pod);
    let term = |s: &ContainerStatus| s.state.clone().unwrap().terminated.expect("init container terminated");
    let (first, second) = (term(&inits[0]), term(&inits[1]));
    assert_eq!((first.reason.as_deref(), second.reason.as_deref()), (Some("Completed"), Some("Completed")));
    let main_started = statuses(&pod)[0].state.clone().unwrap().running.unwrap().started_at.unwrap();
    let (f_start, s_start) = (first.started_at.unwrap(), second.started_at.unwrap());
    assert!(f_start.0 < s_start.0, "first {f_start:?} before second {s_start:?}");
    assert!(s_start.0 < main_started.0, "second {s_start:?} before main {main_started:?}");
    assert!(first.finished_at.unwrap().0 <= s_start.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_starts_before_the_main_container_and_stops_after_it() {
    let node = TestNode::start().await;
    let created = node
        .create_pod(
            "side",
            serde_json::json!({
                "restartPolicy": "Never",
                "initContainers": [{"name": "proxy", "image": BUSYBOX, "restartPolicy": "Always", "command": ["sleep", "3600"]}],
                "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "2"]}],
            }),
        )
        .await;
    let running = node.wait_pod("side", "pod Running", QUICK, |p| (phase(p) == "Running").then(|| p.clone())).await;
    let proxy = &init_statuses(&running)[0];
    assert!(proxy.state.as_ref().unwrap().running.is_some(), "the sidecar keeps running");
    // The main container ends: the pod completes and the sidecar is stopped after it.
    let done = node.wait_pod("side", "pod Succeeded", QUICK, |p| (phase(p) == "Succeeded").then(|| p.clone())).await;
    assert_eq!(condition(&done, "Ready").as_deref(), Some("False"));
    let containers = crate::common::eventually_async("sidecar stopped", QUICK, || async {
        let all = node.cri_containers(&uid(&created)).await;
        all.iter().all(|c| c.state == k8s_cri::v1::ContainerState::ContainerExited as i32).then_some(all)
    })
    .await;
    let find = |name: &str| containers.iter().find(|c| c.metadata.as_ref().unwrap().name == name).unwrap().clone();
    let (proxy, main) = (find("proxy"), find("main"));
    assert!(proxy.created_at < main.created_at, "sidecar created before main");
    assert!(proxy.started_at < main.started_at, "sidecar started before main");
    assert!(proxy.finished_at > main.finished_at, "sidecar stopped after main");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_reasons_decide_the_phase() {
    let node = TestNode::start().await;
    node.create_pod(
        "mixed",
        serde_json::json!({"restartPolicy": "Never", "containers": [
            {"name": "ok", "image": BUSYBOX, "command": ["true"]},
            {"name": "bad", "image": BUSYBOX, "command": ["sh", "-c", "echo oops; exit 7"]},
        ]}),
    )
    .await;
    node.create_pod(
        "fine",
        serde_json::json!({"restartPolicy": "OnFailure", "containers": [
        {"name": "ok", "image": BUSYBOX, "command": ["true"]}]}),
    )
    .await;
    let failed = node.wait_pod("mixed", "pod Failed", QUICK, |p| (phase(p) == "Failed").then(|| p.clone())).await;
    let by_name = |p: &Pod, n: &str| statuses(p).into_iter().find(|c| c.name == n).unwrap();
    let ok = by_name(&failed, "ok").state.unwrap().terminated.unwrap();
    let bad = by_name(&failed, "bad").state.unwrap().terminated.unwrap();
    assert_eq!((ok.exit_code, ok.reason.as_deref()), (0, Some("Completed")));
    assert_eq!((bad.exit_code, bad.reason.as_deref()), (7, Some("Error")));
    assert_eq!(by_name(&failed, "bad").restart_count, 0, "restartPolicy Never");
    // The runtime writes container output under DATA_DIR/agent/pod-logs/NS_NAME_UID/CONTAINER/ATTEMPT.log.
    let log = node.data.path().join(format!("agent/pod-logs/default_mixed_{}/bad/0.log", uid(&failed)));
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    assert!(text.contains("stdout F oops"), "{text}");

    let fine = node.wait_pod("fine", "pod Succeeded", QUICK, |p| (phase(p) == "Succeeded").then(|| p.clone())).await;
    let ready = fine.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("PodCompleted")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_images_report_never_pull_and_pull_errors() {
    let node = TestNode::start().await;
    node.create_pod(
        "never",
        serde_json::json!({"containers": [
        {"name": "c", "image": "krate.test/missing:1", "imagePullPolicy": "Never"}]}),
    )
    .await;
    // A registry that refuses connections: the pull fails at once.
    node.create_pod(
        "unpullable",
        serde_json::json!({"containers": [
        {"name": "c", "image": "127.0.0.1:1/missing:1", "imagePullPolicy": "IfNotPresent"}]}),
    )
    .await;
    let waiting = |p: &Pod| statuses(p).into_iter().next()?.state?.waiting;
    let never = node
        .wait_pod("never", "ErrImageNeverPull", QUICK, |p| {
            waiting(p).filter(|w| w.reason.as_deref() == Some("ErrImageNeverPull"))
        })
        .await;
    assert_eq!(
        never.message.as_deref(),
        Some("Container image \"krate.test/missing:1\" is not present with pull policy of Never")
    );
    let pod = node.pods().get("never").await.unwrap();
    assert_eq!(phase(&pod), "Pending");
    let backoff = node
        .wait_pod("unpullable", "ImagePullBackOff", QUICK, |p| {
            waiting(p).filter(|w| w.reason.as_deref() == Some("ImagePullBackOff"))
        })
        .await;
    assert_eq!(backoff.message.as_deref(), Some("Back-off pulling image \"127.0.0.1:1/missing:1\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_stops_containers_within_the_grace_period() {
    let node = TestNode::start().await;
    // `sleep` as PID 1 ignores TERM: it is killed when the 2 s grace period ends.
    let stubborn = node
        .create_pod("stubborn", serde_json::json!({"terminationGracePeriodSeconds": 2, "containers": [sleeper("c")]}))
        .await;
    // This one exits on TERM: gone well before its 30 s grace period.
    let polite = node
        .create_pod("polite", serde_json::json!({"terminationGracePeriodSeconds": 30, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]}]}))
        .await;
    for name in ["stubborn", "polite"] {
        node.wait_pod(name, "pod Running", QUICK, |p| (phase(p) == "Running").then_some(())).await;
    }
    let timed_delete = |name: &'static str| {
        let pods = node.pods();
        async move {
            let started = Instant::now();
            pods.delete(name, &DeleteParams::default()).await.unwrap();
            krate_testkit::eventually("pod object removed", Duration::from_secs(40), || {
                let pods = pods.clone();
                async move { pods.get_opt(name).await.unwrap().is_none().then_some(()) }
            })
            .await;
            started.elapsed()
        }
    };
    let (stubborn_took, polite_took) = tokio::join!(timed_delete("stubborn"), timed_delete("polite"));
    assert!(stubborn_took >= Duration::from_millis(1500), "killed before the grace period: {stubborn_took:?}");
    assert!(stubborn_took < Duration::from_secs(10), "grace period 2 s, took {stubborn_took:?}");
    assert!(polite_took < Duration::from_secs(10), "TERM handled, yet took {polite_took:?}");
    for pod in [&stubborn, &polite] {
        assert_eq!(node.sandboxes_of(&uid(pod)).await, 0, "sandbox removed");
        let name = pod.metadata.name.as_deref().unwrap();
        let logs = node.data.path().join(format!("agent/pod-logs/default_{name}_{}", uid(pod)));
        assert!(!logs.exists(), "pod logs removed with the pod");
        assert!(node.cri_containers(&uid(pod)).await.is_empty(), "containers removed");
    }
}
