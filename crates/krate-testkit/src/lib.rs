//! A test cluster for behaviour tests of the control loops: a real API server on a
//! fresh SQLite store (HTTPS for the test's own admin client), the chosen controllers
//! as kube-rs clients over the in-process transport with their own identities (as in
//! `krate server`), and simulated nodes.
//!
//! ```ignore
//! let mut cluster = TestCluster::start().await;
//! cluster.controllers(&["deployment", "replicaset"]);
//! let nodes = cluster.simulated_nodes(3).await;
//! let client = cluster.admin().await;
//! ```

use std::sync::Arc;
use std::time::Duration;

pub use krate_agent::simulated;
use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::{Options, Running, start};
use krate_controllers::{ClientFor, Clients, Context, Settings, SigningCa};
use krate_store::sqlite::{SqliteConfig, SqliteStore};

pub struct TestCluster {
    pub running: Running,
    pub dir: tempfile::TempDir,
    /// Controllers, simulated nodes and other loops started for this test; dropped with it.
    loops: Vec<tokio::task::JoinHandle<()>>,
    /// Groups of simulated nodes by name prefix.
    simulated: Vec<(String, simulated::Running)>,
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for task in &self.loops {
            task.abort();
        }
    }
}

impl TestCluster {
    pub async fn start() -> TestCluster {
        Self::start_with(|_| {}).await
    }

    /// A cluster whose API server options `tweak` adjusts first.
    pub async fn start_with(tweak: impl FnOnce(&mut Options)) -> TestCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open(SqliteConfig::new(dir.path().join("state.db"))).await.expect("open store");
        let mut options = Options::new(dir.path().to_path_buf(), Arc::new(store));
        tweak(&mut options);
        let running = start(options).await.expect("server starts");
        TestCluster { running, dir, loops: Vec::new(), simulated: Vec::new() }
    }

    /// A client with the admin certificate, over HTTPS.
    pub async fn admin(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.running.kubeconfig_path).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
        kube::Client::try_from(config).expect("client")
    }

    /// A client acting as `user` over the in-process transport.
    pub fn client_as(&self, user: UserInfo) -> kube::Client {
        kube::Client::new(InProcess::new(self.running.server.clone(), user), "default")
    }

    /// Controller clients as in `krate server`: reads as the controller manager, writes
    /// as the controller's kube-system service account.
    pub fn client_for(&self) -> ClientFor {
        let server = self.running.server.clone();
        Arc::new(move |name: &str| Clients {
            read: kube::Client::new(
                InProcess::new(server.clone(), UserInfo::component("system:kube-controller-manager")),
                "default",
            ),
            write: kube::Client::new(
                InProcess::new(server.clone(), UserInfo::service_account("kube-system", name)),
                "default",
            ),
        })
    }

    /// Starts the controllers of `krate_controllers::all` with these names (all of them
    /// for `&["*"]`), sharing one set of informers as in `krate server`.
    pub fn controllers(&mut self, names: &[&str]) {
        self.controllers_with(names, |_| {});
    }

    /// As `controllers`, with settings that `tweak` adjusts first (a short HPA sync
    /// period, say).
    pub fn controllers_with(&mut self, names: &[&str], tweak: impl FnOnce(&mut Settings)) {
        // Defaults for whatever settings a test does not care about.
        let mut settings = Settings {
            root_ca_pem: self.running.pki.ca.cert_pem.clone(),
            cluster_signing: Some(SigningCa {
                cert_pem: self.running.pki.ca.cert_pem.clone(),
                key_pem: self.running.pki.ca.key_pem.clone(),
            }),
            ..Default::default()
        };
        tweak(&mut settings);
        let ctx = Context::new(self.client_for(), settings);
        for (name, run) in krate_controllers::all(&ctx) {
            if names.contains(&"*") || names.contains(&name) {
                self.loops.push(tokio::spawn(run));
            }
        }
        // The informers must outlive the loops reading them.
        self.loops.push(tokio::spawn(async move {
            let _keep = ctx;
            futures::future::pending::<()>().await
        }));
    }

    /// Starts the scheduler in-process as `krate server` does (as system:kube-scheduler,
    /// upstream's default profile).
    pub fn scheduler(&mut self) {
        self.scheduler_with(krate_scheduler::Options::default());
    }

    pub fn scheduler_with(&mut self, options: krate_scheduler::Options) {
        let client = self.client_as(UserInfo::component("system:kube-scheduler"));
        self.loops.push(tokio::spawn(async move {
            if let Err(error) = krate_scheduler::run(client, options).await {
                panic!("scheduler stopped: {error}");
            }
        }));
    }

    /// Runs any other loop (a scheduler, say) for the life of the cluster.
    pub fn spawn(&mut self, run: impl Future<Output = ()> + Send + 'static) {
        self.loops.push(tokio::spawn(run));
    }

    /// Registers `count` simulated nodes (sim-node-0…), Ready and heartbeating, whose
    /// pods run as their annotations say (see `krate_agent::simulated`).
    pub async fn simulated_nodes(&mut self, count: usize) -> Vec<String> {
        self.simulated_nodes_with(simulated::Options { count, ..Default::default() }).await
    }

    pub async fn simulated_nodes_with(&mut self, options: simulated::Options) -> Vec<String> {
        // As a kubelet would be if it were one: the node agent acts as cluster admin here
        // because one process plays every node.
        let client = self.client_as(UserInfo {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..Default::default()
        });
        let prefix = options.prefix.clone();
        let (names, running) = simulated::start(client, options).await.expect("simulated nodes register");
        self.simulated.push((prefix, running));
        names
    }

    /// Stops the simulated nodes named with `prefix`, as if their kubelets died: their
    /// Node objects stay, their Leases are no longer renewed.
    pub fn stop_simulated_nodes(&mut self, prefix: &str) {
        self.simulated.retain(|(p, _)| p != prefix);
    }
}

/// Polls `check` every 100 ms until it gives a value, for at most `timeout`; panics
/// naming `what` otherwise. Every wait in a behaviour test goes through this.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the pod's Ready condition is True.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Merges `from` into `into` (objects key by key, anything else replaced): how tests
/// adjust a base manifest.
pub fn merge_json(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge_json(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}
