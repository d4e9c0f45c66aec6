//! `krate server`: the control plane on one machine.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use krate_apiserver::start::{self, Options};
use krate_store::{Compactor, CompactorConfig};

use crate::cli::ServerArgs;

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    tokio::fs::create_dir_all(&args.data_dir).await.with_context(|| format!("creating {}", args.data_dir.display()))?;
    let store = crate::storage::open(&args).await?;
    let status = store.status().await?;
    tracing::info!(backend = store.backend_name(), revision = status.revision, "store ready");
    let _compactor = Compactor::start(
        store.clone(),
        CompactorConfig { interval: Duration::from_secs(args.compaction_interval_seconds) },
    );

    let encryption = crate::encryption::load(&args).await?;
    let hostname = tokio::fs::read_to_string("/proc/sys/kernel/hostname").await.unwrap_or_default().trim().to_string();
    let running = start::start(Options {
        data_dir: args.data_dir.clone(),
        bind: SocketAddr::new(args.bind_address, args.secure_port),
        anonymous_auth: args.anonymous_auth,
        extra_sans: if hostname.is_empty() { vec![] } else { vec![hostname] },
        store,
        event_ttl: Duration::from_secs(args.event_ttl_seconds),
        service_cidr: args.service_cluster_ip_range.clone(),
        node_port_range: args.service_node_port_range.clone(),
        max_requests_inflight: args.max_requests_inflight,
        max_mutating_requests_inflight: args.max_mutating_requests_inflight,
        authorization_mode: args.authorization_mode.clone(),
        audit: audit_options(&args.audit)?,
        encryption,
        authn: start::AuthnOptions {
            token_auth_file: args.token_auth_file.clone(),
            service_account_issuer: Some(args.service_account_issuer.clone()),
            api_audiences: args.api_audiences.clone(),
            service_account_jwks_uri: args.service_account_jwks_uri.clone(),
            service_account_max_token_expiration: args.service_account_max_token_expiration,
        },
        admission_control_config_file: args.admission_control_config_file.clone(),
    })
    .await?;
    tracing::info!(
        url = running.url,
        kubeconfig = %running.kubeconfig_path.display(),
        startup_ms = started.elapsed().as_millis() as u64,
        "krate server is ready"
    );
    let _controllers =
        if args.disable_controller_manager { None } else { Some(crate::controllers::start(&running, &args)) };
    let _scheduler = if args.disable_scheduler {
        None
    } else {
        Some(crate::scheduler::start(&running, args.scheduler_config.clone(), args.leader_elect).await?)
    };
    // Nodes join with this token (`krate agent --token`).
    if let Some(token) = &running.join_token {
        tracing::info!(path = %args.data_dir.join("token").display(), token, "join token");
    }
    crate::network::publish_rbac(&running).await?;
    let dns = if args.disable_cluster_dns {
        None
    } else {
        let node = match &args.node_name {
            Some(n) => n.clone(),
            None => crate::agent::hostname().await,
        };
        let ip = crate::agent::node_ip(&args.node);
        // The cluster runs without it (pods' names do not resolve); it says why.
        match crate::network::start_dns(&running, &args, &node, ip).await {
            Ok(dns) => Some(dns),
            Err(error) => {
                tracing::error!(error = format!("{error:#}"), "the cluster DNS server could not start");
                None
            }
        }
    };
    let agent = if args.disable_agent { None } else { Some(crate::agent::start_in_server(&running, &args).await?) };
    shutdown_signal().await;
    tracing::info!("shutting down");
    if let Some(agent) = agent {
        agent.shutdown().await;
    }
    if let Some(dns) = dns {
        dns.stop().await;
    }
    Ok(())
}

pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The --audit-* flags as the API server takes them.
fn audit_options(a: &crate::cli::AuditArgs) -> anyhow::Result<krate_apiserver::audit::AuditOptions> {
    use krate_apiserver::audit::{AuditOptions, log::LogOptions, parse_duration, webhook::WebhookOptions};
    let webhook = match &a.audit_webhook_config_file {
        Some(path) => Some(WebhookOptions {
            buffer_size: a.audit_webhook_batch_buffer_size,
            batch_max_size: a.audit_webhook_batch_max_size,
            batch_max_wait: parse_duration(&a.audit_webhook_batch_max_wait)
                .map_err(|e| anyhow::anyhow!("--audit-webhook-batch-max-wait: {e}"))?,
            initial_backoff: parse_duration(&a.audit_webhook_initial_backoff)
                .map_err(|e| anyhow::anyhow!("--audit-webhook-initial-backoff: {e}"))?,
            ..WebhookOptions::new(path.clone())
        }),
        None => None,
    };
    Ok(AuditOptions {
        policy_file: a.audit_policy_file.clone(),
        log: a.audit_log_path.as_ref().map(|path| LogOptions {
            path: path.clone(),
            max_size_mb: a.audit_log_maxsize,
            max_backups: a.audit_log_maxbackup,
            max_age_days: a.audit_log_maxage,
        }),
        log_format: a.audit_log_format.clone(),
        webhook,
    })
}
