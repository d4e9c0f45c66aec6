//! SQLite backend specifics: restarts, start-up checks, physical compaction, locking.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use krate_store::sqlite::{SqliteConfig, SqliteStore};
use krate_store::{RangeRequest, Store, StoreError, WatchEvent, WatchOptions};

async fn open(path: &std::path::Path) -> Result<SqliteStore, StoreError> {
    SqliteStore::open(SqliteConfig::new(path)).await
}

#[tokio::test]
async fn restart_keeps_state_history_and_revision() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path).await.unwrap();
    let r1 = store.create("/a", Bytes::from_static(b"1"), 0).await.unwrap();
    let r2 = store.update("/a", Bytes::from_static(b"2"), r1, 0).await.unwrap();
    let lease = store.grant_lease(600).await.unwrap();
    store.create("/leased", Bytes::from_static(b"l"), lease).await.unwrap();
    store.close().await.unwrap();

    let store = open(&path).await.unwrap();
    let last = store.current_revision().await.unwrap();
    assert_eq!(last, r2 + 1);
    assert_eq!(store.get("/a", 0).await.unwrap().0.unwrap().value, Bytes::from_static(b"2"));
    assert_eq!(store.get("/a", r1).await.unwrap().0.unwrap().value, Bytes::from_static(b"1"));
    assert_eq!(store.keep_alive(lease).await.unwrap(), 600, "leases survive a restart");
    let r4 = store.create("/b", Bytes::new(), 0).await.unwrap();
    assert_eq!(r4, last + 1, "revisions continue where they stopped");

    // A watch resuming from before the restart replays history from disk.
    let mut w = store.watch("/", 0, WatchOptions::default()).await.unwrap();
    let mut revs = Vec::new();
    while revs.len() < 4 {
        match tokio::time::timeout(Duration::from_secs(10), w.next()).await.unwrap().unwrap().unwrap() {
            WatchEvent::Event(e) => revs.push(e.revision()),
            WatchEvent::Progress(_) => {}
        }
    }
    assert_eq!(revs, vec![r1, r2, r2 + 1, r4]);
}

#[tokio::test]
async fn corrupt_truncated_or_foreign_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path).await.unwrap();
    for i in 0..400 {
        store.create(&format!("/k/{i:04}"), Bytes::from(vec![b'x'; 2000]), 0).await.unwrap();
    }
    store.close().await.unwrap();
    let good = std::fs::read(&path).unwrap();
    assert!(good.len() > 64 * 1024, "the database spans many pages");

    let expect_corrupt = |result: Result<SqliteStore, StoreError>, what: &str| match result {
        Err(StoreError::Corrupt { path: p, reason }) => {
            assert!(p.ends_with("state.db"), "{what}: the error names the file");
            assert!(!reason.is_empty());
        }
        Err(e) => panic!("{what}: expected a Corrupt error, got {e}"),
        Ok(_) => panic!("{what}: a damaged database must not open"),
    };

    // Truncated to half.
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    expect_corrupt(open(&path).await, "truncated to half");
    // Truncated inside the header.
    std::fs::write(&path, &good[..10]).unwrap();
    expect_corrupt(open(&path).await, "truncated header");
    // Pages overwritten with garbage.
    let mut damaged = good.clone();
    let mid = damaged.len() / 2;
    for (i, b) in damaged[mid - 20_000..mid + 20_000].iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    std::fs::write(&path, &damaged).unwrap();
    expect_corrupt(open(&path).await, "garbage pages");
    // Not a database at all.
    std::fs::write(&path, b"hello, this is not a database, just some text that is long enough").unwrap();
    expect_corrupt(open(&path).await, "text file");
    // A SQLite database that is not ours.
    std::fs::remove_file(&path).unwrap();
    rusqlite::Connection::open(&path).unwrap().execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);").unwrap();
    expect_corrupt(open(&path).await, "foreign database");

    // The intact file still opens with everything in it.
    std::fs::write(&path, &good).unwrap();
    let store = open(&path).await.unwrap();
    assert_eq!(store.range(RangeRequest::prefix("/k/")).await.unwrap().kvs.len(), 400);
}

#[tokio::test]
async fn one_process_per_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let _store = open(&path).await.unwrap();
    match open(&path).await {
        Err(e) => assert!(e.to_string().contains("in use"), "{e}"),
        Ok(_) => panic!("a second writer on the same file must be refused"),
    }
}

fn log_rows(path: &std::path::Path) -> (i64, i64, i64) {
    let mut conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    // One read transaction: three separate reads could count the rows before a
    // compaction step commits and see its progress marker after it.
    let tx = conn.transaction().unwrap();
    let rows = tx.query_row("SELECT count(*) FROM log", [], |r| r.get(0)).unwrap();
    let done = tx.query_row("SELECT value FROM meta WHERE name = 'compact_done'", [], |r| r.get(0)).unwrap();
    let compacted = tx.query_row("SELECT value FROM meta WHERE name = 'compacted'", [], |r| r.get(0)).unwrap();
    (rows, done, compacted)
}

/// Waits until background compaction has caught up; returns the log's row count.
async fn wait_for_compaction(path: &std::path::Path) -> i64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (rows, done, compacted) = log_rows(path);
        if done >= compacted {
            return rows;
        }
        assert!(std::time::Instant::now() < deadline, "compaction did not finish in 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn compaction_removes_superseded_history_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path).await.unwrap();
    // 20 keys updated 150 times each, a few deleted: 3000+ history rows, 17 live keys.
    let mut revs = Vec::new();
    for k in 0..20 {
        revs.push(store.create(&format!("/k/{k}"), Bytes::from(vec![1u8; 512]), 0).await.unwrap());
    }
    for round in 0..150u8 {
        for (k, rev) in revs.iter_mut().enumerate() {
            *rev = store.update(&format!("/k/{k}"), Bytes::from(vec![round; 512]), *rev, 0).await.unwrap();
        }
    }
    for k in 0..3 {
        store.delete(&format!("/k/{k}"), None).await.unwrap();
    }
    let before = log_rows(&path).0;
    assert!(before > 3000);

    // Compacting twice: rows kept by the first compaction and superseded later must go too.
    let mid = store.current_revision().await.unwrap();
    store.compact(mid - 100).await.unwrap();
    let first = revs[10];
    let rev = store.update("/k/10", Bytes::from_static(b"after"), first, 0).await.unwrap();
    let now = store.current_revision().await.unwrap();
    store.compact(now).await.unwrap();

    // All that remains: the 17 live rows, plus the value the write at the compaction
    // point replaced (a watch resuming there still gets it as the previous value).
    assert_eq!(wait_for_compaction(&path).await, 18, "history left of {before} rows");
    let mut w = store.watch("/k/10", now - 1, Default::default()).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), w.next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Event(e) => assert_eq!(e.prev.map(|p| p.mod_revision), Some(first)),
        other => panic!("expected the event at the compaction point, got {other:?}"),
    }
    // The next compaction takes that row too.
    let next = store.create("/k/new", Bytes::new(), 0).await.unwrap();
    store.compact(next).await.unwrap();
    assert_eq!(wait_for_compaction(&path).await, 18, "17 old live keys and the new one");
    let live = store.range(RangeRequest::prefix("/k/")).await.unwrap();
    assert_eq!(live.kvs.len(), 18);
    let kv = store.get("/k/10", next).await.unwrap().0.unwrap();
    assert_eq!((kv.mod_revision, kv.value), (rev, Bytes::from_static(b"after")));
    assert!(matches!(store.get("/k/10", now).await, Err(StoreError::Compacted { .. })));
}
