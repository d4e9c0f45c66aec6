//! etcd-backend specifics against real etcd-server processes; the shared behaviour
//! suite runs in etcd_suite.rs.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use krate_store::etcd::{EtcdConfig, EtcdStore};
use krate_store::{Event, RangeRequest, Store, StoreError, WatchEvent, WatchOptions, WatchStream};
use tokio::time::{Instant, sleep, timeout};

use krate_store::testsuite::etcd_process::EtcdCluster;

/// Bound for anything a test waits for.
const WAIT: Duration = Duration::from_secs(10);

/// Logs of the store under test, shown for failed tests; `RUST_LOG=krate_store=debug`
/// shows the retries.
fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

async fn single_member() -> (EtcdCluster, EtcdStore) {
    init_tracing();
    let cluster = EtcdCluster::start(1).await;
    let store = EtcdStore::connect(&cluster.endpoints()).await.expect("connect to etcd");
    (cluster, store)
}

fn val(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next item of a watch, failing the test if none arrives in time or the stream ended.
async fn next_item(watch: &mut WatchStream) -> Result<WatchEvent, StoreError> {
    timeout(WAIT, watch.next()).await.expect("a watch item in time").expect("the watch stream to go on")
}

/// The next event of a watch, skipping progress notifications.
async fn next_event(watch: &mut WatchStream) -> Event {
    loop {
        match next_item(watch).await.expect("a watch event") {
            WatchEvent::Event(event) => return event,
            WatchEvent::Progress(_) => continue,
        }
    }
}

#[tokio::test]
async fn compaction_fails_old_reads_and_watches() {
    let (cluster, store) = single_member().await;
    let r1 = store.create("/c/a", val("v1"), 0).await.unwrap();
    let r2 = store.update("/c/a", val("v2"), r1, 0).await.unwrap();
    let r3 = store.update("/c/a", val("v3"), r2, 0).await.unwrap();
    store.compact(r2).await.unwrap();

    // A second client learns the compaction point from etcd, not from its own history.
    let other = EtcdStore::connect(&cluster.endpoints()).await.unwrap();
    for s in [&store, &other] {
        match s.get("/c/a", r1).await {
            Err(StoreError::Compacted { requested, compacted }) => assert_eq!((requested, compacted), (r1, r2)),
            other => panic!("expected Compacted, got {other:?}"),
        }
        assert!(matches!(
            s.range(RangeRequest::prefix("/c/").at(r1)).await,
            Err(StoreError::Compacted { compacted, .. }) if compacted == r2
        ));
        let status = s.status().await.unwrap();
        assert_eq!((status.revision, status.compacted), (r3, r2));
        assert!(status.db_size_bytes.unwrap_or(0) > 0);
    }
    // The compaction point itself is still readable.
    assert_eq!(&store.get("/c/a", r2).await.unwrap().0.unwrap().value[..], b"v2");

    // A watch from before the compaction point fails, as its first item, and ends.
    let mut watch = other.watch("/c/", r1 - 1, WatchOptions::default()).await.unwrap();
    match next_item(&mut watch).await {
        Err(StoreError::Compacted { requested, compacted }) => assert_eq!((requested, compacted), (r1, r2)),
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(timeout(WAIT, watch.next()).await.unwrap().is_none());
    // From the compaction point on, history is there.
    let mut watch = other.watch("/c/", r2 - 1, WatchOptions::default()).await.unwrap();
    assert_eq!(next_event(&mut watch).await.revision(), r2);
    assert_eq!(next_event(&mut watch).await.revision(), r3);

    for (s, requested) in [(&store, r2), (&other, r2), (&other, r1)] {
        match s.compact(requested).await {
            Err(StoreError::Compacted { requested: req, compacted }) => assert_eq!((req, compacted), (requested, r2)),
            other => panic!("expected Compacted, got {other:?}"),
        }
    }
    match store.compact(r3 + 10).await {
        Err(StoreError::FutureRevision { requested, current }) => assert_eq!((requested, current), (r3 + 10, r3)),
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_ends_with_an_error_when_etcd_goes_away() {
    let mut cluster = EtcdCluster::start(1).await;
    let mut config = EtcdConfig::new(&cluster.endpoints());
    config.request_timeout = Duration::from_secs(2);
    let store = EtcdStore::connect_with(config).await.unwrap();
    let start = store.current_revision().await.unwrap();
    let mut watch = store.watch("/g/", start, WatchOptions::default()).await.unwrap();
    cluster.kill(0);
    assert!(matches!(next_item(&mut watch).await, Err(StoreError::Backend(_))));
    assert!(timeout(WAIT, watch.next()).await.unwrap().is_none());
    // Requests fail (in bounded time) rather than hang.
    assert!(matches!(store.get("/g/a", 0).await, Err(StoreError::Backend(_))));
}

#[tokio::test]
async fn dropping_a_watch_cancels_it_in_etcd() {
    let (cluster, store) = single_member().await;
    const WATCHERS: &str = "etcd_debugging_mvcc_watcher_total";
    let before = cluster.metric(0, WATCHERS).await.expect("etcd exports the watcher count");
    let start = store.current_revision().await.unwrap();
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(store.watch("/d/", start, WatchOptions::default()).await.unwrap());
    }
    let wait_for = |want: f64| {
        let cluster = &cluster;
        async move {
            let deadline = Instant::now() + WAIT;
            loop {
                let now = cluster.metric(0, WATCHERS).await;
                if now == Some(want) {
                    return;
                }
                assert!(Instant::now() < deadline, "etcd watcher count is {now:?}, expected {want}");
                sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_for(before + 3.0).await;
    drop(watches);
    wait_for(before).await;
}

#[tokio::test]
async fn connect_fails_fast_without_etcd() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = EtcdConfig::new(&[format!("http://127.0.0.1:{port}")]);
    config.dial_timeout = Duration::from_secs(1);
    let started = Instant::now();
    assert!(matches!(EtcdStore::connect_with(config).await, Err(StoreError::Backend(_))));
    assert!(started.elapsed() < WAIT);
}

#[tokio::test]
async fn three_member_cluster_survives_losing_a_member() {
    init_tracing();
    let mut cluster = EtcdCluster::start(3).await;
    let store = EtcdStore::connect(&cluster.endpoints()).await.unwrap();
    let start = store.current_revision().await.unwrap();

    let r1 = store.create("/m/a", val("v1"), 0).await.unwrap();
    let r2 = store.update("/m/a", val("v2"), r1, 0).await.unwrap();
    assert!(matches!(store.update("/m/a", val("v3"), r1, 0).await, Err(StoreError::Conflict { .. })));
    assert_eq!(&store.get("/m/a", 0).await.unwrap().0.unwrap().value[..], b"v2");
    store.delete("/m/a", Some(r2)).await.unwrap();

    // With one member down the other two keep a quorum; the client routes around it.
    // If the member was the leader, writes in flight during the election fail with
    // "request timed out" (they may or may not apply, so the store cannot retry them):
    // a linearizable read, which is retried, waits for the new leader.
    cluster.kill(2);
    store.current_revision().await.expect("a leader among the remaining members");
    let mut written = Vec::new();
    for i in 0..20 {
        let key = format!("/m/k{i:02}");
        match store.create(&key, val("x"), 0).await {
            Ok(rev) => written.push(rev),
            Err(e) => panic!("write {i} with a member down: {e}"),
        }
    }
    let listed = store.range(RangeRequest::prefix("/m/")).await.unwrap();
    assert_eq!(listed.count, 20);

    // The restarted member catches up and serves linearizable reads and watches.
    cluster.restart(2).await;
    let only_restarted = EtcdStore::connect(&[cluster.endpoint(2)]).await.unwrap();
    let listed = only_restarted.range(RangeRequest::prefix("/m/")).await.unwrap();
    assert_eq!(listed.count, 20);
    let mut watch = only_restarted.watch("/m/", start, WatchOptions::default()).await.unwrap();
    let mut revisions = Vec::new();
    for _ in 0..23 {
        revisions.push(next_event(&mut watch).await.revision());
    }
    assert_eq!(revisions[3..], written[..]);
    assert!(revisions.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test]
async fn progress_never_runs_ahead_of_a_watch_catching_up() {
    let (_cluster, store) = single_member().await;
    let start = store.current_revision().await.unwrap();
    let mut last = start;
    for i in 0..300 {
        last = store.create(&format!("/h/{i:03}"), Bytes::from(vec![b'x'; 2048]), 0).await.unwrap();
    }
    // A slow consumer replaying history, asking for progress all the time.
    let options = WatchOptions { progress_interval: Some(Duration::from_millis(50)) };
    let mut watch = store.watch("/h/", start, options).await.unwrap();
    let mut delivered = start;
    let mut progress = 0;
    while delivered < last {
        match next_item(&mut watch).await.unwrap() {
            WatchEvent::Event(e) => {
                assert_eq!(e.revision(), delivered + 1, "events are gap-free");
                assert!(e.revision() > progress, "event {} after progress {progress}", e.revision());
                delivered = e.revision();
                if delivered % 50 == 0 {
                    sleep(Duration::from_millis(300)).await;
                }
            }
            WatchEvent::Progress(rev) => {
                assert!(rev >= delivered);
                progress = rev;
            }
        }
    }
}
