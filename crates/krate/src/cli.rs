//! The command-line contract. Flag names follow k3s and upstream components so that
//! existing habits and scripts carry over.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "krate", version, about = "Kubernetes in one binary", propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing EnvFilter syntax); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    pub log_level: String,
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a control plane (API server, controllers, scheduler) and, unless disabled, a node agent.
    Server(ServerArgs),
    /// Join this machine to a cluster as a node.
    Agent(AgentArgs),
    /// Manage container images on this node.
    #[command(subcommand)]
    Images(ImagesCommand),
    /// Print the krate and Kubernetes versions.
    Version,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StorageKind {
    /// Embedded SQLite in the data dir.
    Sqlite,
    /// An external etcd v3 cluster (--etcd-servers).
    Etcd,
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Where state, certificates and kubeconfigs live.
    #[arg(long, default_value = "/var/lib/krate")]
    pub data_dir: PathBuf,
    /// Address the API server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// Port the API server serves HTTPS on.
    #[arg(long, default_value_t = 6443)]
    pub secure_port: u16,
    /// Run the control plane only, without a node agent.
    #[arg(long)]
    pub disable_agent: bool,
    /// Where cluster state is kept.
    #[arg(long, value_enum, default_value_t = StorageKind::Sqlite)]
    pub storage: StorageKind,
    /// etcd client URLs, comma-separated (with --storage etcd).
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// Let requests without credentials act as system:anonymous (false: refuse them with 401).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// Cluster IPs for Services come from this range.
    #[arg(long, default_value = "10.43.0.0/16")]
    pub service_cluster_ip_range: String,
    /// NodePorts come from this range.
    #[arg(long, default_value = "30000-32767")]
    pub service_node_port_range: String,
    /// Concurrent non-mutating requests before 429 (0: unlimited).
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// Concurrent mutating requests before 429 (0: unlimited).
    #[arg(long, default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,
    /// AdmissionConfiguration (apiserver.config.k8s.io/v1) with the admission plugins'
    /// settings, e.g. PodSecurity's defaults and exemptions.
    #[arg(long)]
    pub admission_control_config_file: Option<std::path::PathBuf>,
    /// How long Events are kept, in seconds (upstream's --event-ttl, 1h).
    #[arg(long, default_value_t = 3600)]
    pub event_ttl_seconds: u64,
    /// How often old revisions are compacted away, in seconds.
    #[arg(long, default_value_t = 300)]
    pub compaction_interval_seconds: u64,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// The API server to join, e.g. https://10.0.0.1:6443.
    #[arg(long)]
    pub server: String,
    /// The join token printed by `krate server`.
    #[arg(long)]
    pub token: String,
    #[arg(long)]
    pub node_name: Option<String>,
    #[arg(long, default_value = "/var/lib/krate")]
    pub data_dir: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum ImagesCommand {
    /// Import OCI-layout or docker-archive tarballs into this node's container runtime.
    Import(ImportArgs),
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    #[arg(long, default_value = "/var/lib/krate")]
    pub data_dir: PathBuf,
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}
