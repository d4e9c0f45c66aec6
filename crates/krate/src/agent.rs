//! `krate agent` (join this machine as a node) and the agent `krate server` runs for
//! its own node, as k3s does.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use anyhow::Context as _;
use krate_agent::agent::{self, Agent, AgentConfig, Seams, Serving};
use krate_agent::bootstrap;
use krate_agent::node::status::RuntimeStatus;
use krate_agent::runtime::{PodRuntime, RuntimeConfig};
use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::Running;

use crate::cli::{AgentArgs, NodeArgs, ServerArgs};
use crate::network::{JoinedNodeNetwork, NodeNetwork, NodeNetworkSettings};

/// This machine's hostname, lowercased (node names are DNS subdomains).
pub async fn hostname() -> String {
    let h = tokio::fs::read_to_string("/proc/sys/kernel/hostname").await.unwrap_or_default();
    let h = h.trim().to_lowercase();
    if h.is_empty() { "localhost".into() } else { h }
}

pub fn node_ip(args: &NodeArgs) -> IpAddr {
    args.node_ip.or_else(krate_apiserver::start::host_address).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

fn config(
    node_name: String,
    hostname: String,
    node: &NodeArgs,
    data_dir: &std::path::Path,
    ca_pem: &str,
) -> AgentConfig {
    AgentConfig {
        node_name,
        hostname,
        node_ip: node_ip(node),
        bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        kubelet_port: node.kubelet_port,
        data_dir: data_dir.to_path_buf(),
        kubelet_version: crate::KUBERNETES_VERSION.into(),
        ca_pem: ca_pem.into(),
    }
}

/// The container runtime as the node status reports it.
struct RuntimeState {
    version: String,
    /// Why pods cannot run here, when they cannot.
    unavailable: Option<String>,
}

impl RuntimeStatus for RuntimeState {
    fn version(&self) -> String {
        self.version.clone()
    }
    fn ready(&self) -> Result<(), String> {
        self.unavailable.clone().map_or(Ok(()), Err)
    }
}

/// An agent with its pods: dropping it stops the pod worker and the runtime it started.
pub struct NodeAgent {
    pub agent: Agent,
    _runtime: Option<PodRuntime>,
    worker: Option<tokio::task::JoinHandle<()>>,
    network: Option<NodeNetwork>,
    joined_network: Option<JoinedNodeNetwork>,
}

impl NodeAgent {
    pub async fn shutdown(mut self) {
        if let Some(w) = self.worker.take() {
            w.abort();
        }
        // A clean stop takes the networking's tables and routes away with it.
        if let Some(network) = self.network.take() {
            network.stop().await;
        }
        if let Some(network) = self.joined_network.take() {
            network.stop().await;
        }
        self.agent.shutdown().await;
    }
}

/// Starts this node's container runtime. When it cannot start, the node still joins but
/// reports NotReady with the reason, so nothing is scheduled onto it.
async fn start_runtime(
    data_dir: &std::path::Path,
    node: &NodeArgs,
    node_ip: IpAddr,
) -> (Option<PodRuntime>, Arc<dyn RuntimeStatus>) {
    let mut config = RuntimeConfig::new(data_dir);
    config.container_runtime_endpoint = node.container_runtime_endpoint.clone();
    config.node_ip = node_ip.to_string();
    config.cluster_dns = vec![node.cluster_dns.to_string()];
    config.cluster_domain = node.cluster_domain.clone();
    match PodRuntime::start(config).await {
        Ok(rt) => {
            let version = rt.runtime_version().await.unwrap_or_default();
            tracing::info!(%version, endpoint = %rt.endpoint().display(), "container runtime ready");
            (Some(rt), Arc::new(RuntimeState { version, unavailable: None }))
        }
        Err(error) => {
            tracing::error!(%error, "the container runtime could not start; this node stays NotReady");
            let why = format!("container runtime is not ready: {error}");
            (None, Arc::new(RuntimeState { version: String::new(), unavailable: Some(why) }))
        }
    }
}

/// What the runtime plugs into the agent: its status, and its endpoints (container
/// logs, exec, attach, port-forward) when it runs.
fn seams(runtime: &Option<PodRuntime>, status: Arc<dyn RuntimeStatus>, client: &kube::Client, node: &str) -> Seams {
    let routes = runtime.as_ref().map(|rt| {
        Arc::new(krate_agent::streaming::StreamingRoutes::new(rt.cri().clone(), client.clone(), node))
            as Arc<dyn krate_agent::kubelet_api::Routes>
    });
    Seams { runtime: Some(status), routes, ..Default::default() }
}

fn run_pods(runtime: &Option<PodRuntime>, client: kube::Client, node: String) -> Option<tokio::task::JoinHandle<()>> {
    let rt = runtime.clone()?;
    Some(tokio::spawn(async move { rt.run(client, &node).await }))
}

/// `krate agent --server URL --token TOKEN`.
pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let hostname = hostname().await;
    let node = args.node_name.clone().unwrap_or_else(|| hostname.clone());
    tokio::fs::create_dir_all(bootstrap::agent_dir(&args.data_dir))
        .await
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let creds = bootstrap::node_credentials(&args.server, &args.token, &node, &args.data_dir).await?;
    let client = bootstrap::node_client(&args.server, &creds)?;
    let config = config(node.clone(), hostname, &args.node, &args.data_dir, &creds.ca_pem);
    let (runtime, status) = start_runtime(&args.data_dir, &args.node, config.node_ip).await;
    let seams = seams(&runtime, status, &client, &node);
    let agent = agent::start(client.clone(), config, Serving::Request, seams).await?;
    let settings =
        NodeNetworkSettings::new(&node, node_ip(&args.node), &args.node, &args.cluster_cidr, &args.service_cidr);
    let joined_network = JoinedNodeNetwork::start(
        args.server.clone(),
        client.clone(),
        creds.ca_pem.clone(),
        args.data_dir.clone(),
        settings,
        runtime.clone(),
    );
    let worker = run_pods(&runtime, client, node);
    let agent = NodeAgent { agent, _runtime: runtime, worker, network: None, joined_network };
    crate::server::shutdown_signal().await;
    tracing::info!("shutting down");
    agent.shutdown().await;
    Ok(())
}

/// The agent of `krate server`'s own node: an in-process client acting as
/// system:node:NAME (so the Node authorizer and NodeRestriction apply as to any node)
/// and a serving certificate minted by the cluster CA, so no bootstrap is needed.
pub async fn start_in_server(running: &Running, args: &ServerArgs) -> anyhow::Result<NodeAgent> {
    let hostname = hostname().await;
    let node = args.node_name.clone().unwrap_or_else(|| hostname.clone());
    let user = UserInfo {
        name: format!("system:node:{node}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        ..Default::default()
    };
    let client = kube::Client::new(InProcess::new(running.server.clone(), user), "default");
    let config = config(node.clone(), hostname.clone(), &args.node, &args.data_dir, &running.pki.ca.cert_pem);
    let sans = vec![hostname, config.node_ip.to_string()];
    let serving = running.pki.issue_serving(&format!("system:node:{node}"), &["system:nodes"], &sans)?;
    let (runtime, status) = start_runtime(&args.data_dir, &args.node, config.node_ip).await;
    let agent = agent::start(
        client.clone(),
        config,
        Serving::Given(krate_agent::bootstrap::CertKey { cert_pem: serving.cert_pem, key_pem: serving.key_pem }),
        seams(&runtime, status, &client, &node),
    )
    .await?;
    let settings = NodeNetworkSettings::new(
        &node,
        node_ip(&args.node),
        &args.node,
        &args.controllers.cluster_cidr,
        &args.service_cluster_ip_range,
    );
    let network = NodeNetwork::start_in_server(running, &settings, runtime.clone());
    let worker = run_pods(&runtime, client, node);
    Ok(NodeAgent { agent, _runtime: runtime, worker, network: Some(network), joined_network: None })
}
