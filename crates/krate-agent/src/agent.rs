//! One node agent: binds the kubelet port, registers the Node with the node's client,
//! gets its serving certificate, serves the HTTPS API, and keeps the status and Lease
//! current until shut down. `krate agent` starts it after TLS bootstrap with a client
//! over HTTPS; `krate server` starts one in-process with a certificate minted by its CA.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::bootstrap::{self, BootstrapError, CertKey};
use crate::kubelet_api::{self, BoundPods, KubeletApi, PodSource, Routes};
use crate::metrics;
use crate::node::lease::Heartbeat;
use crate::node::status::{NodeIdentity, RuntimeStatus};
use crate::node::{NodeError, NodeOptions, StatusReporter};

/// Upstream's kubelet port.
pub const KUBELET_PORT: u16 = 10250;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("serving certificate: {0}")]
    Serving(#[from] BootstrapError),
    #[error(transparent)]
    Api(#[from] kubelet_api::ApiError),
}

#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub node_name: String,
    pub hostname: String,
    /// The node's InternalIP: where the API server reaches the kubelet port.
    pub node_ip: IpAddr,
    /// Where the HTTPS API listens (all addresses by default).
    pub bind: IpAddr,
    /// 0 picks a free port (tests), reported in the Node's daemonEndpoints.
    pub kubelet_port: u16,
    pub data_dir: PathBuf,
    /// nodeInfo.kubeletVersion.
    pub kubelet_version: String,
    /// The cluster CA: callers' certificates are checked against it.
    pub ca_pem: String,
}

/// Where the serving certificate comes from.
pub enum Serving {
    /// Already made (`krate server` mints it from its CA).
    Given(CertKey),
    /// Asked for as the node through a kubelet-serving CSR (kept in DATA_DIR/agent).
    Request,
}

/// What the container runtime plugs in (all optional until the runtime is wired):
/// readiness and version for the node status, the pods /pods lists, more endpoints.
#[derive(Default)]
pub struct Seams {
    pub runtime: Option<Arc<dyn RuntimeStatus>>,
    pub pods: Option<Arc<dyn PodSource>>,
    pub routes: Option<Arc<dyn Routes>>,
}

/// A running agent; `shutdown` marks the node not ready, dropping just stops it.
pub struct Agent {
    pub kubelet_addr: SocketAddr,
    status: Arc<StatusReporter>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Agent {
    /// Graceful shutdown: the node reports Ready=False ("node is shutting down") so
    /// the scheduler stops placing pods here, then the loops stop.
    pub async fn shutdown(self) {
        if let Err(error) = self.status.report(true, true).await {
            tracing::warn!(%error, "could not mark the node not ready on shutdown");
        }
    }
}

/// Retries `f` with back-off (up to 10 s) until it succeeds: the API server may not be
/// reachable yet, as upstream's kubelet keeps trying to register.
async fn retrying<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let mut delay = Duration::from_millis(200);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(error) => {
                tracing::warn!(%error, "{what} failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

pub async fn start(
    client: kube::Client,
    config: AgentConfig,
    serving: Serving,
    seams: Seams,
) -> Result<Agent, AgentError> {
    let addr = SocketAddr::new(config.bind, config.kubelet_port);
    let listener = std::net::TcpListener::bind(addr).map_err(|source| AgentError::Bind { addr, source })?;
    let kubelet_addr = listener.local_addr().map_err(|source| AgentError::Bind { addr, source })?;
    let identity = NodeIdentity {
        name: config.node_name.clone(),
        hostname: config.hostname.clone(),
        ip: config.node_ip,
        kubelet_port: kubelet_addr.port(),
        kubelet_version: config.kubelet_version.clone(),
    };
    metrics::NODE_NAME.with_label_values(&[&config.node_name]).set(1);
    let options = NodeOptions::new(identity, config.data_dir.clone());
    let status = Arc::new(StatusReporter::new(client.clone(), options.clone(), seams.runtime.clone()).await);
    retrying("registering the node", || status.register()).await;

    let serving = match serving {
        Serving::Given(c) => c,
        Serving::Request => {
            let names = vec![config.hostname.clone(), config.node_ip.to_string()];
            bootstrap::serving_certificate(&client, &config.node_name, &names, &config.data_dir).await?
        }
    };
    let pods = seams
        .pods
        .clone()
        .unwrap_or_else(|| Arc::new(BoundPods { client: client.clone(), node: config.node_name.clone() }));
    let api = KubeletApi::new(listener, &serving, &config.ca_pem, client.clone(), &config.node_name, pods)?;
    if let Some(routes) = seams.routes {
        api.set_routes(routes);
    }
    let heartbeat = Heartbeat::new(client, &config.node_name, options.lease_duration_seconds);
    let tasks = vec![
        tokio::spawn(api.run()),
        tokio::spawn(status.clone().run()),
        tokio::spawn(heartbeat.run(options.lease_renew)),
    ];
    tracing::info!(node = %config.node_name, %kubelet_addr, "node agent is running");
    Ok(Agent { kubelet_addr, status, tasks })
}
