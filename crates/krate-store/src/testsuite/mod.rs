//! The backend behaviour suite: every case runs unchanged against every backend.
//!
//! A backend's test file instantiates it with [`backend_suite!`], passing an async
//! fixture that returns a fresh store and a guard that keeps its resources alive.
//! Every wait is bounded.

pub mod etcd_process;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::{DynStore, EventKind, KeyValue, RangeRequest, Revision, StoreError, WatchEvent, WatchOptions, WatchStream};

/// How long any single wait in the suite may take.
pub const WAIT: Duration = Duration::from_secs(15);

#[macro_export]
macro_rules! backend_suite {
    ($fixture:expr) => {
        $crate::backend_suite!(@cases $fixture;
            revisions_and_history,
            conditional_writes,
            range_paging_at_fixed_revision,
            watch_order_and_previous_values,
            watch_resumes_after_any_revision,
            watch_sees_concurrent_writes_without_gaps,
            compaction_bounds_history,
            leases_expire_and_revoke,
            watch_progress_notifications,
        );
    };
    (@cases $fixture:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (store, _guard) = $fixture.await;
                tokio::time::timeout(std::time::Duration::from_secs(120), $crate::testsuite::$case(store))
                    .await
                    .expect("suite case finished within 120 s");
            }
        )*
    };
}

fn val(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next item of a watch, failing the test if none comes within [`WAIT`].
pub async fn next_item(w: &mut WatchStream) -> Result<WatchEvent, StoreError> {
    tokio::time::timeout(WAIT, w.next()).await.expect("watch item within the wait").expect("watch stream still open")
}

/// The next event of a watch, skipping progress notifications.
pub async fn next_event(w: &mut WatchStream) -> crate::Event {
    loop {
        match next_item(w).await.expect("watch event") {
            WatchEvent::Event(e) => return e,
            WatchEvent::Progress(_) => continue,
        }
    }
}

/// A watch that must fail as compacted, either at once or as its first item.
pub async fn assert_watch_compacted(store: &DynStore, prefix: &str, after: Revision) {
    match store.watch(prefix, after, WatchOptions::default()).await {
        Err(StoreError::Compacted { .. }) => {}
        Err(e) => panic!("expected Compacted, got {e}"),
        Ok(mut w) => match next_item(&mut w).await {
            Err(StoreError::Compacted { .. }) => {}
            other => panic!("expected Compacted from a watch after {after}, got {other:?}"),
        },
    }
}

pub async fn revisions_and_history(store: DynStore) {
    let start = store.current_revision().await.unwrap();
    let r1 = store.create("/t/a", val("a1"), 0).await.unwrap();
    assert!(r1 > start, "a write takes a revision after the current one");
    let (kv, at) = store.get("/t/a", 0).await.unwrap();
    let kv = kv.expect("created key is readable");
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (r1, r1, 1));
    assert_eq!(kv.value, val("a1"));
    assert!(at >= r1);

    let r2 = store.update("/t/a", val("a2"), r1, 0).await.unwrap();
    assert_eq!(r2, r1 + 1, "one revision per write");
    let kv = store.get("/t/a", 0).await.unwrap().0.unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (r1, r2, 2));

    let r3 = store.create("/t/b", val("b1"), 0).await.unwrap();
    let (r4, deleted) = store.delete("/t/a", None).await.unwrap();
    assert_eq!((r3, r4), (r2 + 1, r2 + 2));
    assert_eq!(deleted.value, val("a2"));
    assert_eq!(store.current_revision().await.unwrap(), r4);

    // The present, and the past at each revision.
    assert_eq!(store.get("/t/a", 0).await.unwrap().0, None);
    assert_eq!(store.get("/t/a", r1).await.unwrap().0.unwrap().value, val("a1"));
    assert_eq!(store.get("/t/a", r3).await.unwrap().0.unwrap().value, val("a2"));
    assert_eq!(store.get("/t/a", r4).await.unwrap().0, None);
    assert_eq!(store.get("/t/b", r2).await.unwrap().0, None);
    match store.get("/t/a", r4 + 100).await {
        Err(StoreError::FutureRevision { .. }) => {}
        other => panic!("reading the future must fail, got {other:?}"),
    }

    // A recreated key starts a new life.
    let r5 = store.create("/t/a", val("a3"), 0).await.unwrap();
    let kv = store.get("/t/a", 0).await.unwrap().0.unwrap();
    assert_eq!((kv.create_revision, kv.version), (r5, 1));
}

pub async fn conditional_writes(store: DynStore) {
    let r1 = store.create("/c/x", val("1"), 0).await.unwrap();
    assert!(matches!(store.create("/c/x", val("again"), 0).await, Err(StoreError::AlreadyExists(_))));
    assert!(matches!(store.update("/c/missing", val("v"), r1, 0).await, Err(StoreError::NotFound(_))));
    assert!(matches!(store.delete("/c/missing", None).await, Err(StoreError::NotFound(_))));

    let r2 = store.update("/c/x", val("2"), r1, 0).await.unwrap();
    match store.update("/c/x", val("stale"), r1, 0).await {
        Err(StoreError::Conflict { expected, current: Some(current), .. }) => {
            assert_eq!(expected, r1);
            assert_eq!(current.mod_revision, r2, "a conflict reports what the store holds");
            assert_eq!(current.value, val("2"));
        }
        other => panic!("stale update must conflict, got {other:?}"),
    }
    assert!(matches!(store.delete("/c/x", Some(r1)).await, Err(StoreError::Conflict { .. })));
    // Nothing above changed the key.
    assert_eq!(store.get("/c/x", 0).await.unwrap().0.unwrap().mod_revision, r2);
    let (_, prev) = store.delete("/c/x", Some(r2)).await.unwrap();
    assert_eq!(prev.value, val("2"));
    assert!(matches!(store.create("/c/y", val("v"), 999_999).await, Err(StoreError::LeaseNotFound(_))));
    assert_eq!(store.get("/c/y", 0).await.unwrap().0, None, "a refused write leaves nothing behind");
}

pub async fn range_paging_at_fixed_revision(store: DynStore) {
    for i in 0..25 {
        store.create(&format!("/r/p/{i:02}"), val(&format!("v{i}")), 0).await.unwrap();
    }
    store.create("/r/q/outside", val("x"), 0).await.unwrap();
    store.create("/r/p", val("not under /r/p/"), 0).await.unwrap();

    let first = store.range(RangeRequest::prefix("/r/p/").limit(10)).await.unwrap();
    assert_eq!(first.kvs.len(), 10);
    assert!(first.more);
    assert_eq!(first.count, 25);
    let snapshot = first.revision;

    // Changes after the first page must not show in the following pages.
    store.delete("/r/p/15", None).await.unwrap();
    store.create("/r/p/99", val("late"), 0).await.unwrap();
    let kv = store.get("/r/p/20", 0).await.unwrap().0.unwrap();
    store.update("/r/p/20", val("changed"), kv.mod_revision, 0).await.unwrap();

    let mut keys: Vec<String> = first.kvs.iter().map(|kv| kv.key.clone()).collect();
    let mut last = keys.last().unwrap().clone();
    loop {
        let page =
            store.range(RangeRequest::prefix("/r/p/").limit(10).at(snapshot).start_after(last.clone())).await.unwrap();
        assert_eq!(page.revision, snapshot);
        assert_eq!(page.count, 25 - keys.len() as i64, "count covers the rest of the range");
        for kv in &page.kvs {
            if kv.key == "/r/p/20" {
                assert_eq!(kv.value, val("v20"), "pages show the snapshot's values");
            }
        }
        keys.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        if !page.more {
            break;
        }
        last = keys.last().unwrap().clone();
    }
    let expected: Vec<String> = (0..25).map(|i| format!("/r/p/{i:02}")).collect();
    assert_eq!(keys, expected, "paging at a fixed revision sees exactly the snapshot, in key order");

    let now = store.range(RangeRequest::prefix("/r/p/")).await.unwrap();
    assert!(!now.more);
    assert_eq!(now.kvs.len(), 25);
    assert!(now.kvs.iter().any(|kv| kv.key == "/r/p/99"));
    assert!(!now.kvs.iter().any(|kv| kv.key == "/r/p/15"));
    assert!(now.revision > snapshot);

    let all = store.range(RangeRequest::prefix("")).await.unwrap();
    assert!(all.kvs.iter().any(|kv| kv.key == "/r/q/outside") && all.kvs.iter().any(|kv| kv.key == "/r/p"));
    let sorted = all.kvs.windows(2).all(|w| w[0].key < w[1].key);
    assert!(sorted, "ranges come in key order");
}

pub async fn watch_order_and_previous_values(store: DynStore) {
    let start = store.current_revision().await.unwrap();
    let mut w = store.watch("/w/", start, WatchOptions::default()).await.unwrap();
    let r1 = store.create("/w/a", val("1"), 0).await.unwrap();
    store.create("/elsewhere", val("x"), 0).await.unwrap();
    let r2 = store.update("/w/a", val("2"), r1, 0).await.unwrap();
    let (r3, _) = store.delete("/w/a", Some(r2)).await.unwrap();

    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.kv.key.as_str(), e.revision()), (EventKind::Put, "/w/a", r1));
    assert!(e.is_create() && e.prev.is_none());
    assert_eq!(e.kv.value, val("1"));
    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.revision(), e.kv.version), (EventKind::Put, r2, 2));
    assert!(!e.is_create());
    assert_eq!(e.prev.as_ref().map(|p| (p.value.clone(), p.mod_revision)), Some((val("1"), r1)));
    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.kv.key.as_str(), e.revision()), (EventKind::Delete, "/w/a", r3));
    assert_eq!(e.prev.as_ref().map(|p| p.value.clone()), Some(val("2")), "a delete carries the deleted value");

    // Nothing outside the prefix arrives.
    let r4 = store.create("/w/b", val("b"), 0).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!(e.revision(), r4);
}

/// Writes `n` keys under `prefix`, returning their revisions.
async fn write_many(store: &DynStore, prefix: &str, n: usize) -> Vec<Revision> {
    let mut revs = Vec::with_capacity(n);
    for i in 0..n {
        revs.push(store.create(&format!("{prefix}{i:05}"), val(&format!("{i}")), 0).await.unwrap());
    }
    revs
}

pub async fn watch_resumes_after_any_revision(store: DynStore) {
    let mut written: Vec<(Revision, String)> =
        write_many(&store, "/h/", 300).await.into_iter().enumerate().map(|(i, r)| (r, format!("/h/{i:05}"))).collect();
    // Resume from several points in the past, including far enough back that an
    // in-memory event buffer may not reach.
    for from in [0usize, 1, 150, 298] {
        let after = written[from].0;
        let mut w = store.watch("/h/", after, WatchOptions::default()).await.unwrap();
        for (rev, key) in written.iter().skip(from + 1) {
            let e = next_event(&mut w).await;
            assert_eq!((e.revision(), &e.kv.key), (*rev, key), "resuming after {after}");
        }
        let key = format!("/h/live{from}");
        let live = store.create(&key, val("l"), 0).await.unwrap();
        assert_eq!(next_event(&mut w).await.revision(), live, "history hands over to live events seamlessly");
        written.push((live, key));
    }
}

pub async fn watch_sees_concurrent_writes_without_gaps(store: DynStore) {
    const WRITERS: usize = 8;
    const EACH: usize = 40;
    let start = store.current_revision().await.unwrap();
    let mut w = store.watch("/cc/", start, WatchOptions::default()).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..EACH {
                let key = format!("/cc/{t}/{i}");
                let rev = store.create(&key, val("x"), 0).await.unwrap();
                let rev = store.update(&key, val("y"), rev, 0).await.unwrap();
                acked.push((rev, key));
            }
            acked
        }));
    }
    let mut acked = BTreeMap::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let mut last = start;
    let mut seen_updates = BTreeMap::new();
    for _ in 0..WRITERS * EACH * 2 {
        let e = next_event(&mut w).await;
        assert!(e.revision() > last, "revisions strictly increase: {} after {last}", e.revision());
        last = e.revision();
        if !e.is_create() {
            seen_updates.insert(e.revision(), e.kv.key.clone());
        }
    }
    assert_eq!(seen_updates, acked, "every acknowledged write is watched exactly once");
}

pub async fn compaction_bounds_history(store: DynStore) {
    let r1 = store.create("/k/a", val("1"), 0).await.unwrap();
    let r2 = store.update("/k/a", val("2"), r1, 0).await.unwrap();
    let r3 = store.update("/k/a", val("3"), r2, 0).await.unwrap();
    store.create("/k/gone", val("g"), 0).await.unwrap();
    store.delete("/k/gone", None).await.unwrap();
    let r6 = store.create("/k/b", val("b"), 0).await.unwrap();
    store.compact(r3).await.unwrap();

    assert!(matches!(store.get("/k/a", r2).await, Err(StoreError::Compacted { .. })));
    assert!(matches!(store.range(RangeRequest::prefix("/k/").at(r2)).await, Err(StoreError::Compacted { .. })));
    assert_eq!(store.get("/k/a", r3).await.unwrap().0.unwrap().value, val("3"), "the compaction point stays readable");
    let at_r3 = store.range(RangeRequest::prefix("/k/").at(r3)).await.unwrap();
    assert_eq!(at_r3.kvs.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), vec!["/k/a"]);
    assert_watch_compacted(&store, "/k/", r1).await;

    // Watching from the compaction point on still replays everything after it.
    let mut w = store.watch("/k/", r3 - 1, WatchOptions::default()).await.unwrap();
    assert_eq!(next_event(&mut w).await.revision(), r3);
    assert_eq!(next_event(&mut w).await.kv.key, "/k/gone");
    assert_eq!(next_event(&mut w).await.kind, EventKind::Delete);
    assert_eq!(next_event(&mut w).await.revision(), r6);

    assert!(matches!(store.compact(r2).await, Err(StoreError::Compacted { .. })), "compaction never goes back");
    assert!(matches!(store.compact(r6 + 1000).await, Err(StoreError::FutureRevision { .. })));

    // Compact everything; the present is untouched.
    store.compact(r6).await.unwrap();
    let now = store.range(RangeRequest::prefix("/k/")).await.unwrap();
    let values: Vec<(String, Bytes)> = now.kvs.into_iter().map(|kv: KeyValue| (kv.key, kv.value)).collect();
    assert_eq!(values, vec![("/k/a".to_string(), val("3")), ("/k/b".to_string(), val("b"))]);
    let status = store.status().await.unwrap();
    assert!(status.revision >= r6);
}

pub async fn leases_expire_and_revoke(store: DynStore) {
    let start = store.current_revision().await.unwrap();
    let mut w = store.watch("/l/", start, WatchOptions::default()).await.unwrap();

    let short = store.grant_lease(1).await.unwrap();
    store.create("/l/short", val("s"), short).await.unwrap();
    let kv = store.get("/l/short", 0).await.unwrap().0.unwrap();
    assert_eq!(kv.lease, short);
    assert_eq!(next_event(&mut w).await.kind, EventKind::Put);
    // Expiry is a delete like any other: watchers see it.
    let e = next_event(&mut w).await;
    assert_eq!((e.kind, e.kv.key.as_str()), (EventKind::Delete, "/l/short"));
    assert_eq!(store.get("/l/short", 0).await.unwrap().0, None);
    assert!(matches!(store.keep_alive(short).await, Err(StoreError::LeaseNotFound(_))));

    let long = store.grant_lease(60).await.unwrap();
    assert!(store.keep_alive(long).await.unwrap() >= 60);
    store.create("/l/one", val("1"), long).await.unwrap();
    store.create("/l/two", val("2"), long).await.unwrap();
    store.create("/l/free", val("f"), 0).await.unwrap();
    store.revoke_lease(long).await.unwrap();
    let left = store.range(RangeRequest::prefix("/l/")).await.unwrap();
    assert_eq!(left.kvs.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), vec!["/l/free"]);
    assert!(matches!(store.revoke_lease(long).await, Err(StoreError::LeaseNotFound(_))));
}

pub async fn watch_progress_notifications(store: DynStore) {
    let rev = store.create("/other/x", val("x"), 0).await.unwrap();
    let opts = WatchOptions { progress_interval: Some(Duration::from_millis(200)) };
    let mut w = store.watch("/quiet/", rev, opts).await.unwrap();
    // etcd may answer a progress request before the watch has caught up; the
    // notification that matters promises everything up to `rev`.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        assert!(tokio::time::Instant::now() < deadline, "no progress notification reaching {rev}");
        match next_item(&mut w).await.unwrap() {
            WatchEvent::Progress(p) if p >= rev => break,
            WatchEvent::Progress(_) => continue,
            WatchEvent::Event(e) => panic!("no events expected on a quiet prefix, got {e:?}"),
        }
    }
    let rev2 = store.create("/quiet/now", val("n"), 0).await.unwrap();
    assert_eq!(next_event(&mut w).await.revision(), rev2, "progress never hides an event");
}

/// A fixture helper: keeps anything alive for the duration of a case.
pub type Guard = Box<dyn std::any::Any + Send>;

/// Wraps a concrete store for the suite.
pub fn dyn_store<S: crate::Store>(store: S) -> DynStore {
    Arc::new(store)
}
