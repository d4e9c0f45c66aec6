//! The agent's streaming endpoints against real containerd, reached as clients reach
//! them: through the API server's pods/log, pods/exec and pods/portforward to the
//! agent's HTTPS API. Container logs with each option, exec with exit codes and stdin
//! (websocket v5, bridged to the runtime's SPDY server), port-forward to an httpd in
//! the pod (websocket port-forward, passed through to the runtime).

use std::time::Duration;

use futures::AsyncBufReadExt;
use http::Request;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, LogParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{BUSYBOX, QUICK, TestNode, eventually_async};

/// Bounds every client call of these tests.
const CALL: Duration = Duration::from_secs(30);

fn running(p: &Pod) -> Option<()> {
    (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(())
}

/// GET `path` through the API server: the body, or the Status error.
async fn get(node: &TestNode, path: &str) -> Result<String, kube::Error> {
    let req = Request::get(path).body(vec![]).unwrap();
    tokio::time::timeout(CALL, node.client.request_text(req)).await.expect("answered in time")
}

fn api_error(r: Result<String, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected a Status error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_honour_each_option() {
    let node = TestNode::start().await;
    let _api = node.serve_api().await;
    // Two streams, and a 20000-byte line the runtime writes as a partial and a full one.
    let script = "echo one; sleep 0.3; echo two >&2; sleep 0.3; head -c 20000 /dev/zero | tr '\\0' x; echo; \
                  sleep 0.3; echo three; sleep 3600";
    node.create_pod(
        "logs",
        serde_json::json!({"terminationGracePeriodSeconds": 0, "containers": [
            {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", script]}]}),
    )
    .await;
    node.wait_pod("logs", "pod running", QUICK, running).await;
    let base = "/api/v1/namespaces/default/pods/logs/log";
    let all = eventually_async("all lines logged", QUICK, || async {
        get(&node, base).await.ok().filter(|l| l.ends_with("three\n"))
    })
    .await;
    let long = "x".repeat(20000);
    assert_eq!(all, format!("one\ntwo\n{long}\nthree\n"), "the partial line is joined");
    assert_eq!(get(&node, &format!("{base}?container=c")).await.unwrap(), all);
    assert_eq!(get(&node, &format!("{base}?tailLines=1")).await.unwrap(), "three\n");
    assert_eq!(get(&node, &format!("{base}?limitBytes=6")).await.unwrap(), "one\ntw");
    assert_eq!(get(&node, &format!("{base}?stream=Stderr")).await.unwrap(), "two\n");
    assert_eq!(get(&node, &format!("{base}?stream=Stdout")).await.unwrap(), format!("one\n{long}\nthree\n"));
    assert_eq!(get(&node, &format!("{base}?sinceSeconds=3600")).await.unwrap(), all);
    assert_eq!(get(&node, &format!("{base}?sinceTime=2999-01-01T00:00:00Z")).await.unwrap(), "");

    let stamped = get(&node, &format!("{base}?timestamps=true")).await.unwrap();
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 4, "one timestamp per joined line: {}", &stamped[..200.min(stamped.len())]);
    for (line, text) in lines.iter().zip(["one", "two", long.as_str(), "three"]) {
        let (stamp, rest) = line.split_once(' ').unwrap();
        assert_eq!(rest, text);
        assert_eq!(stamp.len(), "2024-01-01T00:00:00.000000000Z".len(), "{stamp}");
        assert!(stamp.ends_with('Z') && stamp.as_bytes()[19] == b'.', "{stamp}");
        assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{stamp}");
    }
    // Through kube-rs too, as a client library asks.
    let pods = node.pods();
    let lp = LogParams { tail_lines: Some(1), timestamps: false, ..Default::default() };
    assert_eq!(pods.logs("logs", &lp).await.unwrap(), "three\n");

    // Upstream's refusals, as a Status.
    let (code, reason, message) = api_error(get(&node, &format!("{base}?previous=true")).await);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    assert_eq!(message, r#"previous terminated container "c" in pod "logs" not found"#);
    let (code, _, message) = api_error(get(&node, &format!("{base}?tailLines=-2")).await);
    assert_eq!(code, 422);
    assert!(message.contains("tailLines: Invalid value: -2: must be greater than or equal to 0"), "{message}");
    let (code, _, message) = api_error(get(&node, &format!("{base}?container=nope")).await);
    assert_eq!((code, message.as_str()), (400, "container nope is not valid for pod logs"));

    node.create_pod(
        "nopull",
        serde_json::json!({"containers": [{"name": "c", "image": "krate.test/absent:1", "imagePullPolicy": "Never"}]}),
    )
    .await;
    let message = eventually_async("the waiting reason shows", QUICK, || async {
        match get(&node, "/api/v1/namespaces/default/pods/nopull/log").await {
            Err(kube::Error::Api(s)) if s.message.ends_with("ErrImageNeverPull") => Some((s.code, s.message.clone())),
            _ => None,
        }
    })
    .await;
    assert_eq!(message, (400, r#"container "c" in pod "nopull" is waiting to start: ErrImageNeverPull"#.into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_ends_with_the_container_and_previous_shows_the_last_instance() {
    let node = TestNode::start().await;
    let _api = node.serve_api().await;
    let script = "echo run; for i in 1 2 3 4; do echo tick $i; sleep 0.5; done; exit 1";
    node.create_pod(
        "crash",
        serde_json::json!({"terminationGracePeriodSeconds": 0, "containers": [
            {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", script]}]}),
    )
    .await;
    node.wait_pod("crash", "pod running", QUICK, running).await;
    // Following streams lines as they come and ends when the container stops.
    let pods = node.pods();
    let followed = eventually_async("a log to follow", QUICK, || async {
        pods.log_stream("crash", &LogParams { follow: true, ..Default::default() }).await.ok()
    })
    .await;
    let lines = tokio::time::timeout(CALL, async {
        let mut lines = followed.lines();
        let mut out = Vec::new();
        while let Some(Ok(line)) = futures::StreamExt::next(&mut lines).await {
            out.push(line);
        }
        out
    })
    .await
    .expect("the follow ended with the container");
    assert_eq!(lines, ["run", "tick 1", "tick 2", "tick 3", "tick 4"]);

    // After the restart (10 s back-off), previous is the instance that exited.
    node.wait_pod("crash", "a restart", Duration::from_secs(40), |p| {
        let s = p.status.as_ref()?.container_statuses.as_ref()?.first()?.clone();
        (s.restart_count >= 1 && s.last_state?.terminated.is_some()).then_some(())
    })
    .await;
    let base = "/api/v1/namespaces/default/pods/crash/log";
    assert_eq!(get(&node, &format!("{base}?previous=true")).await.unwrap(), "run\ntick 1\ntick 2\ntick 3\ntick 4\n");
    let lp = LogParams { previous: true, tail_lines: Some(2), ..Default::default() };
    assert_eq!(pods.logs("crash", &lp).await.unwrap(), "tick 3\ntick 4\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_reports_exit_codes_and_takes_stdin() {
    let node = TestNode::start().await;
    let _api = node.serve_api().await;
    node.create_pod(
        "shell",
        serde_json::json!({"terminationGracePeriodSeconds": 0, "containers": [
            {"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"]}]}),
    )
    .await;
    node.wait_pod("shell", "pod running", QUICK, running).await;
    let pods = node.pods();

    let run = |cmd: &'static [&'static str], stdin: Option<&'static str>| {
        let pods = pods.clone();
        async move {
            let ap = AttachParams::default().stdin(stdin.is_some()).stdout(true).stderr(true);
            let mut p = pods.exec("shell", cmd.to_vec(), &ap).await.expect("exec starts");
            let (mut out, mut err) = (p.stdout().unwrap(), p.stderr().unwrap());
            if let Some(text) = stdin {
                let mut w = p.stdin().unwrap();
                w.write_all(text.as_bytes()).await.unwrap();
                w.shutdown().await.unwrap();
            }
            let status = p.take_status().unwrap();
            let (mut o, mut e) = (String::new(), String::new());
            let (r1, r2) = tokio::join!(out.read_to_string(&mut o), err.read_to_string(&mut e));
            r1.unwrap();
            r2.unwrap();
            let status = status.await.expect("a status");
            (o, e, status)
        }
    };
    let (out, err, status) =
        tokio::time::timeout(CALL, run(&["sh", "-c", "echo out; echo err >&2; exit 3"], None)).await.unwrap();
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let cause = &status.details.unwrap().causes.unwrap()[0];
    assert_eq!((cause.reason.as_deref(), cause.message.as_deref()), (Some("ExitCode"), Some("3")));

    let (out, _, status) = tokio::time::timeout(CALL, run(&["sh", "-c", "echo fine"], None)).await.unwrap();
    assert_eq!(out, "fine\n");
    assert_eq!(status.status.as_deref(), Some("Success"));

    // Stdin reaches the command, and closing it ends `cat` (v5's close signal).
    let (out, _, status) =
        tokio::time::timeout(CALL, run(&["cat"], Some("hello through stdin\n"))).await.expect("cat sees the end");
    assert_eq!(out, "hello through stdin\n");
    assert_eq!(status.status.as_deref(), Some("Success"));

    // A container the pod does not have is refused before anything runs.
    let ap = AttachParams::default().container("nope");
    let e = pods.exec("shell", vec!["true"], &ap).await.err().expect("refused");
    assert!(e.to_string().contains("container nope is not valid for pod shell"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_reaches_a_listener_in_the_pod() {
    let node = TestNode::start().await;
    let _api = node.serve_api().await;
    let script = "mkdir -p /www && echo served from the pod > /www/index.html && httpd -f -p 8080 -h /www";
    node.create_pod(
        "web",
        serde_json::json!({"terminationGracePeriodSeconds": 0, "containers": [
            {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", script]}]}),
    )
    .await;
    node.wait_pod("web", "pod running", QUICK, running).await;
    let pods = node.pods();
    let page = eventually_async("a page through port-forward", QUICK, || async {
        let mut pf = pods.portforward("web", &[8080]).await.ok()?;
        let mut stream = pf.take_stream(8080)?;
        let exchange = async {
            stream.write_all(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n").await.ok()?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.ok()?;
            Some(answer)
        };
        let answer = tokio::time::timeout(Duration::from_secs(10), exchange).await.ok().flatten();
        pf.abort();
        answer.filter(|a| a.starts_with("HTTP/1.") && a.contains("200"))
    })
    .await;
    assert!(page.ends_with("served from the pod\n"), "{page}");
}
