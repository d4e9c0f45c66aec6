//! `krate simulate-nodes`: registers simulated nodes with an API server and keeps them
//! alive (see krate_agent::simulated) — for exercising the control plane at scale, as
//! kwok does. Run apart from the server so its memory is not the control plane's.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use krate_agent::simulated;

#[derive(Args, Debug)]
pub struct SimulateNodesArgs {
    /// The API server, and credentials allowed to write Nodes, Leases and pod status.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// How many nodes.
    #[arg(long, default_value_t = 10)]
    pub count: usize,
    /// Node names are PREFIX0, PREFIX1, …
    #[arg(long, default_value = "sim-node-")]
    pub prefix: String,
    #[arg(long, default_value = "32")]
    pub cpu: String,
    #[arg(long, default_value = "256Gi")]
    pub memory: String,
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,
    /// Nodes are spread over this many zones (topology.kubernetes.io/zone).
    #[arg(long, default_value_t = 1)]
    pub zones: usize,
    /// Seconds between a node's Lease renewals.
    #[arg(long, default_value_t = 10)]
    pub lease_renew_seconds: u64,
    /// Pod status writes in flight at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
}

pub async fn run(args: SimulateNodesArgs) -> anyhow::Result<()> {
    let client = crate::kubeconfig::client(&args.kubeconfig).await?;
    let options = simulated::Options {
        count: args.count,
        prefix: args.prefix,
        cpu: args.cpu,
        memory: args.memory,
        pods: args.max_pods,
        zones: args.zones,
        labels: Vec::new(),
        lease_renew: Duration::from_secs(args.lease_renew_seconds.max(1)),
        concurrency: args.concurrency,
        run_pods: true,
    };
    let started = std::time::Instant::now();
    let (names, _running) = simulated::start(client, options).await.context("registering simulated nodes")?;
    tracing::info!(nodes = names.len(), took_ms = started.elapsed().as_millis() as u64, "simulated nodes registered");
    tokio::signal::ctrl_c().await.context("waiting for a signal")?;
    Ok(())
}
