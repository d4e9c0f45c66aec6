//! Starts a real krate control plane (SQLite store, HTTPS) for a test, and kube-rs
//! clients for it.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use krate_apiserver::start::{Options, Running, start};
use krate_store::sqlite::{SqliteConfig, SqliteStore};

pub struct TestServer {
    pub running: Running,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// A server whose options `adjust` changes first (the data directory already exists).
    pub async fn start_with(adjust: impl FnOnce(&mut Options)) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("state.db");
        let store = SqliteStore::open(SqliteConfig::new(db)).await.expect("open store");
        let mut opts = Options {
            data_dir: dir.path().to_path_buf(),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            anonymous_auth: true,
            extra_sans: vec![],
            store: Arc::new(store),
            event_ttl: std::time::Duration::from_secs(2),
            service_cidr: "10.43.0.0/16".into(),
            node_port_range: "30000-32767".into(),
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            admission_control_config_file: None,
        };
        adjust(&mut opts);
        let running = start(opts).await.expect("server starts");
        TestServer { running, dir }
    }

    pub async fn config(&self) -> kube::Config {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.running.kubeconfig_path).expect("kubeconfig");
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("kube config")
    }

    /// A client with the admin certificate.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config().await).expect("client")
    }

    /// A client without credentials.
    pub async fn anonymous(&self) -> kube::Client {
        let mut config = self.config().await;
        config.auth_info = Default::default();
        kube::Client::try_from(config).expect("client")
    }
}
