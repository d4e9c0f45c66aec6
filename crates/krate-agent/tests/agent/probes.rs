//! Probes and lifecycle hooks against real containers: readiness, liveness and startup
//! probes by exec, httpGet (busybox httpd and a request-logging nc in the pod),
//! tcpSocket and grpc (a health server in this test process, probed through a
//! hostNetwork pod), readiness gates, postStart and preStop hooks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use krate_agent::runtime::probe::grpc::{HealthCheckRequest, HealthCheckResponse};
use kube::api::{Patch, PatchParams};

use crate::common::{BUSYBOX, QUICK, TestNode, events_of};

/// Waits (bounded) for an event with `reason` whose message satisfies `check`.
async fn wait_event(node: &TestNode, pod: &str, reason: &str, check: impl Fn(&str) -> bool) -> String {
    let check = &check;
    crate::common::eventually_async(&format!("{reason} event of {pod}"), QUICK, || async move {
        events_of(node, pod, reason).await.into_iter().filter_map(|e| e.message).find(|m| check(m))
    })
    .await
}

fn status<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
    let s = pod.status.as_ref()?;
    s.container_statuses.iter().chain(s.init_container_statuses.iter()).flatten().find(|c| c.name == container)
}

fn running(pod: &Pod, container: &str) -> bool {
    status(pod, container).and_then(|s| s.state.as_ref()).is_some_and(|s| s.running.is_some())
}

fn condition(pod: &Pod, type_: &str) -> Option<(String, Option<String>)> {
    let c = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

fn is_true(pod: &Pod, type_: &str) -> bool {
    condition(pod, type_).is_some_and(|(s, _)| s == "True")
}

/// busybox httpd on port 8081 whose /cgi-bin/log appends the request's CGI
/// environment (headers as HTTP_*) to `file` and answers 200.
fn request_logger(file: &str) -> String {
    format!(
        "mkdir -p /www/cgi-bin && printf '#!/bin/sh\\nenv >> {file}\\nprintf \"Content-Type: text/plain\\\\r\\\\n\\\\r\\\\nok\"\\n' > /www/cgi-bin/log && chmod +x /www/cgi-bin/log && exec httpd -f -p 8081 -h /www"
    )
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_exec_probe_turns_ready_once_the_file_exists() {
    let node = TestNode::start().await;
    node.create_pod(
        "ready-exec",
        serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sh", "-c", "sleep 4; touch /tmp/ready; sleep 3600"],
            "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1}}]}),
    )
    .await;
    // Running but not ready while the file is missing.
    let pod = node
        .wait_pod("ready-exec", "running, not ready", QUICK, |p| {
            (running(p, "c") && !status(p, "c")?.ready).then(|| p.clone())
        })
        .await;
    assert_eq!(status(&pod, "c").unwrap().started, Some(true));
    assert_eq!(condition(&pod, "Ready").unwrap(), ("False".into(), Some("ContainersNotReady".into())));
    assert_eq!(condition(&pod, "ContainersReady").unwrap().0, "False");
    let pod = node
        .wait_pod("ready-exec", "ready", QUICK, |p| (status(p, "c")?.ready && is_true(p, "Ready")).then(|| p.clone()))
        .await;
    assert!(is_true(&pod, "ContainersReady"));
    assert_eq!(status(&pod, "c").unwrap().restart_count, 0);
    wait_event(&node, "ready-exec", "Unhealthy", |m| m.starts_with("Readiness probe failed")).await;
    // Probe runs are counted as upstream's prober_probe_total.
    let counted = prometheus::gather().into_iter().filter(|f| f.name() == "prober_probe_total").any(|f| {
        f.get_metric().iter().any(|m| {
            let has = |k: &str, v: &str| m.get_label().iter().any(|l| l.name() == k && l.value() == v);
            has("pod", "ready-exec") && has("probe_type", "Readiness") && has("result", "successful")
        })
    });
    assert!(counted, "prober_probe_total has the pod's successful readiness probes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_probe_times_out() {
    let node = TestNode::start().await;
    node.create_pod(
        "slow-probe",
        serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "readinessProbe": {"exec": {"command": ["sleep", "5"]}, "timeoutSeconds": 1, "periodSeconds": 2}}]}),
    )
    .await;
    let message = wait_event(&node, "slow-probe", "Unhealthy", |_| true).await;
    assert_eq!(message, "Readiness probe failed: command \"sleep 5\" timed out");
    assert!(!status(&node.pods().get("slow-probe").await.unwrap(), "c").unwrap().ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_liveness_probe_restarts_the_container() {
    let node = TestNode::start().await;
    node.create_pod(
        "liveness",
        serde_json::json!({"terminationGracePeriodSeconds": 30, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "livenessProbe": {"exec": {"command": ["sh", "-c", "echo not alive; exit 1"]},
                "periodSeconds": 1, "failureThreshold": 2, "terminationGracePeriodSeconds": 1}}]}),
    )
    .await;
    let started = Instant::now();
    node.wait_pod("liveness", "restarted", QUICK, |p| (status(p, "c")?.restart_count >= 1).then_some(())).await;
    // The probe's own grace (1 s), not the pod's 30 s, bounded the kill.
    assert!(started.elapsed() < Duration::from_secs(20), "restarted after {:?}", started.elapsed());
    let unhealthy = wait_event(&node, "liveness", "Unhealthy", |m| m.starts_with("Liveness probe failed")).await;
    assert_eq!(unhealthy, "Liveness probe failed: not alive\n");
    wait_event(&node, "liveness", "Killing", |m| m == "Container c failed liveness probe, will be restarted").await;
    let killing = events_of(&node, "liveness", "Killing").await;
    assert_eq!(killing[0].involved_object.field_path.as_deref(), Some("spec.containers{c}"));
    let pod = node.pods().get("liveness").await.unwrap();
    let last = status(&pod, "c").unwrap().last_state.clone().unwrap().terminated.expect("last state terminated");
    assert_eq!(last.exit_code, 137, "killed after the grace period (sleep as pid 1 ignores TERM)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_probe_gates_liveness_and_readiness() {
    let node = TestNode::start().await;
    // The liveness probe fails until the file exists and would kill the container at
    // once if the startup probe did not hold it back.
    let check = serde_json::json!({"exec": {"command": ["test", "-f", "/tmp/started"]}, "periodSeconds": 1});
    let mut liveness = check.clone();
    liveness["failureThreshold"] = 1.into();
    let mut startup = check.clone();
    startup["failureThreshold"] = 30.into();
    node.create_pod(
        "startup",
        serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sh", "-c", "sleep 5; touch /tmp/started; sleep 3600"],
            "startupProbe": startup, "livenessProbe": liveness, "readinessProbe": check}]}),
    )
    .await;
    let pod = node.wait_pod("startup", "running, not started", QUICK, |p| running(p, "c").then(|| p.clone())).await;
    let c = status(&pod, "c").unwrap();
    assert_eq!((c.started, c.ready), (Some(false), false));
    let pod = node
        .wait_pod("startup", "started and ready", QUICK, |p| {
            let c = status(p, "c")?;
            (c.started == Some(true) && c.ready).then(|| p.clone())
        })
        .await;
    assert!(is_true(&pod, "Ready"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pod = node.pods().get("startup").await.unwrap();
    assert_eq!(status(&pod, "c").unwrap().restart_count, 0, "liveness never ran before startup succeeded");
    assert!(events_of(&node, "startup", "Killing").await.is_empty());
    let unhealthy = events_of(&node, "startup", "Unhealthy").await;
    assert!(unhealthy.iter().all(|e| e.message.as_deref().is_some_and(|m| m.starts_with("Startup probe failed"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_startup_probe_kills_the_container() {
    let node = TestNode::start().await;
    node.create_pod(
        "never-starts",
        serde_json::json!({"terminationGracePeriodSeconds": 1, "restartPolicy": "Never", "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "startupProbe": {"tcpSocket": {"port": 9999}, "periodSeconds": 1, "failureThreshold": 2},
            "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}]}),
    )
    .await;
    // restartPolicy Never: killed once and not started again, so the pod fails.
    let pod = node
        .wait_pod("never-starts", "pod failed", QUICK, |p| {
            (p.status.as_ref()?.phase.as_deref() == Some("Failed")).then(|| p.clone())
        })
        .await;
    let c = status(&pod, "c").unwrap();
    assert_eq!((c.restart_count, c.started), (0, Some(false)));
    assert_eq!(c.state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 137);
    wait_event(&node, "never-starts", "Unhealthy", |m| m.starts_with("Startup probe failed: dial tcp ")).await;
    wait_event(&node, "never-starts", "Killing", |m| m == "Container c failed startup probe").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_get_and_tcp_socket_probes_reach_the_pod() {
    let node = TestNode::start().await;
    let serve = "mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 8080 -h /www";
    // A server that logs each request's headers, so the probe's can be checked.
    let log = request_logger("/tmp/requests");
    node.create_pod(
        "http",
        serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "web", "image": BUSYBOX, "command": ["sh", "-c", serve],
                "ports": [{"name": "web", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/index.html", "port": "web",
                    "httpHeaders": [{"name": "X-Probe", "value": "web"}]}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
            {"name": "logger", "image": BUSYBOX, "command": ["sh", "-c", log],
                "readinessProbe": {"httpGet": {"path": "/cgi-bin/log?healthz", "port": 8081,
                    "httpHeaders": [{"name": "X-Probe", "value": "logged"}]}, "periodSeconds": 1, "timeoutSeconds": 3}},
            {"name": "closed", "image": BUSYBOX, "command": ["sleep", "3600"],
                "readinessProbe": {"tcpSocket": {"port": 9999}, "periodSeconds": 1}},
            {"name": "missing", "image": BUSYBOX, "command": ["sleep", "3600"],
                "readinessProbe": {"httpGet": {"path": "/missing", "port": 8080}, "periodSeconds": 1}}]}),
    )
    .await;
    let pod = node
        .wait_pod("http", "web and logger ready", QUICK, |p| {
            (status(p, "web")?.ready && status(p, "logger")?.ready).then(|| p.clone())
        })
        .await;
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(!status(&pod, "closed").unwrap().ready);
    assert!(!status(&pod, "missing").unwrap().ready);
    assert_eq!(condition(&pod, "Ready").unwrap().0, "False");
    let refused = format!("Readiness probe failed: dial tcp {ip}:9999: connect: connection refused");
    wait_event(&node, "http", "Unhealthy", |m| m == refused).await;
    wait_event(&node, "http", "Unhealthy", |m| m == "Readiness probe failed: HTTP probe failed with statuscode: 404")
        .await;
    let requests = node.exec(&uid(&pod), "logger", &["cat", "/tmp/requests"]).await;
    assert!(requests.contains("REQUEST_METHOD=GET\n"), "{requests}");
    assert!(requests.contains("QUERY_STRING=healthz\n"), "{requests}");
    assert!(requests.contains("HTTP_X_PROBE=logged\n"), "{requests}");
    assert!(requests.contains("HTTP_USER_AGENT=kube-probe/1.36\n"), "{requests}");
    let pod = node.pods().get("http").await.unwrap();
    assert_eq!(status(&pod, "web").unwrap().restart_count, 0, "the tcp liveness probe passes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_probes_gate_the_main_container_and_readiness() {
    let node = TestNode::start().await;
    let check = serde_json::json!({"exec": {"command": ["test", "-f", "/tmp/up"]}, "periodSeconds": 1});
    let mut startup = check.clone();
    startup["failureThreshold"] = 30.into();
    node.create_pod(
        "sidecar",
        serde_json::json!({"terminationGracePeriodSeconds": 1,
            "initContainers": [{"name": "side", "image": BUSYBOX, "restartPolicy": "Always",
                "command": ["sh", "-c", "sleep 4; touch /tmp/up; sleep 3600"],
                "startupProbe": startup, "readinessProbe": check}],
            "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"]}]}),
    )
    .await;
    let pod = node.wait_pod("sidecar", "sidecar running", QUICK, |p| running(p, "side").then(|| p.clone())).await;
    let side = status(&pod, "side").unwrap();
    assert_eq!((side.started, side.ready), (Some(false), false));
    assert!(!running(&pod, "main"), "the main container waits for the sidecar to start");
    let pod = node
        .wait_pod("sidecar", "main running, pod ready", QUICK, |p| {
            (running(p, "main") && is_true(p, "Ready")).then(|| p.clone())
        })
        .await;
    let side = status(&pod, "side").unwrap();
    assert_eq!((side.started, side.ready), (Some(true), true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_gates_keep_the_pod_unready_until_true() {
    let node = TestNode::start().await;
    node.create_pod(
        "gated",
        serde_json::json!({"terminationGracePeriodSeconds": 1,
            "readinessGates": [{"conditionType": "example.com/feature"}],
            "containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"]}]}),
    )
    .await;
    node.wait_pod("gated", "containers ready, pod not", QUICK, |p| {
        (is_true(p, "ContainersReady")
            && condition(p, "Ready")? == ("False".into(), Some("ReadinessGatesNotReady".into())))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!is_true(&node.pods().get("gated").await.unwrap(), "Ready"));
    let patch = serde_json::json!({"status": {"conditions": [
        {"type": "example.com/feature", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    node.pods().patch_status("gated", &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
    node.wait_pod("gated", "ready once the gate is True", QUICK, |p| is_true(p, "Ready").then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_hook_runs_before_the_container_is_reported() {
    let node = TestNode::start().await;
    let main = "while ! test -f /tmp/hook; do sleep 1; done; cat /tmp/hook > /tmp/seen; sleep 3600";
    node.create_pod(
        "post-start",
        serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", main],
                "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "sleep 1; echo hooked > /tmp/hook"]}}}},
            {"name": "bad", "image": BUSYBOX, "command": ["sleep", "3600"],
                "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "exit 3"]}}}}]}),
    )
    .await;
    let pod = node.wait_pod("post-start", "c running", QUICK, |p| running(p, "c").then(|| p.clone())).await;
    // Reported running only after the hook wrote its file.
    assert_eq!(node.exec(&uid(&pod), "c", &["cat", "/tmp/hook"]).await, "hooked\n");
    let seen = crate::common::eventually_async("the main process saw the hook's file", QUICK, || async {
        let (code, out, _) = node.exec_result(&uid(&pod), "c", &["cat", "/tmp/seen"]).await;
        (code == 0 && !out.is_empty()).then_some(out)
    })
    .await;
    assert_eq!(seen, "hooked\n");
    wait_event(&node, "post-start", "FailedPostStartHook", |m| m == "PostStartHook failed").await;
    node.wait_pod("post-start", "bad restarted", QUICK, |p| (status(p, "bad")?.restart_count >= 1).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_get_post_start_hook_sends_its_headers() {
    let node = TestNode::start().await;
    let log = request_logger("/tmp/requests");
    // The logging sidecar listens before the main container starts (its startup probe).
    node.create_pod(
        "http-hook",
        serde_json::json!({"terminationGracePeriodSeconds": 1,
            "initContainers": [{"name": "logger", "image": BUSYBOX, "restartPolicy": "Always",
                "command": ["sh", "-c", log],
                "startupProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1, "failureThreshold": 30}}],
            "containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
                "lifecycle": {"postStart": {"httpGet": {"path": "/cgi-bin/log?started", "port": 8081, "scheme": "HTTP",
                    "httpHeaders": [{"name": "X-Hook", "value": "post-start"}]}}}}]}),
    )
    .await;
    let pod = node.wait_pod("http-hook", "c running", QUICK, |p| running(p, "c").then(|| p.clone())).await;
    let requests = crate::common::eventually_async("the hook's request logged", QUICK, || async {
        let (_, out, _) = node.exec_result(&uid(&pod), "logger", &["cat", "/tmp/requests"]).await;
        out.contains("QUERY_STRING=started\n").then_some(out)
    })
    .await;
    assert!(requests.contains("HTTP_X_HOOK=post-start\n"), "{requests}");
    assert!(requests.contains("HTTP_USER_AGENT=kube-lifecycle/1.36\n"), "{requests}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_stop_hooks_run_within_the_grace_period() {
    let node = TestNode::start().await;
    let out = tempfile::tempdir().unwrap();
    // Exits on TERM (pid 1 ignores it otherwise).
    let main = "trap 'exit 0' TERM; while true; do sleep 1; done";
    node.create_pod(
        "pre-stop",
        serde_json::json!({"terminationGracePeriodSeconds": 20,
            "volumes": [{"name": "out", "hostPath": {"path": out.path().to_string_lossy(), "type": "Directory"}}],
            "containers": [
                {"name": "exec", "image": BUSYBOX, "command": ["sh", "-c", main],
                    "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                    "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 3; echo bye > /out/pre-stop"]}}}},
                {"name": "sleep", "image": BUSYBOX, "command": ["sh", "-c", main],
                    "lifecycle": {"preStop": {"sleep": {"seconds": 3}}}}]}),
    )
    .await;
    node.create_pod(
        "cut-short",
        serde_json::json!({"terminationGracePeriodSeconds": 2, "containers": [
            {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", main],
                "lifecycle": {"preStop": {"exec": {"command": ["sleep", "60"]}}}}]}),
    )
    .await;
    for name in ["pre-stop", "cut-short"] {
        node.wait_pod(name, "running", QUICK, |p| {
            (p.status.as_ref()?.phase.as_deref() == Some("Running") && is_true(p, "Ready")).then_some(())
        })
        .await;
    }
    let pods = node.pods();
    let deleted = Instant::now();
    pods.delete("pre-stop", &Default::default()).await.unwrap();
    pods.delete("cut-short", &Default::default()).await.unwrap();
    let gone = |name: &'static str| {
        let pods = pods.clone();
        async move {
            crate::common::eventually_async("pod removed", QUICK, || async {
                pods.get_opt(name).await.unwrap().is_none().then(|| deleted.elapsed())
            })
            .await
        }
    };
    let (pre_stop, cut_short) = tokio::join!(gone("pre-stop"), gone("cut-short"));
    assert!(pre_stop >= Duration::from_secs(3), "the hooks held termination: {pre_stop:?}");
    assert!(pre_stop < Duration::from_secs(15), "within the grace period: {pre_stop:?}");
    assert_eq!(std::fs::read_to_string(out.path().join("pre-stop")).unwrap(), "bye\n");
    // A 60 s hook is cut at the 2 s grace period, then the container gets 2 s more.
    assert!(cut_short >= Duration::from_secs(2), "{cut_short:?}");
    assert!(cut_short < Duration::from_secs(10), "the grace period bounds the hook: {cut_short:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_stop_http_get_hook_and_a_failing_hook() {
    let node = TestNode::start().await;
    let out = tempfile::tempdir().unwrap();
    let log = request_logger("/out/requests");
    let main = "trap 'exit 0' TERM; while true; do sleep 1; done";
    node.create_pod(
        "pre-stop-http",
        serde_json::json!({"terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "out", "hostPath": {"path": out.path().to_string_lossy(), "type": "Directory"}}],
            "initContainers": [{"name": "logger", "image": BUSYBOX, "restartPolicy": "Always",
                "command": ["sh", "-c", log], "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                "startupProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1, "failureThreshold": 30}}],
            "containers": [
                {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", main],
                    "lifecycle": {"preStop": {"httpGet": {"path": "/cgi-bin/log?stopping", "port": 8081,
                        "httpHeaders": [{"name": "X-Hook", "value": "pre-stop"}]}}}},
                {"name": "bad", "image": BUSYBOX, "command": ["sh", "-c", main],
                    "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo oops; exit 1"]}}}}]}),
    )
    .await;
    node.wait_pod("pre-stop-http", "ready", QUICK, |p| is_true(p, "Ready").then_some(())).await;
    let pods = node.pods();
    pods.delete("pre-stop-http", &Default::default()).await.unwrap();
    crate::common::eventually_async("pod removed", QUICK, || async {
        pods.get_opt("pre-stop-http").await.unwrap().is_none().then_some(())
    })
    .await;
    let requests = std::fs::read_to_string(out.path().join("requests")).unwrap();
    if !requests.contains("QUERY_STRING=stopping\n") {
        let failed: Vec<_> = events_of(&node, "pre-stop-http", "FailedPreStopHook").await;
        panic!("no preStop request in {requests:?}; {:?}", failed.iter().map(|e| &e.message).collect::<Vec<_>>());
    }
    assert!(requests.contains("HTTP_X_HOOK=pre-stop\n"), "{requests}");
    assert!(requests.contains("HTTP_USER_AGENT=kube-lifecycle/1.36\n"), "{requests}");
    let failed = wait_event(&node, "pre-stop-http", "FailedPreStopHook", |_| true).await;
    assert!(
        failed.starts_with(
            "Exec lifecycle hook ([sh -c echo oops; exit 1]) for Container \"bad\" in Pod \"pre-stop-http_default("
        ),
        "{failed}"
    );
    assert!(failed.ends_with("message: \"oops\\n\""), "{failed}");
}

/// grpc.health.v1.Health answering SERVING for the service "ok", NOT_SERVING otherwise.
#[derive(Clone)]
struct HealthServer {
    serving: Arc<AtomicBool>,
}

impl tonic::server::NamedService for HealthServer {
    const NAME: &'static str = "grpc.health.v1.Health";
}

struct Check(HealthServer);

impl tonic::server::UnaryService<HealthCheckRequest> for Check {
    type Response = HealthCheckResponse;
    type Future = std::future::Ready<Result<tonic::Response<HealthCheckResponse>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<HealthCheckRequest>) -> Self::Future {
        let ok = request.get_ref().service == "ok" && self.0.serving.load(Ordering::SeqCst);
        std::future::ready(Ok(tonic::Response::new(HealthCheckResponse { status: if ok { 1 } else { 2 } })))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for HealthServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<HealthCheckResponse, HealthCheckRequest>::default();
            Ok(tonic::server::Grpc::new(codec).unary(Check(this), request).await)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_probe_checks_the_health_service() {
    let node = TestNode::start().await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = Arc::new(AtomicBool::new(true));
    let server = HealthServer { serving: serving.clone() };
    let incoming = tokio_stream_from(listener);
    tokio::spawn(tonic::transport::Server::builder().add_service(server).serve_with_incoming(incoming));
    // A hostNetwork pod's IP is the node's, where this process listens.
    let probe = |service: &str| serde_json::json!({"grpc": {"port": port, "service": service}, "periodSeconds": 1, "failureThreshold": 1});
    node.create_pod(
        "grpc",
        serde_json::json!({"hostNetwork": true, "terminationGracePeriodSeconds": 1, "containers": [
            {"name": "ok", "image": BUSYBOX, "command": ["sleep", "3600"], "readinessProbe": probe("ok")},
            {"name": "down", "image": BUSYBOX, "command": ["sleep", "3600"], "readinessProbe": probe("down")}]}),
    )
    .await;
    node.wait_pod("grpc", "ok ready", QUICK, |p| status(p, "ok")?.ready.then_some(())).await;
    wait_event(&node, "grpc", "Unhealthy", |m| {
        m == "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")"
    })
    .await;
    let pod = node.pods().get("grpc").await.unwrap();
    assert!(!status(&pod, "down").unwrap().ready);
    serving.store(false, Ordering::SeqCst);
    node.wait_pod("grpc", "ok unready once not serving", QUICK, |p| (!status(p, "ok")?.ready).then_some(())).await;
}

/// The accepted connections of `listener`, as tonic's server takes them.
fn tokio_stream_from(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| s);
        Some((next, l))
    })
}
