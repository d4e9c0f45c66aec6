//! The kubectl-experience benchmarks: `kubectl apply` of a 100-object manifest
//! (client-side and server-side, creating, unchanged and changing), beside
//! `kubectl apply --dry-run=client` (kubectl's own work, no writes) measured in the same
//! run as the floor; and LIST of 10,000 pods as JSON, as a Table and as protobuf.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::api::{Krate, admin_endpoint, create_namespace, drive};
use crate::stats::{machine, ms};

#[derive(Args)]
pub struct KubectlArgs {
    /// The krate binary to start.
    #[arg(long, default_value = "target/release/krate")]
    krate: PathBuf,
    /// The kubectl to drive.
    #[arg(long, default_value = "/usr/bin/kubectl")]
    kubectl: PathBuf,
    /// Runs of each apply measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Pods in the listed namespace.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Seconds each LIST measurement runs.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Concurrent LISTs.
    #[arg(long, default_value_t = 2)]
    list_concurrency: usize,
}

/// 100 objects: 40 ConfigMaps, 30 Deployments, 30 Services; `mode` changes every
/// Deployment's environment.
fn manifest(mode: &str) -> String {
    let mut docs = Vec::new();
    for i in 0..40 {
        docs.push(format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings-{i}\ndata:\n  mode: {mode}\n  index: \"{i}\"\n"));
    }
    for i in 0..30 {
        docs.push(format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-{i}\n  labels: {{app: web-{i}}}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: web-{i}}}\n  template:\n    metadata:\n      labels: {{app: web-{i}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n        ports: [{{containerPort: 80}}]\n        env: [{{name: MODE, value: {mode}}}]\n        resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}\n"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: web-{i}\nspec:\n  selector: {{app: web-{i}}}\n  ports: [{{port: 80, targetPort: 80}}]\n"
        ));
    }
    docs.join("---\n")
}

fn kubectl(bin: &Path, kubeconfig: &Path, args: &[&str]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = Command::new(bin).args(args).env("KUBECONFIG", kubeconfig).output().context("running kubectl")?;
    let took = t.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).lines().take(5).collect::<Vec<_>>().join(" | ")
    );
    Ok(took)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

pub async fn run(args: KubectlArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.krate.exists(), "{} not found: build it first (or pass --krate)", args.krate.display());
    let scratch = tempfile::Builder::new().prefix("krate-bench-kubectl-").tempdir_in(std::env::current_dir()?)?;
    println!("machine: {}", machine());
    let version = Command::new(&args.kubectl).args(["version", "--client"]).output()?;
    println!("kubectl: {}", String::from_utf8_lossy(&version.stdout).lines().next().unwrap_or(""));
    let data_dir = scratch.path().join("data");
    let krate = Krate::launch(&args.krate, &data_dir, &scratch.path().join("krate.log"))?;
    let kubeconfig = data_dir.join("admin.kubeconfig");
    let api = admin_endpoint(&kubeconfig)?.client();
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|mode| {
            let p = scratch.path().join(format!("manifest-{mode}.yaml"));
            std::fs::write(&p, manifest(mode)).map(|_| p)
        })
        .collect::<Result<_, _>>()?;
    let (a, b) = (files[0].to_str().unwrap_or(""), files[1].to_str().unwrap_or(""));

    // kubectl caches discovery and OpenAPI under ~/.kube/cache: warm it once.
    create_namespace(&api, "warm").await?;
    kubectl(&args.kubectl, &kubeconfig, &["apply", "-n", "warm", "-f", a])?;

    eprintln!("== kubectl apply of 100 objects, {} runs each", args.runs);
    let mut rows = Vec::new();
    let floor: Vec<Duration> = (0..args.runs)
        .map(|_| kubectl(&args.kubectl, &kubeconfig, &["apply", "-n", "warm", "--dry-run=client", "-f", a]))
        .collect::<Result<_, _>>()?;
    rows.push(("kubectl apply --dry-run=client (kubectl alone: the floor)", median(floor)));
    for (label, extra) in [("client-side", &[][..]), ("server-side", &["--server-side"][..])] {
        let (mut create, mut same, mut change) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..args.runs {
            let ns = format!("{}-{run}", if extra.is_empty() { "csa" } else { "ssa" });
            create_namespace(&api, &ns).await?;
            let apply = |file: &str| {
                let mut a = vec!["apply", "-n", ns.as_str(), "-f", file];
                a.extend_from_slice(extra);
                kubectl(&args.kubectl, &kubeconfig, &a)
            };
            create.push(apply(a)?);
            same.push(apply(a)?);
            change.push(apply(b)?);
        }
        rows.push((
            if extra.is_empty() { "client-side apply: create" } else { "server-side apply: create" },
            median(create),
        ));
        rows.push((
            if extra.is_empty() { "client-side apply: unchanged" } else { "server-side apply: unchanged" },
            median(same),
        ));
        rows.push((
            if extra.is_empty() {
                "client-side apply: 30 Deployments and 40 ConfigMaps changed"
            } else {
                "server-side apply: 30 Deployments and 40 ConfigMaps changed"
            },
            median(change),
        ));
        eprintln!("  {label} done");
    }

    eprintln!("== {} pods", args.pods);
    create_namespace(&api, "pods").await?;
    let t = Instant::now();
    let writers = 16;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (api, pods) = (api.clone(), args.pods);
        tasks.push(tokio::spawn(async move {
            for i in (w..pods).step_by(writers) {
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("pod-{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                             "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}});
                api.call(Method::POST, "/api/v1/namespaces/pods/pods", Bytes::from(pod.to_string()), StatusCode::CREATED)
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    eprintln!("  created in {:.1} s", t.elapsed().as_secs_f64());

    let path = "/api/v1/namespaces/pods/pods?resourceVersion=0";
    let forms = [
        ("JSON", "application/json"),
        ("Table (kubectl get)", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
        ("protobuf", "application/vnd.kubernetes.protobuf"),
    ];
    let mut lists = Vec::new();
    for (name, accept) in forms {
        // A form the server does not speak shows as such, not as a failed run.
        let body = match api.get_as(path, accept).await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("  {name}: {e:#}");
                lists.push((name, None, 0));
                continue;
            }
        };
        let api2 = api.clone();
        let load = drive(args.list_concurrency, Duration::from_secs(args.duration), move |_, _| {
            let api = api2.clone();
            async move { api.get_as(path, accept).await.map(|_| ()) }
        })
        .await
        .report(&format!("LIST {name}"));
        lists.push((name, Some(load), body.len()));
    }
    let rss = krate.rss_mib()?;

    println!("\n| measurement (100 objects: 40 ConfigMaps, 30 Deployments, 30 Services) | median of {} |", args.runs);
    println!("|---|---|");
    for (what, d) in &rows {
        println!("| {what} | {} |", ms(*d));
    }
    println!(
        "\n| LIST {} pods `?resourceVersion=0`, {} concurrent | req/s | p50 / p99 | response size |",
        args.pods, args.list_concurrency
    );
    println!("|---|---|---|---|");
    for (name, load, size) in &lists {
        match load {
            Some(l) => {
                println!(
                    "| {name} | {:.1} | {} / {} | {:.1} MiB |",
                    l.rate,
                    ms(l.summary.p50),
                    ms(l.summary.p99),
                    *size as f64 / 1048576.0
                );
            }
            None => println!("| {name} | not served | | |"),
        }
    }
    println!("\nkrate RSS after the run: {rss:.1} MiB");
    drop(krate);
    Ok(())
}
