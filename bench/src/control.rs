//! Control-loop benchmarks: the real `krate server` (API server, controllers and
//! scheduler in one process) with simulated nodes registered by a separate
//! `krate simulate-nodes` process, as upstream's scheduler_perf and kwok set-ups do.
//! Measured over HTTPS from this process:
//! - scheduler throughput: N pods created as fast as the API takes them, timed from the
//!   first create to the last binding seen on a watch (and the bindings' own rate);
//! - a Deployment of R replicas from create to all Ready;
//! - the server's resident memory with the nodes, and with the nodes and pods.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::api::{Http, Krate, admin_endpoint, create_namespace};
use crate::stats::machine;

/// Longest any one phase may take before the run is declared failed.
const PHASE_TIMEOUT: Duration = Duration::from_secs(900);

#[derive(Args)]
pub struct ControlArgs {
    /// The krate binary to start (server and simulator).
    #[arg(long, default_value = "target/release/krate")]
    krate: PathBuf,
    /// Simulated nodes.
    #[arg(long, default_value_t = 5_000)]
    nodes: usize,
    /// Pod counts for the scheduler throughput runs, one run each, in order (the pods of
    /// earlier runs stay).
    #[arg(long, value_delimiter = ',', default_value = "10000,50000")]
    pods: Vec<usize>,
    /// Replicas of the Deployment timed from create to all Ready (0: skip).
    #[arg(long, default_value_t = 1_000)]
    replicas: usize,
    /// Concurrent pod creates.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// Keep the scratch directory (data dir and logs).
    #[arg(long)]
    keep: bool,
}

struct Simulator(Child);

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn run(args: ControlArgs) -> anyhow::Result<()> {
    let scratch = tempfile::Builder::new().prefix("krate-bench-control").tempdir()?;
    let data_dir = scratch.path().join("data");
    let log = scratch.path().join("krate.log");
    println!("machine: {}", machine());
    let mut krate = Krate::launch_with(&args.krate, &data_dir, &log, &[])?;
    let kubeconfig = data_dir.join("admin.kubeconfig");
    let endpoint = admin_endpoint(&kubeconfig)?;
    let api = endpoint.client();
    println!("server ready; RSS {:.1} MiB", krate.rss_mib()?);

    let started = Instant::now();
    let sim_log = std::fs::File::create(scratch.path().join("simulator.log"))?;
    let _simulator = Simulator(
        Command::new(&args.krate)
            .args(["simulate-nodes", "--count", &args.nodes.to_string(), "--zones", "10", "--max-pods", "110"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(sim_log)
            .spawn()
            .context("starting krate simulate-nodes")?,
    );
    wait_for_nodes(&api, args.nodes).await?;
    println!("{} simulated nodes Ready in {:.1} s", args.nodes, started.elapsed().as_secs_f64());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_nodes = krate.rss_mib()?;
    println!("server RSS with {} nodes: {rss_nodes:.1} MiB", args.nodes);

    let mut total = 0;
    let mut results = Vec::new();
    for (run, &count) in args.pods.iter().enumerate() {
        let ns = format!("sched-{run}");
        create_namespace(&api, &ns).await?;
        let figures = schedule(&endpoint, &ns, count, args.create_concurrency).await?;
        total += count;
        println!(
            "scheduled {count} pods on {} nodes: {:.0} pods/s end to end (created at {:.0}/s; bindings at {:.0}/s between the first and last)",
            args.nodes, figures.end_to_end, figures.created, figures.binding
        );
        results.push((count, figures));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_pods = krate.rss_mib()?;
    println!("server RSS with {} nodes and {total} pods: {rss_pods:.1} MiB", args.nodes);

    if args.replicas > 0 {
        let took = deployment(&api, args.replicas).await?;
        println!("Deployment of {} replicas: all Ready {:.1} s after create", args.replicas, took.as_secs_f64());
    }
    println!("final server RSS: {:.1} MiB", krate.rss_mib()?);
    krate.stop();
    if args.keep {
        println!("kept {}", scratch.keep().display());
    }
    Ok(())
}

async fn wait_for_nodes(api: &Http, want: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let list = api
            .call(Method::GET, "/api/v1/nodes?labelSelector=sim.krate.dev%2Fnode", Bytes::new(), StatusCode::OK)
            .await?;
        let list: Value = serde_json::from_slice(&list)?;
        let ready = list["items"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|n| {
                    n["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                })
                .count()
        });
        if ready >= want {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {ready} of {want} nodes Ready");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

struct Throughput {
    end_to_end: f64,
    created: f64,
    binding: f64,
}

/// Pods seen bound, and when the first and the last were.
type Bindings = (HashSet<Vec<u8>>, Option<Instant>, Option<Instant>);

fn pod(name: &str) -> Bytes {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}});
    Bytes::from(serde_json::to_vec(&pod).expect("JSON"))
}

/// The pod name and whether it is bound, read from one watch event line without
/// parsing it all (metadata.name is the object's first "name").
fn bound_pod(line: &[u8]) -> Option<&[u8]> {
    let name_at = memchr::memmem::find(line, b"\"name\":\"")? + 8;
    let end = memchr::memchr(b'"', &line[name_at..])?;
    memchr::memmem::find(line, b"\"nodeName\":\"")?;
    Some(&line[name_at..name_at + end])
}

async fn schedule(
    endpoint: &crate::api::Endpoint,
    ns: &str,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<Throughput> {
    let watcher = endpoint.client();
    let path = format!("/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion=0");
    let bound_times: Arc<Mutex<Bindings>> = Arc::default();
    let seen = bound_times.clone();
    let watch = tokio::spawn(async move {
        watcher
            .watch_lines(&path, PHASE_TIMEOUT, move |line| {
                if let Some(name) = bound_pod(line) {
                    let mut seen = seen.lock();
                    if seen.0.insert(name.to_vec()) {
                        let now = Instant::now();
                        seen.1.get_or_insert(now);
                        seen.2 = Some(now);
                    }
                    return seen.0.len() < count;
                }
                true
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let clients: Vec<Http> = (0..4).map(|_| endpoint.client()).collect();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut creators = Vec::new();
    for worker in 0..concurrency.max(1) {
        let (api, next, ns) = (clients[worker % clients.len()].clone(), next.clone(), ns.to_string());
        creators.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                let path = format!("/api/v1/namespaces/{ns}/pods");
                api.call(Method::POST, &path, pod(&format!("p-{i}")), StatusCode::CREATED).await?;
            }
        }));
    }
    for creator in creators {
        creator.await??;
    }
    let created = started.elapsed();
    watch.await??;
    let (bound, first, last) = {
        let seen = bound_times.lock();
        (seen.0.len(), seen.1, seen.2)
    };
    anyhow::ensure!(bound >= count, "only {bound} of {count} pods bound within {PHASE_TIMEOUT:?}");
    let (first, last) = (first.expect("bound"), last.expect("bound"));
    Ok(Throughput {
        end_to_end: count as f64 / (last - started).as_secs_f64(),
        created: count as f64 / created.as_secs_f64(),
        binding: count as f64 / (last - first).as_secs_f64().max(1e-3),
    })
}

async fn deployment(api: &Http, replicas: usize) -> anyhow::Result<Duration> {
    create_namespace(api, "deploy").await?;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "big"}},
            "template": {"metadata": {"labels": {"app": "big"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}});
    let started = Instant::now();
    let path = "/apis/apps/v1/namespaces/deploy/deployments";
    api.call(Method::POST, path, Bytes::from(deployment.to_string()), StatusCode::CREATED).await?;
    loop {
        let got = api.call(Method::GET, &format!("{path}/big"), Bytes::new(), StatusCode::OK).await?;
        let got: Value = serde_json::from_slice(&got)?;
        if got["status"]["readyReplicas"].as_u64() == Some(replicas as u64) {
            return Ok(started.elapsed());
        }
        anyhow::ensure!(started.elapsed() < PHASE_TIMEOUT, "deployment not Ready: {}", got["status"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::bound_pod;

    #[test]
    fn bound_pods_are_read_from_event_lines() {
        let bound = br#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p-7","namespace":"s"},"spec":{"nodeName":"n"}}}"#;
        assert_eq!(bound_pod(bound), Some(&b"p-7"[..]));
        let pending = br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p-8"},"spec":{}}}"#;
        assert_eq!(bound_pod(pending), None);
    }
}
