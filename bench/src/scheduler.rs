//! Scheduler throughput as upstream's scheduler_perf measures it: N simulated nodes, M
//! pending pods created first, then the scheduler (in-process, as in `krate server`)
//! started; pods/s is M over the time until every pod is bound.

use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use krate_agent::simulated;
use krate_testkit::TestCluster;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

#[derive(Args)]
pub struct SchedulerArgs {
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Let the simulated nodes run their pods (status writes compete with bindings);
    /// off by default, as in upstream's scheduler_perf.
    #[arg(long)]
    kubelets: bool,
}

pub async fn run(args: SchedulerArgs) -> anyhow::Result<()> {
    let mut cluster = TestCluster::start().await;
    let started = Instant::now();
    cluster
        .simulated_nodes_with(simulated::Options {
            count: args.nodes,
            zones: 3,
            lease_renew: Duration::from_secs(60),
            concurrency: 64,
            run_pods: args.kubelets,
            ..Default::default()
        })
        .await;
    eprintln!("{} simulated nodes registered in {:.1}s", args.nodes, started.elapsed().as_secs_f64());
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = Instant::now();
    futures::stream::iter(0..args.pods)
        .for_each_concurrent(64, |i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("bench-{i}")},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}))
                .expect("pod literal");
                pods.create(&PostParams::default(), &pod).await.expect("pod created");
            }
        })
        .await;
    eprintln!("{} pods created in {:.1}s", args.pods, created.elapsed().as_secs_f64());
    let scheduling = Instant::now();
    cluster.scheduler();
    let unbound = ListParams::default().fields("spec.nodeName=");
    loop {
        let left = pods.list_metadata(&unbound).await?.items.len();
        if left == 0 {
            break;
        }
        if scheduling.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("{left} pods still unbound after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secs = scheduling.elapsed().as_secs_f64();
    println!(
        "scheduler: {} pods on {} nodes in {secs:.2}s = {:.0} pods/s",
        args.pods,
        args.nodes,
        args.pods as f64 / secs
    );
    Ok(())
}
