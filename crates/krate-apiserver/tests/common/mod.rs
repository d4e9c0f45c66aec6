//! Starts a real krate control plane (SQLite store, HTTPS) for a test, and kube-rs
//! clients for it.

#![allow(dead_code)]

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

    /// A server whose options `tweak` adjusts first (audit flags…).
    pub async fn start_with(tweak: impl FnOnce(&mut Options)) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("state.db");
        let store = SqliteStore::open(SqliteConfig::new(db)).await.expect("open store");
        let mut options = Options::new(dir.path().to_path_buf(), Arc::new(store));
        options.event_ttl = std::time::Duration::from_secs(2);
        tweak(&mut options);
        let running = start(options).await.expect("server starts");
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
