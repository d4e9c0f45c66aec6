//! The embedded backend: a SQLite database in the data dir (WAL mode, fsync on commit).
//!
//! - `schema`: file layout and start-up checks (corruption is an error, never silent).
//! - `writer`: the single writer thread with group commit, leases and compaction.
//! - `queries`: reads (get, range at a revision, event history).
//! - `watch`: the in-memory event ring and pull-based watchers.

mod queries;
mod schema;
mod watch;
mod writer;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::{
    KeyValue, LeaseId, RangeRequest, RangeResponse, Result, Revision, Store, StoreError, StoreStatus, WatchOptions,
    WatchStream, metrics,
};
use queries::ReadError;
use watch::Hub;
use writer::{Shared, WriteOp, Writer};

#[derive(Clone, Debug)]
pub struct SqliteConfig {
    /// The database file; its directory must exist.
    pub path: PathBuf,
    /// Recent events kept in memory for watchers, by count and by bytes; older ones are
    /// read back from disk.
    pub watch_ring_events: usize,
    pub watch_ring_bytes: usize,
    /// Run SQLite's quick_check when opening an existing database.
    pub integrity_check: bool,
}

impl SqliteConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig { path: path.into(), watch_ring_events: 8192, watch_ring_bytes: 8 << 20, integrity_check: true }
    }
}

/// Read-only connections, used on the blocking pool so reads never stall the runtime.
pub(crate) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

/// Idle reader connections kept open.
const MAX_IDLE_READERS: usize = 8;

impl Readers {
    pub(crate) async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Connection) -> Result<T, ReadError> + Send + 'static,
    ) -> Result<T> {
        let readers = self.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match readers.idle.lock().pop() {
                Some(conn) => conn,
                None => schema::open_reader(&readers.path)?,
            };
            let result = f(&conn).map_err(StoreError::from);
            let mut idle = readers.idle.lock();
            if idle.len() < MAX_IDLE_READERS {
                idle.push(conn);
            }
            result
        })
        .await
        .map_err(StoreError::backend)?
    }
}

pub struct SqliteStore {
    writes: mpsc::Sender<WriteOp>,
    readers: Arc<Readers>,
    hub: Arc<Hub>,
    shared: Arc<Shared>,
    path: PathBuf,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Held for the store's life: one process per database.
    _lock: File,
}

impl SqliteStore {
    /// Opens or creates the database, checks it, and starts the writer thread.
    pub async fn open(config: SqliteConfig) -> Result<Self> {
        tokio::task::spawn_blocking(move || Self::open_blocking(config)).await.map_err(StoreError::backend)?
    }

    fn open_blocking(config: SqliteConfig) -> Result<Self> {
        let lock = lock_exclusive(&config.path)?;
        let conn = schema::open_writer(&config.path, config.integrity_check)?;
        let shared = Arc::new(Shared::default());
        let revision = queries::meta(&conn, "revision").map_err(StoreError::backend)?;
        let hub = Arc::new(Hub::new(revision, config.watch_ring_events, config.watch_ring_bytes));
        let writer = Writer::new(conn, hub.clone(), shared.clone()).map_err(StoreError::backend)?;
        metrics::REVISION.with_label_values(&["sqlite"]).set(writer.revision());
        let (writes, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("krate-sqlite-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(StoreError::backend)?;
        tracing::info!(path = %config.path.display(), revision, "sqlite store open");
        Ok(SqliteStore {
            writes,
            readers: Arc::new(Readers { path: config.path.clone(), idle: Mutex::new(Vec::new()) }),
            hub,
            shared,
            path: config.path,
            writer_thread: Mutex::new(Some(thread)),
            _lock: lock,
        })
    }

    /// Stops the writer after the queued writes and waits for the final checkpoint.
    pub async fn close(self) -> Result<()> {
        let SqliteStore { writes, writer_thread, .. } = self;
        drop(writes);
        let handle = writer_thread.lock().take();
        if let Some(handle) = handle {
            tokio::task::spawn_blocking(move || handle.join()).await.map_err(StoreError::backend)?.ok();
        }
        Ok(())
    }

    async fn submit<T>(&self, op: impl FnOnce(oneshot::Sender<Result<T>>) -> WriteOp) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.writes.send(op(tx)).map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

/// An advisory lock beside the database, so two processes never write one file.
fn lock_exclusive(db: &Path) -> Result<File> {
    let mut lock_path = db.as_os_str().to_owned();
    lock_path.push(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StoreError::backend(format!("{}: {e}", PathBuf::from(&lock_path).display())))?;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(StoreError::backend(format!("{} is in use by another krate process", db.display())));
    }
    Ok(file)
}

#[async_trait]
impl Store for SqliteStore {
    fn backend_name(&self) -> &'static str {
        "sqlite"
    }

    fn revision_hint(&self) -> Option<Revision> {
        // The writer publishes a batch before acknowledging it.
        Some(self.hub.latest_revision())
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.readers.read(|c| Ok(queries::meta(c, "revision")?)).await
    }

    async fn status(&self) -> Result<StoreStatus> {
        let (revision, compacted) = self
            .readers
            .read(|c| {
                let tx = c.unchecked_transaction()?;
                Ok((queries::meta(&tx, "revision")?, queries::meta(&tx, "compacted")?))
            })
            .await?;
        let path = self.path.clone();
        let db_size_bytes = tokio::task::spawn_blocking(move || {
            let wal = PathBuf::from(format!("{}-wal", path.display()));
            [path, wal].iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum::<u64>()
        })
        .await
        .ok();
        Ok(StoreStatus { revision, compacted, db_size_bytes })
    }

    async fn get(&self, key: &str, revision: Revision) -> Result<(Option<KeyValue>, Revision)> {
        let _timer = metrics::Timer::new("sqlite", "get");
        let key = key.to_string();
        self.readers.read(move |c| queries::get(c, &key, revision)).await
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let _timer = metrics::Timer::new("sqlite", "range");
        self.readers.read(move |c| queries::range(c, &req)).await
    }

    async fn create(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<Revision> {
        let _timer = metrics::Timer::new("sqlite", "create");
        let key = key.to_string();
        self.submit(|reply| WriteOp::Create { key, value, lease, reply }).await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision, lease: LeaseId) -> Result<Revision> {
        let _timer = metrics::Timer::new("sqlite", "update");
        let key = key.to_string();
        self.submit(|reply| WriteOp::Update { key, value, expected, lease, reply }).await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(Revision, KeyValue)> {
        let _timer = metrics::Timer::new("sqlite", "delete");
        let key = key.to_string();
        self.submit(|reply| WriteOp::Delete { key, expected, reply }).await
    }

    async fn watch(&self, prefix: &str, after: Revision, opts: WatchOptions) -> Result<WatchStream> {
        let compacted = self.shared.compacted.load(Ordering::SeqCst);
        if after + 1 < compacted {
            return Err(StoreError::Compacted { requested: after + 1, compacted });
        }
        Ok(watch::watch(self.hub.clone(), self.readers.clone(), prefix, after, opts))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let _timer = metrics::Timer::new("sqlite", "compact");
        self.submit(|reply| WriteOp::Compact { revision, reply }).await
    }

    async fn grant_lease(&self, ttl_seconds: i64) -> Result<LeaseId> {
        self.submit(|reply| WriteOp::GrantLease { ttl: ttl_seconds, reply }).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<i64> {
        self.submit(|reply| WriteOp::KeepAlive { lease, reply }).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.submit(|reply| WriteOp::RevokeLease { lease, reply }).await
    }
}
