//! `krate server`: the control plane on one machine.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use krate_admission::{Chain, NamespaceLifecycle};
use krate_api::{Registry, ResourceTable};
use krate_apiserver::pki::{Pki, write_private};
use krate_apiserver::serve::Listener;
use krate_apiserver::{ApiServer, ApiServerConfig, bootstrap};
use krate_store::{Compactor, CompactorConfig};

use crate::cli::ServerArgs;

/// Names and addresses the serving certificate is valid for.
fn serving_sans(args: &ServerArgs) -> Vec<String> {
    let mut sans: Vec<String> =
        ["localhost", "127.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    sans.push("kubernetes.default.svc.cluster.local".into());
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() && !sans.iter().any(|s| s == host) {
            sans.push(host.to_string());
        }
    }
    if !args.bind_address.is_unspecified() && !args.bind_address.is_loopback() {
        sans.push(args.bind_address.to_string());
    }
    sans
}

/// The address clients on this machine use.
fn local_address(args: &ServerArgs) -> IpAddr {
    if args.bind_address.is_unspecified() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { args.bind_address }
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    tokio::fs::create_dir_all(&args.data_dir).await.with_context(|| format!("creating {}", args.data_dir.display()))?;
    let kubeconfig_path = args.data_dir.join("admin.kubeconfig");
    // Scripts wait for this file to appear: it must only exist once we are ready.
    let _ = tokio::fs::remove_file(&kubeconfig_path).await;

    let store = crate::storage::open(&args).await?;
    let status = store.status().await?;
    tracing::info!(backend = store.backend_name(), revision = status.revision, "store ready");
    let _compactor = Compactor::start(
        store.clone(),
        CompactorConfig { interval: Duration::from_secs(args.compaction_interval_seconds) },
    );

    let tls_dir = args.data_dir.join("server").join("tls");
    let sans = serving_sans(&args);
    let pki = tokio::task::spawn_blocking(move || Pki::ensure(&tls_dir, &sans)).await??;

    let registry = Arc::new(Registry::new(store, Arc::new(ResourceTable::builtin())));
    let admission = Arc::new(Chain::new(vec![Arc::new(NamespaceLifecycle::new(&registry))]));
    let advertise = SocketAddr::new(local_address(&args), args.secure_port);
    let config = ApiServerConfig { advertise_address: advertise.to_string(), anonymous_auth: args.anonymous_auth };
    let server = Arc::new(ApiServer::new(registry.clone(), admission, config));
    let listener = Listener::bind(SocketAddr::new(args.bind_address, args.secure_port), &pki, server.clone()).await?;
    let port = listener.local_addr().port();
    let serving = tokio::spawn(listener.run());

    bootstrap::system_namespaces(&registry).await.context("creating the system namespaces")?;
    server.set_ready();

    let url = format!("https://{}", SocketAddr::new(local_address(&args), port));
    let kubeconfig = pki.kubeconfig(&url, &pki.admin, "admin");
    let path = kubeconfig_path.clone();
    tokio::task::spawn_blocking(move || write_private(&path, &kubeconfig)).await??;
    tracing::info!(
        url,
        kubeconfig = %kubeconfig_path.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "krate server is ready"
    );
    if !args.disable_agent {
        tracing::warn!("the node agent is not available yet in this version of krate: running the control plane only");
    }

    tokio::select! {
        _ = serving => anyhow::bail!("the API server stopped unexpectedly"),
        _ = shutdown_signal() => tracing::info!("shutting down"),
    }
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
