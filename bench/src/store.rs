//! Store benchmarks: the embedded SQLite backend and etcd, in the same run, on the same
//! disk, through the same `Store` trait.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use krate_store::etcd::EtcdStore;
use krate_store::sqlite::{SqliteConfig, SqliteStore};
use krate_store::testsuite::etcd_process::EtcdCluster;
use krate_store::{DynStore, RangeRequest, WatchEvent, WatchOptions};
use parking_lot::Mutex;

use crate::stats::{machine, ms, summarize};

#[derive(Args)]
pub struct StoreArgs {
    /// Seconds each write measurement runs.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Keys in the range measurement.
    #[arg(long, default_value_t = 10_000)]
    range_keys: usize,
    /// Watchers in the fan-out measurement.
    #[arg(long, default_value_t = 1_000)]
    watchers: usize,
    /// Writes observed by the watchers.
    #[arg(long, default_value_t = 200)]
    watch_writes: usize,
    /// Backends to measure (sqlite, etcd).
    #[arg(long, value_delimiter = ',', default_value = "sqlite,etcd")]
    backends: Vec<String>,
}

pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    // On the project's own disk, not a tmpfs, so fsync costs what it costs.
    let scratch = tempfile::Builder::new().prefix("krate-bench-").tempdir_in(std::env::current_dir()?)?;
    println!("machine: {}", machine());
    println!("scratch dir: {}\n", scratch.path().display());
    let mut rows = Vec::new();
    for backend in &args.backends {
        let (store, guard): (DynStore, Box<dyn std::any::Any>) = match backend.as_str() {
            "sqlite" => {
                let store = SqliteStore::open(SqliteConfig::new(scratch.path().join("bench.db"))).await?;
                (Arc::new(store), Box::new(()))
            }
            "etcd" => {
                let cluster = EtcdCluster::start_in(1, scratch.path()).await;
                let store = EtcdStore::connect(&cluster.endpoints()).await?;
                (Arc::new(store), Box::new(cluster))
            }
            other => anyhow::bail!("unknown backend {other}"),
        };
        eprintln!("== {backend}");
        rows.push((backend.clone(), measure(&store, &args).await?));
        drop(store);
        drop(guard);
    }
    print_table(&rows);
    Ok(())
}

struct Figures {
    writes: Vec<(usize, f64, Duration, Duration)>,
    range_p50: Duration,
    range_keys: usize,
    watch_p50: Duration,
    watch_p99: Duration,
    watch_deliveries: usize,
    watch_put_p50: Duration,
}

async fn measure(store: &DynStore, args: &StoreArgs) -> anyhow::Result<Figures> {
    let value = Bytes::from(vec![b'v'; 256]);
    let mut writes = Vec::new();
    for writers in [1usize, 16] {
        let deadline = Instant::now() + Duration::from_secs(args.duration);
        let mut tasks = Vec::new();
        for w in 0..writers {
            let (store, value) = (store.clone(), value.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    store.create(&format!("/bench/w{writers}/{w}/{i}"), value.clone(), 0).await?;
                    lat.push(t.elapsed());
                    i += 1;
                }
                anyhow::Ok(lat)
            }));
        }
        let started = Instant::now();
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await??);
        }
        let s = summarize(lat);
        let rate = s.count as f64 / started.elapsed().as_secs_f64();
        eprintln!("  {writers} writer(s): {rate:.0} writes/s, p50 {}, p99 {}", ms(s.p50), ms(s.p99));
        writes.push((writers, rate, s.p50, s.p99));
    }

    // Range over range_keys keys of 1 KiB, written by 16 writers.
    let kib = Bytes::from(vec![b'r'; 1024]);
    let per = args.range_keys.div_ceil(16);
    let mut tasks = Vec::new();
    for w in 0..16 {
        let (store, kib) = (store.clone(), kib.clone());
        let n = per.min(args.range_keys.saturating_sub(w * per));
        tasks.push(tokio::spawn(async move {
            for i in 0..n {
                store.create(&format!("/bench/range/{w:02}/{i:06}"), kib.clone(), 0).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let mut lat = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let r = store.range(RangeRequest::prefix("/bench/range/")).await?;
        lat.push(t.elapsed());
        anyhow::ensure!(r.kvs.len() == args.range_keys, "range returned {} keys", r.kvs.len());
    }
    let range = summarize(lat);
    eprintln!("  range of {} keys: p50 {}", args.range_keys, ms(range.p50));

    // Watch fan-out: every watcher sees every write; latency from issuing the write to
    // each watcher receiving its event.
    let issued: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let start = store.current_revision().await?;
    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let mut w = store.watch("/bench/watch/", start, WatchOptions::default()).await?;
        let (issued, n) = (issued.clone(), args.watch_writes);
        watchers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(n);
            while lat.len() < n {
                match tokio::time::timeout(Duration::from_secs(30), w.next()).await {
                    Ok(Some(Ok(WatchEvent::Event(e)))) => {
                        let now = Instant::now();
                        let t0 = issued.lock().get(&e.kv.key).copied();
                        lat.push(now - t0.unwrap_or(now));
                    }
                    Ok(Some(Ok(WatchEvent::Progress(_)))) => {}
                    other => anyhow::bail!("watch ended early: {other:?}"),
                }
            }
            anyhow::Ok(lat)
        }));
    }
    let mut put_lat = Vec::new();
    for i in 0..args.watch_writes {
        let key = format!("/bench/watch/{i:06}");
        let t = Instant::now();
        issued.lock().insert(key.clone(), t);
        store.create(&key, value.clone(), 0).await?;
        put_lat.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut lat = Vec::new();
    for w in watchers {
        lat.extend(w.await??);
    }
    let watch = summarize(lat);
    let put = summarize(put_lat);
    eprintln!(
        "  watch: {} deliveries to {} watchers, p50 {}, p99 {} (write itself p50 {})",
        watch.count,
        args.watchers,
        ms(watch.p50),
        ms(watch.p99),
        ms(put.p50)
    );
    Ok(Figures {
        writes,
        range_p50: range.p50,
        range_keys: args.range_keys,
        watch_p50: watch.p50,
        watch_p99: watch.p99,
        watch_deliveries: watch.count,
        watch_put_p50: put.p50,
    })
}

fn print_table(rows: &[(String, Figures)]) {
    println!("| measurement | {} |", rows.iter().map(|(b, _)| b.as_str()).collect::<Vec<_>>().join(" | "));
    println!("|---|{}", "---|".repeat(rows.len()));
    let line = |name: &str, f: &dyn Fn(&Figures) -> String| {
        println!("| {name} | {} |", rows.iter().map(|(_, x)| f(x)).collect::<Vec<_>>().join(" | "));
    };
    for (i, writers) in [1, 16].iter().enumerate() {
        line(&format!("durable creates/s, {writers} writer(s)"), &|f| format!("{:.0}", f.writes[i].1));
        line(&format!("create latency p50 / p99, {writers} writer(s)"), &|f| {
            format!("{} / {}", ms(f.writes[i].2), ms(f.writes[i].3))
        });
    }
    line("range of all keys (p50 of 20)", &|f| format!("{} ({} keys of 1 KiB)", ms(f.range_p50), f.range_keys));
    line("watch delivery p50 / p99", &|f| {
        format!("{} / {} ({} deliveries)", ms(f.watch_p50), ms(f.watch_p99), f.watch_deliveries)
    });
    line("write latency during watch test (p50)", &|f| ms(f.watch_put_p50));
}
