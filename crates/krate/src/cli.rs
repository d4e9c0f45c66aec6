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
    Server(Box<ServerArgs>),
    /// Run the controllers against an API server (the controller manager alone).
    ControllerManager(crate::controllers::ControllerManagerArgs),
    /// Register simulated nodes (no containers) with an API server, for scale testing.
    SimulateNodes(crate::simulate::SimulateNodesArgs),
    /// Join this machine to a cluster as a node.
    Agent(AgentArgs),
    /// Run the scheduler alone against an API server (`krate server` runs one itself).
    Scheduler(SchedulerArgs),
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
    /// This server's node name (default: the hostname).
    #[arg(long)]
    pub node_name: Option<String>,
    #[command(flatten)]
    pub node: NodeArgs,
    /// Run no controllers in this process (another process runs them, or none does).
    #[arg(long)]
    pub disable_controller_manager: bool,
    /// Run the controllers and the scheduler only while holding the
    /// kube-controller-manager and kube-scheduler Leases, so that several servers sharing
    /// one etcd never run them twice.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Run no scheduler in this process.
    #[arg(long)]
    pub disable_scheduler: bool,
    /// Run no cluster DNS server in this process.
    #[arg(long)]
    pub disable_cluster_dns: bool,
    /// The port the cluster DNS server listens on at the node IP (the kube-dns Service
    /// forwards its port 53 there; 0: any free port).
    #[arg(long, default_value_t = 53)]
    pub cluster_dns_port: u16,
    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1) for the scheduler.
    #[arg(long = "scheduler-config")]
    pub scheduler_config: Option<std::path::PathBuf>,
    /// Terminated pods allowed before the pod garbage collector deletes the oldest; 0 or
    /// less disables that (kube-controller-manager's flag).
    #[arg(long, default_value_t = 12500, allow_negative_numbers = true)]
    pub terminated_pod_gc_threshold: i32,
    /// Where cluster state is kept.
    #[arg(long, value_enum, default_value_t = StorageKind::Sqlite)]
    pub storage: StorageKind,
    /// etcd client URLs, comma-separated (with --storage etcd).
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// Let requests without credentials act as system:anonymous (false: refuse them with 401).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// Authorizers, in order, as a comma list of AlwaysAllow, AlwaysDeny, Node and RBAC
    /// (system:masters may always do anything).
    #[arg(long, default_value = "Node,RBAC")]
    pub authorization_mode: String,
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
    /// Static bearer tokens: a CSV file of token,user,uid,"group1,group2".
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// The issuer (iss claim) of service-account tokens.
    #[arg(long, default_value = "https://kubernetes.default.svc.cluster.local")]
    pub service_account_issuer: String,
    /// Audiences the API server accepts tokens for, comma-separated (default: the issuer).
    #[arg(long, value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// The key set's address in the OIDC discovery document (default: this server's).
    #[arg(long)]
    pub service_account_jwks_uri: Option<String>,
    /// The longest lifetime of service-account tokens issued by TokenRequest (e.g. 24h);
    /// longer requests get this.
    #[arg(long, value_parser = krate_apiserver::audit::parse_duration)]
    pub service_account_max_token_expiration: Option<std::time::Duration>,
    /// An apiserver.config.k8s.io/v1 EncryptionConfiguration: how resources are
    /// encrypted at rest.
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
    /// Re-read --encryption-provider-config when it changes, without a restart.
    #[arg(long)]
    pub encryption_provider_config_automatic_reload: bool,
    #[command(flatten)]
    pub audit: Box<AuditArgs>,
    #[command(flatten)]
    pub controllers: Box<ControllerArgs>,
}

/// Settings of the controller manager's controllers (upstream kube-controller-manager's
/// flags of the same names).
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Pod CIDRs handed out to nodes, comma-separated (one per IP family for dual-stack).
    #[arg(long, value_delimiter = ',', default_value = "10.42.0.0/16")]
    pub cluster_cidr: Vec<String>,
    /// Prefix length of each node's podCIDR in a single-stack cluster.
    #[arg(long)]
    pub node_cidr_mask_size: Option<u8>,
    /// Prefix length of each node's IPv4 podCIDR in a dual-stack cluster.
    #[arg(long, default_value_t = 24)]
    pub node_cidr_mask_size_ipv4: u8,
    /// Prefix length of each node's IPv6 podCIDR in a dual-stack cluster.
    #[arg(long, default_value_t = 64)]
    pub node_cidr_mask_size_ipv6: u8,
    /// How long a node may go without a heartbeat before it is marked unhealthy (e.g. 40s).
    #[arg(long, default_value = "40s", value_parser = krate_apiserver::audit::parse_duration)]
    pub node_monitor_grace_period: std::time::Duration,
    /// Nodes per second whose pods may be evicted (taints added) in a healthy zone.
    #[arg(long, default_value_t = 0.1)]
    pub node_eviction_rate: f64,
    /// How long an auto-generated legacy service-account token may go unused before it is
    /// invalidated, and then stay invalid before it is deleted (default one year).
    #[arg(long, default_value = "8760h", value_parser = krate_apiserver::audit::parse_duration)]
    pub legacy_service_account_token_clean_up_period: std::time::Duration,
}

/// Upstream's --audit-* flags.
#[derive(Args, Debug, Default)]
pub struct AuditArgs {
    /// An audit.k8s.io/v1 Policy (YAML or JSON); without it nothing is audited.
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,
    /// Where audit events are written, one JSON object a line ("-": standard output).
    #[arg(long)]
    pub audit_log_path: Option<PathBuf>,
    /// Rotate the audit log past this many megabytes (0: never).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxsize: u64,
    /// Rotated audit logs kept (0: all).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: usize,
    /// Days rotated audit logs are kept (0: forever).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxage: u64,
    /// Format of audit log lines (json).
    #[arg(long, default_value = "json")]
    pub audit_log_format: String,
    /// A kubeconfig naming the audit webhook.
    #[arg(long)]
    pub audit_webhook_config_file: Option<PathBuf>,
    /// Events buffered for the webhook before new ones are dropped.
    #[arg(long, default_value_t = 10000)]
    pub audit_webhook_batch_buffer_size: usize,
    /// Most events in one webhook request.
    #[arg(long, default_value_t = 400)]
    pub audit_webhook_batch_max_size: usize,
    /// Longest an event waits for its batch (a Go duration: 30s, 500ms).
    #[arg(long, default_value = "30s")]
    pub audit_webhook_batch_max_wait: String,
    /// First wait before retrying a failed webhook request (a Go duration).
    #[arg(long, default_value = "10s")]
    pub audit_webhook_initial_backoff: String,
}

#[derive(Args, Debug)]
pub struct SchedulerArgs {
    /// Kubeconfig of the API server to schedule for (its user needs system:kube-scheduler's rights).
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Schedule only while holding the kube-scheduler Lease.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// The API server to join, e.g. https://10.0.0.1:6443.
    #[arg(long)]
    pub server: String,
    /// The join token printed by `krate server`.
    #[arg(long)]
    pub token: String,
    /// The node's name (default: the hostname).
    #[arg(long)]
    pub node_name: Option<String>,
    #[arg(long, default_value = "/var/lib/krate")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub node: NodeArgs,
    /// The cluster's pod CIDRs, as the server's --cluster-cidr (routes, masquerade).
    #[arg(long, value_delimiter = ',', default_value = "10.42.0.0/16")]
    pub cluster_cidr: Vec<String>,
    /// The cluster's Service range, as the server's --service-cluster-ip-range.
    #[arg(long, default_value = "10.43.0.0/16")]
    pub service_cidr: String,
}

/// The node agent's flags shared by `krate server` and `krate agent`.
#[derive(Args, Debug, Clone)]
pub struct NodeArgs {
    /// The node's InternalIP, where the API server reaches its kubelet port (default:
    /// the first non-loopback IPv4 address).
    #[arg(long)]
    pub node_ip: Option<IpAddr>,
    /// The port of the agent's HTTPS API (upstream's kubelet --port; 0: any free port).
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
    /// An existing CRI runtime's socket (unix://PATH); without it the agent starts and
    /// supervises its own containerd under DATA_DIR/agent.
    #[arg(long)]
    pub container_runtime_endpoint: Option<std::path::PathBuf>,
    /// The cluster DNS Service's IP, pods' nameserver under dnsPolicy ClusterFirst
    /// (the kubelet's --cluster-dns; inside --service-cluster-ip-range).
    #[arg(long, default_value = "10.43.0.10")]
    pub cluster_dns: IpAddr,
    /// The cluster's DNS domain (the kubelet's --cluster-domain).
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Run no service proxy on this node (another one, or none, handles Services).
    #[arg(long)]
    pub disable_kube_proxy: bool,
    /// How pods on different nodes reach each other: host-gw (routes to each node's
    /// podCIDR via its InternalIP, pod traffic leaving the cluster masqueraded) or none.
    #[arg(long, value_enum, default_value_t = FlannelBackend::HostGw)]
    pub flannel_backend: FlannelBackend,
    /// Enforce no NetworkPolicies on this node (k3s's flag).
    #[arg(long)]
    pub disable_network_policy: bool,
}

/// k3s's --flannel-backend values that krate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FlannelBackend {
    HostGw,
    None,
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
