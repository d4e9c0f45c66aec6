//! Crash safety: a writer process under load is killed with SIGKILL at random moments;
//! after every restart each acknowledged write is present and intact, revisions only
//! move forward, and no half-written value is visible.
//!
//! The test binary re-executes itself as the writer (the ignored `crash_writer_child`
//! test, selected by name and given the database path in the environment).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krate_store::sqlite::{SqliteConfig, SqliteStore};
use krate_store::{RangeRequest, Store};
use rand::Rng;

const CYCLES: usize = 20;
const DB_ENV: &str = "KRATE_CRASH_TEST_DB";
const CYCLE_ENV: &str = "KRATE_CRASH_TEST_CYCLE";

/// FNV-1a: a value carries a checksum of itself so a torn write would show.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

fn make_value(key: &str, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = key.bytes().cycle().take(len).collect();
    let mut v = format!("{:016x}:", fnv(&payload)).into_bytes();
    v.extend(payload);
    v
}

fn value_is_intact(v: &[u8]) -> bool {
    v.len() > 17
        && std::str::from_utf8(&v[..16]).ok().and_then(|h| u64::from_str_radix(h, 16).ok()) == Some(fnv(&v[17..]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "run by sqlite_writer_survives_sigkill as its child process"]
async fn crash_writer_child() {
    let path = std::env::var(DB_ENV).expect("database path in the environment");
    let cycle = std::env::var(CYCLE_ENV).unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(SqliteConfig::new(path)).await.unwrap());
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (store, out) = (store.clone(), out.clone());
        let cycle = cycle.clone();
        tasks.push(tokio::spawn(async move {
            let counter = format!("/crash/counter/{w}");
            let mut counter_rev = match store.get(&counter, 0).await.unwrap().0 {
                Some(kv) => kv.mod_revision,
                None => store.create(&counter, Bytes::from(make_value(&counter, 10)), 0).await.unwrap(),
            };
            for i in 0.. {
                let key = format!("/crash/{cycle}/{w}/{i}");
                let len = rand::rng().random_range(10..20_000);
                let rev = store.create(&key, Bytes::from(make_value(&key, len)), 0).await.unwrap();
                // Also an update with CAS, so the history has both kinds of writes.
                counter_rev = store
                    .update(&counter, Bytes::from(make_value(&counter, len / 7 + 10)), counter_rev, 0)
                    .await
                    .unwrap();
                let mut out = out.lock().unwrap();
                writeln!(out, "ACK {rev} {key} {len}").unwrap();
                writeln!(out, "ACK {counter_rev} {counter} {}", len / 7 + 10).unwrap();
                out.flush().unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

struct Ack {
    revision: i64,
    key: String,
    len: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writer_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let exe = std::env::current_exe().unwrap();
    let mut last_revision = 0;
    let mut total_acks = 0;
    for cycle in 0..CYCLES {
        let mut child = Command::new(&exe)
            .args(["--ignored", "--exact", "sqlite_crash::crash_writer_child", "--nocapture", "--test-threads", "1"])
            .env(DB_ENV, &path)
            .env(CYCLE_ENV, cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let parts: Vec<&str> = line.split(' ').collect();
                // A line cut by the kill has no length field; it was never a full ack.
                if let ["ACK", rev, key, len] = parts[..]
                    && let (Ok(revision), Ok(len)) = (rev.parse(), len.parse())
                {
                    acks.push(Ack { revision, key: key.to_string(), len });
                }
            }
            acks
        });
        // Let it get going (start-up plus some load), then kill at a random moment.
        let kill_after = Duration::from_millis(rand::rng().random_range(250..900));
        let started = Instant::now();
        std::thread::sleep(kill_after);
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let acks = reader.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(30));

        let store = SqliteStore::open(SqliteConfig::new(&path)).await.expect("database opens after SIGKILL");
        let revision = store.current_revision().await.unwrap();
        assert!(revision >= last_revision, "revision went backwards: {revision} < {last_revision}");
        for ack in &acks {
            assert!(ack.revision <= revision, "acked revision {} beyond the store's {revision}", ack.revision);
            let kv = store.get(&ack.key, 0).await.unwrap().0.unwrap_or_else(|| panic!("acked key {} lost", ack.key));
            assert!(kv.mod_revision >= ack.revision, "{} is older than its ack", ack.key);
            if kv.mod_revision == ack.revision {
                assert_eq!(kv.value.len(), ack.len + 17, "{} has the acked value", ack.key);
            }
        }
        let all = store.range(RangeRequest::prefix("/crash/")).await.unwrap();
        for kv in &all.kvs {
            assert!(value_is_intact(&kv.value), "value of {} is torn", kv.key);
        }
        last_revision = revision;
        total_acks += acks.len();
        store.close().await.unwrap();
    }
    assert!(total_acks > CYCLES * 10, "the writer made real progress ({total_acks} acks)");
}
