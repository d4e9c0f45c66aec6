//! kubectl against real pods on `krate server`'s own node: `kubectl logs` (-c, --tail,
//! --timestamps, --all-containers, -f, --previous), `kubectl exec` (exit codes, stdin,
//! -it with a terminal size; also over SPDY, kubectl's fallback), `kubectl port-forward`
//! (websocket and SPDY) with a request through the local port, `kubectl cp` both ways,
//! and `kubectl debug` (an ephemeral container in the target's PID namespace). Every
//! kubectl runs under a deadline.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, kubectl_binary};
use crate::e2e_agent::{server_with_own_node, wait_for};

const NODE: &str = "stream-node";
const IMAGE: &str = "docker.io/library/busybox:streaming";
/// Upper bound for any one kubectl call.
const CALL: Duration = Duration::from_secs(60);

/// Runs `cmd` with `stdin`, killing it at `deadline`: its output and whether it was
/// still running then.
fn run_until(cmd: &mut Command, stdin: Option<&[u8]>, deadline: Duration) -> (Output, bool) {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl starts");
    if let Some(data) = stdin {
        let mut w = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let end = Instant::now() + deadline;
    let mut killed = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            killed = true;
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }, killed)
}

fn kubectl(server: &Server, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(kubectl_binary());
    cmd.args(args).env("KUBECONFIG", server.kubeconfig());
    let (out, killed) = run_until(&mut cmd, stdin, CALL);
    assert!(!killed, "kubectl {args:?} did not finish in {CALL:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn kubectl_ok(server: &Server, args: &[&str]) -> String {
    let out = kubectl(server, args, None);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn import_image(server: &Server, dir: &Path) {
    let busybox = std::fs::read(krate_agent::runtime::pause_image::BUSYBOX).expect("busybox-static is installed");
    let applets = ["sh", "sleep", "echo", "cat", "tar", "mkdir", "httpd", "stty", "ls", "ps"];
    let layout = krate_agent::runtime::pause_image::oci_layout(IMAGE, &busybox, &applets, &["sh"]);
    let image = dir.join("busybox.tar");
    std::fs::write(&image, layout).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_krate"));
    cmd.args(["images", "import", "--data-dir"]).arg(&server.data_dir).arg(&image);
    let (out, killed) = run_until(&mut cmd, None, CALL);
    assert!(!killed && out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn pod_field(server: &Server, pod: &str, path: &str) -> String {
    let out = kubectl(server, &["get", "pod", pod, "-o", &format!("jsonpath={path}")], None);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  terminationGracePeriodSeconds: 0
  initContainers:
  - {name: init, image: IMAGE, imagePullPolicy: Never, command: [sh, -c, "echo init-done"]}
  containers:
  - name: web
    image: IMAGE
    imagePullPolicy: Never
    command: [sh, -c, "echo a1; echo a2; echo a3; mkdir -p /www && echo served-by-httpd > /www/index.html && httpd -f -p 8080 -h /www"]
  - name: ticker
    image: IMAGE
    imagePullPolicy: Never
    command: [sh, -c, "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.3; done"]
---
apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: IMAGE, imagePullPolicy: Never, command: [sh, -c, "echo ran-once; sleep 1; exit 1"]}
"#;

/// `kubectl port-forward pod/two :8080` (with `env`), then a GET through the local
/// port: the answer.
fn fetch_through_port_forward(server: &Server, env: &[(&str, &str)]) -> String {
    let mut pf = Command::new(kubectl_binary());
    pf.args(["port-forward", "pod/two", ":8080"])
        .envs(env.iter().copied())
        .env("KUBECONFIG", server.kubeconfig())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = pf.spawn().unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let child = Kill(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) > 0 {
            let _ = tx.send(line.clone());
            line.clear();
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30)).expect("kubectl port-forward reports its port");
    // "Forwarding from 127.0.0.1:PORT -> 8080"
    let port: u16 = first
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected port-forward output {first:?}"));
    let page = (0..20)
        .find_map(|_| {
            let answer = (|| {
                let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
                tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
                tcp.write_all(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n").ok()?;
                let mut answer = String::new();
                tcp.read_to_string(&mut answer).ok()?;
                Some(answer).filter(|a| a.contains(" 200 "))
            })();
            if answer.is_none() {
                std::thread::sleep(Duration::from_millis(500));
            }
            answer
        })
        .expect("a page through the forwarded port");
    drop(child);
    page
}

#[test]
fn kubectl_logs_exec_port_forward_and_cp_on_real_pods() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_own_node(dir.path(), NODE);
    import_image(&server, dir.path());
    let manifest = PODS.replace("IMAGE", IMAGE);
    let out = kubectl(&server, &["apply", "-f", "-"], Some(manifest.as_bytes()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = || server.log();
    wait_for(
        "pod two runs",
        Duration::from_secs(90),
        || pod_field(&server, "two", "{.status.phase}") == "Running",
        log,
    );

    // logs: -c, --tail, --timestamps, --all-containers, -f.
    wait_for(
        "the web container logged",
        Duration::from_secs(30),
        || String::from_utf8_lossy(&kubectl(&server, &["logs", "two", "-c", "web"], None).stdout) == "a1\na2\na3\n",
        log,
    );
    assert_eq!(kubectl_ok(&server, &["logs", "two", "-c", "web", "--tail=1"]), "a3\n");
    assert_eq!(kubectl_ok(&server, &["logs", "pod/two", "--container=web", "--limit-bytes=5"]), "a1\na2");
    let stamped = kubectl_ok(&server, &["logs", "two", "-c", "web", "--timestamps"]);
    for (line, text) in stamped.lines().zip(["a1", "a2", "a3"]) {
        let (stamp, rest) = line.split_once(' ').unwrap();
        assert_eq!(rest, text);
        assert!(stamp.len() == 30 && stamp.ends_with('Z') && stamp.contains('T'), "{stamp}");
    }
    let all = kubectl_ok(&server, &["logs", "two", "--all-containers"]);
    // Newer kubectl fetches the containers concurrently: the order of the containers varies.
    let lines: Vec<&str> = all.lines().collect();
    for wanted in ["init-done", "a1", "a2", "a3", "tick-1", "tick-2"] {
        assert!(lines.contains(&wanted), "{wanted} in {all}");
    }
    let mut follow = Command::new(kubectl_binary());
    follow.args(["logs", "-f", "two", "-c", "ticker", "--tail=1"]).env("KUBECONFIG", server.kubeconfig());
    let (out, still_running) = run_until(&mut follow, None, Duration::from_secs(3));
    assert!(still_running, "logs -f keeps following a running container");
    let ticks: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    assert!(ticks.len() >= 3, "new lines arrive while following: {ticks:?}");
    let numbers: Vec<u32> = ticks.iter().map(|t| t.trim_start_matches("tick-").parse().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");

    // A pod no node took yet has an empty log (upstream's LogLocation).
    kubectl_ok(
        &server,
        &[
            "run",
            "nowhere",
            &format!("--image={IMAGE}"),
            "--overrides",
            r#"{"spec":{"nodeSelector":{"no":"such-node"}}}"#,
        ],
    );
    assert_eq!(kubectl_ok(&server, &["logs", "nowhere"]), "");

    // --previous: the instance before the restart.
    wait_for(
        "pod crash restarted",
        Duration::from_secs(60),
        || pod_field(&server, "crash", "{.status.containerStatuses[0].restartCount}").parse::<u32>().unwrap_or(0) >= 1,
        log,
    );
    assert_eq!(kubectl_ok(&server, &["logs", "crash", "--previous"]), "ran-once\n");
    let none = kubectl(&server, &["logs", "two", "-c", "web", "--previous"], None);
    assert!(!none.status.success());
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(
        stderr
            .contains(r#"Error from server (BadRequest): previous terminated container "web" in pod "two" not found"#),
        "{stderr}"
    );

    // exec: exit codes and stdin.
    let out = kubectl(&server, &["exec", "two", "-c", "web", "--", "sh", "-c", "echo out; exit 3"], None);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    let out = kubectl(&server, &["exec", "-i", "two", "-c", "web", "--", "cat"], Some(b"through stdin\n"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through stdin\n");
    // The same over SPDY, kubectl's fallback, which the agent passes through.
    let mut spdy = Command::new(kubectl_binary());
    spdy.args(["exec", "-i", "two", "-c", "web", "--", "sh", "-c", "cat; exit 6"])
        .env("KUBECONFIG", server.kubeconfig())
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
    let (out, killed) = run_until(&mut spdy, Some(b"over spdy\n"), CALL);
    assert!(!killed);
    assert_eq!(out.status.code(), Some(6), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "over spdy\n");

    // -it: a terminal whose size reaches the container (through `script`, a pty).
    if Path::new("/usr/bin/script").exists() {
        let inner = format!(
            "stty cols 91 rows 17; {} exec -it two -c web -- sh -c 'sleep 1; stty size; exit 4'",
            kubectl_binary()
        );
        // stdin stays open (and idle) while the command runs.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("sleep 8 | /usr/bin/script -qec \"{inner}\" /dev/null")])
            .env("KUBECONFIG", server.kubeconfig());
        let (out, killed) = run_until(&mut cmd, None, CALL);
        assert!(!killed);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("17 91"), "{text}");
        assert_eq!(out.status.code(), Some(4), "{text}");
    }

    // port-forward, then a request through the local port: websocket tunneling SPDY,
    // and plain SPDY as kubectl falls back to (passed through to the runtime).
    let page = fetch_through_port_forward(&server, &[]);
    assert!(page.ends_with("served-by-httpd\n"), "{page}");
    let page = fetch_through_port_forward(&server, &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")]);
    assert!(page.ends_with("served-by-httpd\n"), "{page}");

    // cp into the container and back out.
    let local = dir.path().join("note.txt");
    std::fs::write(&local, "copied in by kubectl cp\n").unwrap();
    kubectl_ok(&server, &["cp", local.to_str().unwrap(), "two:/www/note.txt", "-c", "web"]);
    assert_eq!(
        kubectl_ok(&server, &["exec", "two", "-c", "web", "--", "cat", "/www/note.txt"]),
        "copied in by kubectl cp\n"
    );
    let back = dir.path().join("back.txt");
    kubectl_ok(&server, &["cp", "two:/www/index.html", back.to_str().unwrap(), "-c", "web"]);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "served-by-httpd\n");

    // kubectl debug: an ephemeral container sharing the target's PID namespace,
    // attached to with stdin.
    // Input comes once attached and stays open until the shell exits: containerd ends an
    // attach when its stdin ends.
    let debug = format!(
        "(sleep 4; echo ps; sleep 1; echo 'exit 0'; sleep 2) | {} debug -i two --image={IMAGE} \
         --image-pull-policy=Never --target=web -- sh",
        kubectl_binary()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &debug]).env("KUBECONFIG", server.kubeconfig());
    let (out, killed) = run_until(&mut cmd, None, CALL);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!killed && out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("httpd -f -p 8080"), "the target's processes are visible: {text}");
    let name = pod_field(&server, "two", "{.status.ephemeralContainerStatuses[0].name}");
    assert!(name.starts_with("debugger-"), "{name}");

    server.stop();
}
