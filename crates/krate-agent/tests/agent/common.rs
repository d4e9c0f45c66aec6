//! A node for tests: a test cluster's API server, the agent's runtime with its own
//! containerd, bridge, pod CIDR and cgroup root (so tests run side by side), and a
//! busybox image built with umoci. Dropping it removes every sandbox, the bridge and
//! the cgroups, then kills containerd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use krate_agent::runtime::{PodRuntime, RuntimeConfig};
use krate_api::user::UserInfo;
use krate_testkit::TestCluster;
use kube::api::{Api, PostParams};

pub const BUSYBOX: &str = "krate.test/busybox:1";
pub const NODE: &str = "agent-node";
/// Upper bound for a pod to reach a state that needs no back-off.
pub const QUICK: Duration = Duration::from_secs(30);

/// The busybox image tarballs (OCI layout, built once per test process) by name.
pub fn image_tarball(name: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    let file = dir.path().join(format!("{}.tar", name.replace(['/', ':'], "_")));
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !file.exists() {
        build_image(dir.path(), name, &file);
    }
    file
}

fn run(cmd: &mut Command) {
    let out =
        cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (scripts/install-deps.sh installs umoci)"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// An OCI layout made with umoci: /bin/busybox and its applet links, named `name`
/// through the annotation containerd's importer reads.
fn build_image(work: &Path, name: &str, out: &Path) {
    let id = name.replace(['/', ':', '.'], "_");
    let layout = work.join(format!("layout-{id}"));
    let bundle = work.join(format!("bundle-{id}"));
    let tagged = format!("{}:t", layout.display());
    run(Command::new("umoci").arg("init").arg("--layout").arg(&layout));
    run(Command::new("umoci").args(["new", "--image", &tagged]));
    run(Command::new("umoci").args(["unpack", "--image", &tagged]).arg(&bundle));
    let tmp = bundle.join("rootfs/tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let sticky = std::os::unix::fs::PermissionsExt::from_mode(0o1777);
    std::fs::set_permissions(&tmp, sticky).unwrap();
    let bin = bundle.join("rootfs/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).expect("/bin/busybox (busybox-static)");
    for applet in [
        "sh", "sleep", "true", "false", "echo", "env", "cat", "ls", "pwd", "date", "id", "hostname", "stat", "grep",
        "wc", "test", "touch", "mkdir", "mount", "wget", "readlink", "head", "cut", "tr", "tar", "nc", "httpd",
        "printf", "rm", "cp", "chmod",
    ] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    run(Command::new("umoci").args(["repack", "--image", &tagged]).arg(&bundle));
    run(Command::new("umoci").args(["config", "--image", &tagged, "--config.cmd", "sh", "--config.env", "PATH=/bin"]));
    let index_path = layout.join("index.json");
    let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    for manifest in index["manifests"].as_array_mut().unwrap() {
        manifest["annotations"]["io.containerd.image.name"] = name.into();
    }
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    run(Command::new("tar").arg("-C").arg(&layout).arg("-cf").arg(out).arg("."));
}

pub struct TestNode {
    /// Its API server, which the clients talk to.
    pub cluster: TestCluster,
    /// The test's own client (cluster admin).
    pub client: kube::Client,
    /// The agent's client, acting as system:node:NODE.
    pub agent_client: kube::Client,
    pub runtime: PodRuntime,
    pub config: RuntimeConfig,
    pub data: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl TestNode {
    /// A cluster and a node running the agent's runtime, with the busybox image
    /// imported at start from DATA_DIR/agent/images.
    pub async fn start() -> TestNode {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let data = tempfile::tempdir().expect("temp dir");
        let images = data.path().join("agent/images");
        std::fs::create_dir_all(&images).unwrap();
        std::fs::copy(image_tarball(BUSYBOX), images.join("busybox.tar")).unwrap();
        let mut config = RuntimeConfig::new(data.path());
        config.bridge = format!("kt{}x{n}", pid % 100_000);
        config.pod_cidr = format!("10.{}.{}.0/24", 100 + (pid % 100), n % 256);
        config.cgroup_root = format!("/krate-test-{pid}-{n}");
        let runtime = PodRuntime::start(config.clone()).await.expect("runtime starts");

        let mut cluster = TestCluster::start().await;
        // Every pod gets the kube-api-access projected volume, which needs the
        // kube-root-ca.crt config map this controller publishes.
        cluster.controllers(&["root-ca-cert-publisher"]);
        let client = cluster.admin().await;
        let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": NODE}})).unwrap();
        Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.expect("node registers");
        // The agent acts as its node, as `krate server`'s own agent does: the Node
        // authorizer decides which config maps, secrets and tokens it may read.
        let agent_client = cluster.client_as(UserInfo {
            name: format!("system:node:{NODE}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..Default::default()
        });
        let run = runtime.clone();
        let as_node = agent_client.clone();
        let task = tokio::spawn(async move { run.run(as_node, NODE).await });
        TestNode { cluster, client, agent_client, runtime, config, data, task }
    }

    /// Serves the agent's HTTPS API for this node with the runtime's streaming
    /// endpoints, on loopback, so the API server's pods/log, exec and portforward
    /// reach it. Dropping the returned agent stops it.
    pub async fn serve_api(&self) -> krate_agent::agent::Agent {
        use krate_agent::agent::{AgentConfig, Seams, Serving};
        let pki = &self.cluster.running.pki;
        let user = krate_api::user::UserInfo {
            name: format!("system:node:{NODE}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..Default::default()
        };
        let serving =
            pki.issue_serving(&format!("system:node:{NODE}"), &["system:nodes"], &["127.0.0.1".into()]).unwrap();
        let config = AgentConfig {
            node_name: NODE.into(),
            hostname: NODE.into(),
            node_ip: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            bind: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            kubelet_port: 0,
            data_dir: self.data.path().to_path_buf(),
            kubelet_version: "v1.36.0".into(),
            ca_pem: pki.ca.cert_pem.clone(),
        };
        let client = self.cluster.client_as(user);
        let routes = krate_agent::streaming::StreamingRoutes::new(self.runtime.cri().clone(), client.clone(), NODE);
        let seams = Seams { routes: Some(std::sync::Arc::new(routes)), ..Default::default() };
        let serving =
            Serving::Given(krate_agent::bootstrap::CertKey { cert_pem: serving.cert_pem, key_pem: serving.key_pem });
        krate_agent::agent::start(client, config, serving, seams).await.expect("agent API starts")
    }

    /// Stops the agent's pod loop and starts a new one, as an agent restart would
    /// (containerd keeps running).
    pub async fn restart_agent(&mut self) {
        self.stop_agent().await;
        self.start_agent();
    }

    /// Stops the agent's pod loop (containerd keeps running).
    pub async fn stop_agent(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Starts the agent's pod loop again after `stop_agent`.
    pub fn start_agent(&mut self) {
        let run = self.runtime.clone();
        let client = self.agent_client.clone();
        self.task = tokio::spawn(async move { run.run(client, NODE).await });
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Creates a pod bound to this node from `spec` (JSON).
    pub async fn create_pod(&self, name: &str, spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["nodeName"] = NODE.into();
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        self.pods().create(&PostParams::default(), &pod).await.expect("pod created")
    }

    /// Polls the pod until `check` gives a value, for at most `timeout`.
    pub async fn wait_pod<T>(&self, name: &str, what: &str, timeout: Duration, check: impl Fn(&Pod) -> Option<T>) -> T {
        let pods = self.pods();
        let check = &check;
        krate_testkit::eventually(what, timeout, || {
            let pods = pods.clone();
            async move { pods.get_opt(name).await.ok().flatten().as_ref().and_then(check) }
        })
        .await
    }

    /// The runtime's containers of the pod with `uid`.
    pub async fn cri_containers(&self, uid: &str) -> Vec<k8s_cri::v1::ContainerStatus> {
        let cri = self.runtime.cri();
        let filter = k8s_cri::v1::ContainerFilter {
            label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
            ..Default::default()
        };
        let list = cri
            .runtime
            .clone()
            .list_containers(k8s_cri::v1::ListContainersRequest { filter: Some(filter) })
            .await
            .unwrap()
            .into_inner();
        let mut out = Vec::new();
        for c in list.containers {
            let request = k8s_cri::v1::ContainerStatusRequest { container_id: c.id, verbose: false };
            if let Ok(s) = cri.runtime.clone().container_status(request).await {
                out.extend(s.into_inner().status);
            }
        }
        out
    }

    /// Runs `cmd` in the pod's container `container` (CRI ExecSync); its stdout.
    pub async fn exec(&self, uid: &str, container: &str, cmd: &[&str]) -> String {
        let (code, stdout, stderr) = self.exec_result(uid, container, cmd).await;
        assert_eq!(code, 0, "{cmd:?}: {stderr}");
        stdout
    }

    /// Runs `cmd` in the pod's container `container`: exit code, stdout, stderr.
    pub async fn exec_result(&self, uid: &str, container: &str, cmd: &[&str]) -> (i32, String, String) {
        let id = self
            .cri_containers(uid)
            .await
            .into_iter()
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == container))
            .find(|c| c.state == k8s_cri::v1::ContainerState::ContainerRunning as i32)
            .map(|c| c.id)
            .expect("running container");
        let request = k8s_cri::v1::ExecSyncRequest {
            container_id: id,
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 10,
        };
        let reply = self.runtime.cri().runtime.clone().exec_sync(request).await.expect("exec").into_inner();
        (
            reply.exit_code,
            String::from_utf8_lossy(&reply.stdout).into_owned(),
            String::from_utf8_lossy(&reply.stderr).into_owned(),
        )
    }

    /// The number of sandboxes the runtime has for `uid`.
    pub async fn sandboxes_of(&self, uid: &str) -> usize {
        let filter = k8s_cri::v1::PodSandboxFilter {
            label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
            ..Default::default()
        };
        let request = k8s_cri::v1::ListPodSandboxRequest { filter: Some(filter) };
        self.runtime.cri().runtime.clone().list_pod_sandbox(request).await.unwrap().into_inner().items.len()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.task.abort();
        // Cleanup needs async calls while containerd still runs, so it runs on a
        // runtime of its own (Drop may run inside the test's runtime).
        let socket = self.runtime.endpoint().to_path_buf();
        let cgroup_root = self.config.cgroup_root.clone();
        let bridge = self.config.bridge.clone();
        let data_dir = self.data.path().to_path_buf();
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let done = rt.block_on(async {
                let cri = krate_agent::runtime::Cri::new(&socket);
                let done = tokio::time::timeout(
                    Duration::from_secs(30),
                    krate_agent::runtime::remove_all_pods(&cri, &cgroup_root),
                )
                .await;
                // tmpfs volumes (emptyDir Memory, secret, projected) of pods still there.
                krate_agent::runtime::unmount_pod_volumes(&data_dir).await;
                done
            });
            if !matches!(done, Ok(Ok(()))) {
                eprintln!("test node cleanup incomplete: {done:?}");
            }
            let _ = Command::new("ip").args(["link", "del", &bridge]).output();
        });
        let _ = cleanup.join();
    }
}

/// `krate_testkit::eventually` for checks that borrow the test's state.
pub async fn eventually_async<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a namespaced object in default from its JSON.
pub async fn create<K>(node: &TestNode, object: serde_json::Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(node.client.clone(), "default");
    api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.expect("object created")
}

/// The events recorded about pod `name` with `reason`.
pub async fn events_of(node: &TestNode, name: &str, reason: &str) -> Vec<k8s_openapi::api::core::v1::Event> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(node.client.clone(), "default");
    let list = api.list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason))
        .collect()
}
