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
    /// The configuration of a client whose certificate (from the cluster CA) names `user`
    /// in `groups`.
    pub async fn user_config(&self, user: &str, groups: &[&str]) -> kube::Config {
        let cert = self.running.pki.issue_client(user, groups).expect("client certificate");
        let yaml = self.running.pki.kubeconfig(&self.running.url, &cert, user);
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("kubeconfig");
        kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config")
    }

    pub async fn user_client(&self, user: &str, groups: &[&str]) -> kube::Client {
        kube::Client::try_from(self.user_config(user, groups).await).expect("client")
    }

    pub async fn anonymous(&self) -> kube::Client {
        let mut config = self.config().await;
        config.auth_info = Default::default();
        kube::Client::try_from(config).expect("client")
    }
}

/// One JSON request; the answer, or kube-rs's error (API errors carry the Status).
pub async fn call(
    c: &kube::Client,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map(|b| serde_json::to_vec(&b).unwrap()).unwrap_or_default())
        .unwrap();
    c.request::<serde_json::Value>(req).await
}

/// The status code of a call: 200 for any success, else the error's code.
pub async fn code(c: &kube::Client, method: &str, path: &str, body: Option<serde_json::Value>) -> u16 {
    match call(c, method, path, body).await {
        Ok(_) => 200,
        Err(kube::Error::Api(e)) => e.code,
        Err(e) => panic!("{method} {path}: {e}"),
    }
}
