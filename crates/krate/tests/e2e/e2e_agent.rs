//! `krate agent` joining a `krate server` with the join token: TLS bootstrap through
//! CSRs (client certificate approved via the bootstrap token's nodeclient binding,
//! serving certificate approved because its names are the node's addresses), the Node
//! registered and Ready under the node's own identity, its Lease renewed, the agent's
//! HTTPS API reached through nodes/proxy and refusing callers without credentials, a
//! restart reusing the kept certificate, and a graceful stop marking the node not ready.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, free_port};

const NODE: &str = "e2e-agent-node";

struct AgentProcess {
    child: Child,
    log: PathBuf,
}

impl AgentProcess {
    fn start(server: &Server, data_dir: &Path) -> AgentProcess {
        let token = std::fs::read_to_string(server.data_dir.join("token")).expect("the server wrote its join token");
        let log = data_dir.with_extension("log");
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_krate"))
            .args(["agent", "--server", &format!("https://127.0.0.1:{}", server.port), "--token", token.trim()])
            .args(["--node-name", NODE, "--node-ip", "127.0.0.1", "--kubelet-port", "0"])
            // The machine's own network namespace: its nftables and routes are left alone.
            .args(["--disable-kube-proxy", "--flannel-backend", "none", "--disable-network-policy"])
            .arg("--data-dir")
            .arg(data_dir)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("krate agent starts");
        AgentProcess { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for the process to end.
    fn stop(mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "krate agent did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node_field(server: &Server, path: &str) -> String {
    let out = server.kubectl(&["get", "node", NODE, "-o", &format!("jsonpath={path}")]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ready(server: &Server) -> String {
    node_field(server, "{.status.conditions[?(@.type==\"Ready\")].status}")
}

/// Polls `check` every 200 ms until it returns true, for at most `timeout`.
pub(crate) fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool, log: impl Fn() -> String) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}\n{}", log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_agent_joins_with_the_token_registers_heartbeats_and_serves_through_the_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("server"), free_port());
    let agent_dir = dir.path().join("agent");
    let agent = AgentProcess::start(&server, &agent_dir);

    wait_for("the node is Ready", Duration::from_secs(90), || ready(&server) == "True", || agent.log());
    let nodes = server.kubectl_ok(&["get", "nodes"]);
    assert!(nodes.lines().any(|l| l.starts_with(NODE) && l.contains(" Ready ")), "{nodes}");

    // The node's status is the agent's report.
    assert_eq!(node_field(&server, "{.status.capacity.pods}"), "110");
    assert!(node_field(&server, "{.status.nodeInfo.kubeletVersion}").starts_with("v1.36."));
    assert_eq!(node_field(&server, "{.status.addresses[?(@.type==\"InternalIP\")].address}"), "127.0.0.1");
    assert!(!node_field(&server, "{.status.capacity.memory}").is_empty());
    assert!(!node_field(&server, "{.status.capacity.ephemeral-storage}").is_empty());
    let reason = node_field(&server, "{.status.conditions[?(@.type==\"MemoryPressure\")].reason}");
    assert_eq!(reason, "KubeletHasSufficientMemory");

    // Both certificates came through CSRs: the client one asked by the bootstrap token,
    // the serving one by the node itself.
    let csrs = server.kubectl_ok(&[
        "get",
        "csr",
        "-o",
        "jsonpath={range .items[*]}{.spec.signerName} {.spec.username} {.status.conditions[0].type}{\"\\n\"}{end}",
    ]);
    assert!(
        csrs.lines().any(|l| l.starts_with("kubernetes.io/kube-apiserver-client-kubelet system:bootstrap:")
            && l.ends_with("Approved")),
        "{csrs}"
    );
    assert!(csrs.lines().any(|l| l == format!("kubernetes.io/kubelet-serving system:node:{NODE} Approved")), "{csrs}");
    let client_cert = std::fs::read_to_string(agent_dir.join("agent/client-kubelet.crt")).unwrap();

    // The Lease is renewed every 10 s.
    let lease = |field: &str| {
        let out = server.kubectl(&[
            "get",
            "lease",
            "-n",
            "kube-node-lease",
            NODE,
            "-o",
            &format!("jsonpath={{.spec.{field}}}"),
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(lease("holderIdentity"), NODE);
    let first = lease("renewTime");
    wait_for("the Lease is renewed", Duration::from_secs(25), || lease("renewTime") != first, || agent.log());

    // The agent's API, through the API server's nodes/proxy with its kubelet client
    // certificate.
    assert_eq!(server.kubectl_ok(&["get", "--raw", &format!("/api/v1/nodes/{NODE}/proxy/healthz")]), "ok");
    let pods = server.kubectl_ok(&["get", "--raw", &format!("/api/v1/nodes/{NODE}/proxy/pods")]);
    assert!(pods.contains("\"kind\":\"PodList\""), "{pods}");
    let metrics = server.kubectl_ok(&["get", "--raw", &format!("/api/v1/nodes/{NODE}/proxy/metrics")]);
    assert!(metrics.contains(&format!("kubelet_node_name{{node=\"{NODE}\"}} 1")), "{metrics}");
    // Someone without nodes/proxy is stopped at the API server.
    let denied = server.kubectl(&["get", "--raw", &format!("/api/v1/nodes/{NODE}/proxy/healthz"), "--as", "nobody"]);
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("Forbidden"), "{denied:?}");
    // Directly, without credentials, the agent answers 401.
    let port = node_field(&server, "{.status.daemonEndpoints.kubeletEndpoint.Port}");
    let curl = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &format!("https://127.0.0.1:{port}/healthz")])
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "401");

    // A graceful stop marks the node not ready; a restart reuses the certificate.
    agent.stop();
    assert_eq!(ready(&server), "False");
    assert_eq!(node_field(&server, "{.status.conditions[?(@.type==\"Ready\")].message}"), "node is shutting down");
    let csr_count = server.kubectl_ok(&["get", "csr", "-o", "name"]).lines().count();
    let agent = AgentProcess::start(&server, &agent_dir);
    wait_for("the node is Ready again", Duration::from_secs(60), || ready(&server) == "True", || agent.log());
    assert_eq!(std::fs::read_to_string(agent_dir.join("agent/client-kubelet.crt")).unwrap(), client_cert);
    assert_eq!(server.kubectl_ok(&["get", "csr", "-o", "name"]).lines().count(), csr_count, "no new CSRs");
    assert!(agent.log().contains("reusing the node client certificate"), "{}", agent.log());
    agent.stop();
    server.stop();
}

#[test]
fn a_wrong_token_is_refused_before_trusting_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("server"), free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_krate"))
        .args(["agent", "--server", &format!("https://127.0.0.1:{}", server.port)])
        .args(["--token", "abcdef.0123456789abcdef", "--node-name", NODE, "--kubelet-port", "0"])
        .arg("--data-dir")
        .arg(dir.path().join("agent"))
        .output()
        .expect("krate agent runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not signed with this join token"), "{stderr}");
    assert!(!dir.path().join("agent/agent/server-ca.crt").exists());
}

/// `krate server` with its own node's agent, once the node is Ready.
pub(crate) fn server_with_own_node(dir: &Path, node: &str) -> Server {
    let data_dir = dir.join("server");
    let port = free_port();
    let log = std::fs::File::create(data_dir.with_extension("log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_krate"))
        .args(["server", "--bind-address", "127.0.0.1", "--secure-port", &port.to_string()])
        .args(["--node-name", node, "--node-ip", "127.0.0.1", "--kubelet-port", "0", "--cluster-dns-port", "0"])
        // In the machine's own network namespace: leave its nftables and routes alone
        // (e2e_network runs these in a namespace of its own).
        .args(["--disable-kube-proxy", "--flannel-backend", "none", "--disable-network-policy"])
        .arg("--data-dir")
        .arg(&data_dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("krate starts");
    let server = Server { child, data_dir, port };
    wait_for("the server is up", Duration::from_secs(30), || server.kubeconfig().exists(), || server.log());
    let ready = || {
        let out =
            server.kubectl(&["get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_for("its node is Ready", Duration::from_secs(30), || ready() == "True", || server.log());
    server
}

#[test]
fn krate_server_runs_an_agent_for_its_own_node() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_own_node(dir.path(), "own-node");
    assert_eq!(server.kubectl_ok(&["get", "--raw", "/api/v1/nodes/own-node/proxy/healthz"]), "ok");
    // No bootstrap: the certificate came from the CA, no CSR was needed.
    assert_eq!(server.kubectl_ok(&["get", "csr", "-o", "name"]).trim(), "");
    server.stop();
}

#[test]
fn pods_run_on_the_servers_own_node_from_an_imported_image() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_own_node(dir.path(), "pod-node");
    let version =
        server.kubectl_ok(&["get", "node", "pod-node", "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}"]);
    assert!(version.starts_with("containerd://"), "{version}");

    // An image from the host's busybox, loaded with `krate images import` (no registry).
    let busybox = std::fs::read(krate_agent::runtime::pause_image::BUSYBOX).expect("busybox-static is installed");
    let image = dir.path().join("busybox.tar");
    let layout = krate_agent::runtime::pause_image::oci_layout(
        "docker.io/library/busybox:e2e",
        &busybox,
        &["sh", "sleep", "echo"],
        &["/bin/sh"],
    );
    std::fs::write(&image, layout).unwrap();
    let import = Command::new(env!("CARGO_BIN_EXE_krate"))
        .args(["images", "import", "--data-dir"])
        .arg(&server.data_dir)
        .arg(&image)
        .output()
        .unwrap();
    assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));

    server.kubectl_ok(&[
        "run",
        "hello",
        "--image=docker.io/library/busybox:e2e",
        "--image-pull-policy=Never",
        "--restart=Never",
        "--",
        "/bin/sh",
        "-c",
        "echo hi; sleep 3600",
    ]);
    let field = |path: &str| server.kubectl_ok(&["get", "pod", "hello", "-o", &format!("jsonpath={path}")]);
    wait_for("the pod runs", Duration::from_secs(60), || field("{.status.phase}") == "Running", || server.log());
    assert!(!field("{.status.podIP}").is_empty(), "a running pod has an IP");
    assert_eq!(field("{.spec.nodeName}"), "pod-node");
    // Deletion stops it within its grace period and removes the object.
    server.kubectl_ok(&["delete", "pod", "hello", "--grace-period=1", "--timeout=60s"]);
    server.stop();
}
