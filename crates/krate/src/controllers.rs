//! The controller manager, inside `krate server` or alone (`krate controller-manager`).
//! Inside, each controller is a kube-rs client over the in-process transport, acting as
//! its own service account as upstream's kube-controller-manager does with
//! --use-service-account-credentials; alone, every controller uses the kubeconfig's
//! credentials. Either way the controllers run only while this process holds the
//! kube-system/kube-controller-manager Lease (unless leader election is off), so
//! several servers never run them twice.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::Running;
use krate_client::leader;
use krate_controllers::{ClientFor, Clients, Context, Settings, SigningCa};

/// The lease upstream's controller manager elects its leader with.
const LEASE: &str = "kube-controller-manager";

/// Starts the controllers in `krate server`; dropping the handle stops them.
pub fn start(running: &Running, args: &crate::cli::ServerArgs) -> AbortOnDrop {
    let server = running.server.clone();
    // Reads and watches as the controller manager (upstream's shared informers).
    let manager = UserInfo::component("system:kube-controller-manager");
    let client_for: ClientFor = Arc::new(move |name: &str| Clients {
        read: kube::Client::new(InProcess::new(server.clone(), manager.clone()), "default"),
        write: kube::Client::new(
            InProcess::new(server.clone(), UserInfo::service_account("kube-system", name)),
            "default",
        ),
    });
    let settings = Settings {
        root_ca_pem: running.pki.ca.cert_pem.clone(),
        // The built-in CSR signers issue with the cluster CA, as a kubeadm cluster's.
        cluster_signing: Some(SigningCa {
            cert_pem: running.pki.ca.cert_pem.clone(),
            key_pem: running.pki.ca.key_pem.clone(),
        }),
        terminated_pod_gc_threshold: args.terminated_pod_gc_threshold,
        node_monitor_grace_period: args.controllers.node_monitor_grace_period,
        node_eviction_rate: args.controllers.node_eviction_rate,
        legacy_token_cleaner: krate_controllers::legacy_token_cleaner::Tuning {
            clean_up_period: args.controllers.legacy_service_account_token_clean_up_period,
            ..Default::default()
        },
        cluster_cidrs: args.controllers.cluster_cidr.clone(),
        service_cidrs: args.service_cluster_ip_range.split(',').map(|c| c.trim().to_string()).collect(),
        // --node-cidr-mask-size is for single-stack clusters, of either family.
        node_cidr_mask_size_ipv4: args
            .controllers
            .node_cidr_mask_size
            .unwrap_or(args.controllers.node_cidr_mask_size_ipv4),
        node_cidr_mask_size_ipv6: args
            .controllers
            .node_cidr_mask_size
            .unwrap_or(args.controllers.node_cidr_mask_size_ipv6),
        ..Default::default()
    };
    AbortOnDrop(tokio::spawn(run(client_for, settings, args.leader_elect)))
}

/// Runs the controllers, under leader election when asked, until dropped.
async fn run(client_for: ClientFor, settings: Settings, leader_elect: bool) {
    let for_lead = client_for.clone();
    let lead = move || {
        let ctx = Context::new(for_lead.clone(), settings.clone());
        async move {
            // Dropped (aborted) when leadership is lost: stops every controller.
            let _running = AbortOnDrop(krate_controllers::spawn_all(ctx));
            futures::future::pending::<()>().await
        }
    };
    if leader_elect {
        // The lease is the controller manager's own, written under its own identity.
        let client = client_for("leader-election").read;
        leader::run(client, leader::Config::new(LEASE), lead).await
    } else {
        lead().await
    }
}

pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Args, Debug)]
pub struct ControllerManagerArgs {
    /// The API server to control, and the credentials to act with.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The CA published to every namespace as kube-root-ca.crt (default: the
    /// kubeconfig's certificate authority).
    #[arg(long)]
    pub root_ca_file: Option<PathBuf>,
    /// Run the controllers only while holding the kube-controller-manager Lease.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// PEM CA certificate the built-in CSR signers issue with (csrsigning runs only
    /// with it and --cluster-signing-key-file).
    #[arg(long, requires = "cluster_signing_key_file")]
    pub cluster_signing_cert_file: Option<PathBuf>,
    /// PEM private key of --cluster-signing-cert-file.
    #[arg(long, requires = "cluster_signing_cert_file")]
    pub cluster_signing_key_file: Option<PathBuf>,
}

/// `krate controller-manager`: the controllers against a remote API server.
pub async fn run_remote(args: ControllerManagerArgs) -> anyhow::Result<()> {
    let path = args.kubeconfig.display().to_string();
    let config = crate::kubeconfig::load(&args.kubeconfig).await?;
    let root_ca_pem = match &args.root_ca_file {
        Some(file) => tokio::fs::read_to_string(file).await.with_context(|| format!("reading {}", file.display()))?,
        None => root_ca_of(&config).context("the kubeconfig names no certificate authority; pass --root-ca-file")?,
    };
    let cluster_signing = match (&args.cluster_signing_cert_file, &args.cluster_signing_key_file) {
        (Some(cert), Some(key)) => Some(SigningCa {
            cert_pem: tokio::fs::read_to_string(cert).await.with_context(|| format!("reading {}", cert.display()))?,
            key_pem: tokio::fs::read_to_string(key).await.with_context(|| format!("reading {}", key.display()))?,
        }),
        _ => None,
    };
    let client = kube::Client::try_from(config).context("building the API client")?;
    let client_for: ClientFor = Arc::new(move |_: &str| Clients { read: client.clone(), write: client.clone() });
    tracing::info!(kubeconfig = %path, leader_elect = args.leader_elect, "controller manager starting");
    tokio::select! {
        () = run(client_for, Settings { root_ca_pem, cluster_signing, ..Default::default() }, args.leader_elect) => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

fn root_ca_of(config: &kube::Config) -> Option<String> {
    let ders = config.root_cert.as_ref()?;
    let pem: Vec<String> = ders.iter().map(|der| krate_api::pem::encode("CERTIFICATE", der)).collect();
    (!pem.is_empty()).then(|| pem.concat())
}
