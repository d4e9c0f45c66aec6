//! The single writer: one thread owns the write connection, drains every queued write
//! into one transaction (group commit: one fsync for many writes), publishes the
//! resulting events to the watch hub, and only then acknowledges the writers.
//!
//! Between batches it also expires leases and advances compaction a few hundred rows
//! at a time, so neither ever holds the write lock for long.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use tokio::sync::oneshot;

use super::queries::{latest_kv, meta, row_event};
use super::watch::Hub;
use crate::{Event, KeyValue, LeaseId, Revision, StoreError, metrics};

/// Writes that are drained into one transaction at most.
const MAX_BATCH: usize = 512;
/// Log rows examined per compaction step.
const COMPACT_STEP_ROWS: i64 = 500;
const LEASE_CHECK_EVERY: Duration = Duration::from_millis(250);

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub(crate) enum WriteOp {
    Create { key: String, value: Bytes, lease: LeaseId, reply: Reply<Revision> },
    Update { key: String, value: Bytes, expected: Revision, lease: LeaseId, reply: Reply<Revision> },
    Delete { key: String, expected: Option<Revision>, reply: Reply<(Revision, KeyValue)> },
    Compact { revision: Revision, reply: Reply<()> },
    GrantLease { ttl: i64, reply: Reply<LeaseId> },
    KeepAlive { lease: LeaseId, reply: Reply<i64> },
    RevokeLease { lease: LeaseId, reply: Reply<()> },
}

/// Values the async side reads without a database round trip.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) compacted: AtomicI64,
}

pub(crate) struct Writer {
    conn: Connection,
    hub: Arc<Hub>,
    shared: Arc<Shared>,
    revision: Revision,
    compacted: Revision,
    /// Log rows below this revision have been examined by compaction.
    compact_done: Revision,
    next_lease_check: Instant,
}

/// A reply waiting for the batch to commit.
enum Pending {
    Rev(Reply<Revision>, Result<Revision, StoreError>),
    Delete(Reply<(Revision, KeyValue)>, Result<(Revision, KeyValue), StoreError>),
    Unit(Reply<()>, Result<(), StoreError>),
    Lease(Reply<LeaseId>, Result<LeaseId, StoreError>),
    Ttl(Reply<i64>, Result<i64, StoreError>),
}

impl Pending {
    fn send(self, fault: Option<&str>) {
        // On a commit failure every write in the batch is lost: report that, not success.
        let fail = |f: &str| StoreError::Backend(format!("commit failed: {f}"));
        match self {
            Pending::Rev(tx, r) => drop(tx.send(fault.map_or(r, |f| Err(fail(f))))),
            Pending::Delete(tx, r) => drop(tx.send(fault.map_or(r, |f| Err(fail(f))))),
            Pending::Unit(tx, r) => drop(tx.send(fault.map_or(r, |f| Err(fail(f))))),
            Pending::Lease(tx, r) => drop(tx.send(fault.map_or(r, |f| Err(fail(f))))),
            Pending::Ttl(tx, r) => drop(tx.send(fault.map_or(r, |f| Err(fail(f))))),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl Writer {
    pub(crate) fn new(conn: Connection, hub: Arc<Hub>, shared: Arc<Shared>) -> rusqlite::Result<Self> {
        let revision = meta(&conn, "revision")?;
        let compacted = meta(&conn, "compacted")?;
        let compact_done = meta(&conn, "compact_done")?;
        shared.compacted.store(compacted, Ordering::SeqCst);
        Ok(Writer { conn, hub, shared, revision, compacted, compact_done, next_lease_check: Instant::now() })
    }

    pub(crate) fn revision(&self) -> Revision {
        self.revision
    }

    pub(crate) fn run(mut self, rx: Receiver<WriteOp>) {
        loop {
            let compaction_pending = self.compact_done < self.compacted;
            let wait = if compaction_pending {
                Duration::ZERO
            } else {
                self.next_lease_check.saturating_duration_since(Instant::now())
            };
            let mut batch = Vec::new();
            match rx.recv_timeout(wait) {
                Ok(op) => batch.push(op),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            let expire = Instant::now() >= self.next_lease_check;
            if expire {
                self.next_lease_check = Instant::now() + LEASE_CHECK_EVERY;
            }
            if !batch.is_empty() || expire {
                self.apply(batch, expire);
            }
            if self.compact_done < self.compacted
                && let Err(e) = self.compact_step()
            {
                tracing::warn!(error = %e, "compaction step failed; will retry");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.hub.close();
        // Fold the WAL back into the main file so a clean stop leaves one file.
        if let Err(e) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
            tracing::warn!(error = %e, "final checkpoint failed");
        }
        tracing::debug!("sqlite writer stopped");
    }

    /// Applies a batch in one transaction, commits, publishes, then replies.
    fn apply(&mut self, batch: Vec<WriteOp>, expire_leases: bool) {
        let _timer = metrics::Timer::new("sqlite", "commit");
        let start_revision = self.revision;
        let start_compacted = self.compacted;
        let mut events = Vec::new();
        let mut pending = Vec::with_capacity(batch.len());
        let outcome = (|| -> rusqlite::Result<()> {
            let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let mut state = TxState { tx: &tx, revision: &mut self.revision, events: &mut events };
            if expire_leases {
                state.expire_leases(now_ms())?;
            }
            for op in batch {
                pending.push(state.apply(op, &mut self.compacted)?);
            }
            if *state.revision != start_revision {
                tx.execute("UPDATE meta SET value = ?1 WHERE name = 'revision'", [*state.revision])?;
            }
            tx.commit()
        })();
        match outcome {
            Ok(()) => {
                self.shared.compacted.store(self.compacted, Ordering::SeqCst);
                if self.revision != start_revision {
                    metrics::REVISION.with_label_values(&["sqlite"]).set(self.revision);
                }
                self.hub.publish(events);
                for p in pending {
                    p.send(None);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "sqlite commit failed");
                self.revision = start_revision;
                self.compacted = start_compacted;
                let fault = e.to_string();
                for p in pending {
                    p.send(Some(&fault));
                }
            }
        }
    }

    /// Removes history in the next window of revisions [done, upper), upper at most the
    /// compaction point C. Each row supersedes its key's previous row (its `prev_rev`), so
    /// visiting every row once finds every superseded row exactly once; tombstones below C
    /// are needed by no read. The row standing at C keeps its predecessor until the next
    /// compaction: a watch may resume at C and its event must still carry the old value.
    fn compact_step(&mut self) -> rusqlite::Result<()> {
        let _timer = metrics::Timer::new("sqlite", "compact_step");
        let target = self.compacted;
        let upper = (self.compact_done + COMPACT_STEP_ROWS).min(target);
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute(
            "DELETE FROM log WHERE rev IN (
                 SELECT prev_rev FROM log WHERE rev >= ?1 AND rev < ?2 AND prev_rev IS NOT NULL)",
            params![self.compact_done, upper],
        )?;
        tx.execute("DELETE FROM log WHERE rev >= ?1 AND rev < ?2 AND deleted = 1", params![self.compact_done, upper])?;
        tx.execute("UPDATE meta SET value = ?1 WHERE name = 'compact_done'", [upper])?;
        tx.commit()?;
        self.compact_done = upper;
        if upper >= target {
            // Hand freed pages back and keep the WAL from growing across compactions.
            self.conn.execute_batch("PRAGMA incremental_vacuum; PRAGMA wal_checkpoint(TRUNCATE);")?;
            tracing::debug!(revision = target, "compaction finished");
        }
        Ok(())
    }
}

/// The state of one batch's transaction.
struct TxState<'a> {
    tx: &'a Transaction<'a>,
    revision: &'a mut Revision,
    events: &'a mut Vec<Event>,
}

impl TxState<'_> {
    fn apply(&mut self, op: WriteOp, compacted: &mut Revision) -> rusqlite::Result<Pending> {
        Ok(match op {
            WriteOp::Create { key, value, lease, reply } => Pending::Rev(reply, self.create(&key, value, lease)?),
            WriteOp::Update { key, value, expected, lease, reply } => {
                Pending::Rev(reply, self.update(&key, value, expected, lease)?)
            }
            WriteOp::Delete { key, expected, reply } => Pending::Delete(reply, self.delete(&key, expected)?),
            WriteOp::Compact { revision, reply } => Pending::Unit(reply, self.compact(revision, compacted)?),
            WriteOp::GrantLease { ttl, reply } => Pending::Lease(reply, self.grant_lease(ttl)?),
            WriteOp::KeepAlive { lease, reply } => Pending::Ttl(reply, self.keep_alive(lease)?),
            WriteOp::RevokeLease { lease, reply } => Pending::Unit(reply, self.revoke(lease)?),
        })
    }

    fn lease_exists(&self, lease: LeaseId) -> rusqlite::Result<bool> {
        if lease == 0 {
            return Ok(true);
        }
        self.tx.prepare_cached("SELECT 1 FROM lease WHERE id = ?1")?.exists([lease])
    }

    /// Appends a log row at the next revision and returns its event.
    fn append(&mut self, kv: KeyValue, deleted: bool, prev: Option<KeyValue>) -> rusqlite::Result<Revision> {
        let rev = *self.revision + 1;
        self.tx
            .prepare_cached(
                "INSERT INTO log (rev, key, deleted, create_rev, version, lease, prev_rev, value)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                rev,
                kv.key.as_bytes(),
                deleted,
                if kv.create_revision == 0 { rev } else { kv.create_revision },
                kv.version,
                kv.lease,
                prev.as_ref().map(|p| p.mod_revision),
                if deleted { None } else { Some(&kv.value[..]) },
            ])?;
        if deleted {
            self.tx.prepare_cached("DELETE FROM latest WHERE key = ?1")?.execute([kv.key.as_bytes()])?;
        } else {
            self.tx
                .prepare_cached("INSERT OR REPLACE INTO latest (key, rev, lease) VALUES (?1, ?2, ?3)")?
                .execute(params![kv.key.as_bytes(), rev, kv.lease])?;
        }
        *self.revision = rev;
        let kv = KeyValue {
            mod_revision: rev,
            create_revision: if kv.create_revision == 0 { rev } else { kv.create_revision },
            ..kv
        };
        self.events.push(row_event(kv, deleted, prev));
        Ok(rev)
    }

    fn create(&mut self, key: &str, value: Bytes, lease: LeaseId) -> rusqlite::Result<Result<Revision, StoreError>> {
        if latest_kv(self.tx, key)?.is_some() {
            return Ok(Err(StoreError::AlreadyExists(key.to_string())));
        }
        if !self.lease_exists(lease)? {
            return Ok(Err(StoreError::LeaseNotFound(lease)));
        }
        let kv = KeyValue { key: key.to_string(), value, create_revision: 0, mod_revision: 0, version: 1, lease };
        self.append(kv, false, None).map(Ok)
    }

    fn update(
        &mut self,
        key: &str,
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
    ) -> rusqlite::Result<Result<Revision, StoreError>> {
        let Some(current) = latest_kv(self.tx, key)? else {
            return Ok(Err(StoreError::NotFound(key.to_string())));
        };
        if current.mod_revision != expected {
            let key = key.to_string();
            return Ok(Err(StoreError::Conflict { key, expected, current: Some(Box::new(current)) }));
        }
        if !self.lease_exists(lease)? {
            return Ok(Err(StoreError::LeaseNotFound(lease)));
        }
        let kv = KeyValue {
            key: key.to_string(),
            value,
            create_revision: current.create_revision,
            mod_revision: 0,
            version: current.version + 1,
            lease,
        };
        self.append(kv, false, Some(current)).map(Ok)
    }

    fn delete(
        &mut self,
        key: &str,
        expected: Option<Revision>,
    ) -> rusqlite::Result<Result<(Revision, KeyValue), StoreError>> {
        let Some(current) = latest_kv(self.tx, key)? else {
            return Ok(Err(StoreError::NotFound(key.to_string())));
        };
        if let Some(expected) = expected.filter(|e| *e != current.mod_revision) {
            let key = key.to_string();
            return Ok(Err(StoreError::Conflict { key, expected, current: Some(Box::new(current)) }));
        }
        let tombstone = KeyValue { value: Bytes::new(), version: 0, lease: 0, ..current.clone() };
        let rev = self.append(tombstone, true, Some(current.clone()))?;
        Ok(Ok((rev, current)))
    }

    fn compact(&mut self, revision: Revision, compacted: &mut Revision) -> rusqlite::Result<Result<(), StoreError>> {
        if revision <= *compacted {
            return Ok(Err(StoreError::Compacted { requested: revision, compacted: *compacted }));
        }
        if revision > *self.revision {
            return Ok(Err(StoreError::FutureRevision { requested: revision, current: *self.revision }));
        }
        // Recorded before any row goes, so a reader that sees a deleted row's absence
        // also sees the compaction point that explains it.
        self.tx.execute("UPDATE meta SET value = ?1 WHERE name = 'compacted'", [revision])?;
        *compacted = revision;
        Ok(Ok(()))
    }

    fn grant_lease(&mut self, ttl: i64) -> rusqlite::Result<Result<LeaseId, StoreError>> {
        if ttl <= 0 {
            return Ok(Err(StoreError::InvalidRequest(format!("lease TTL must be positive, got {ttl}"))));
        }
        loop {
            let id = rand::random_range(1..i64::MAX);
            let inserted = self
                .tx
                .prepare_cached("INSERT OR IGNORE INTO lease (id, ttl, expires_at_ms) VALUES (?1, ?2, ?3)")?
                .execute(params![id, ttl, now_ms() + ttl * 1000])?;
            if inserted == 1 {
                return Ok(Ok(id));
            }
        }
    }

    fn keep_alive(&mut self, lease: LeaseId) -> rusqlite::Result<Result<i64, StoreError>> {
        let ttl: Option<i64> = self
            .tx
            .prepare_cached("UPDATE lease SET expires_at_ms = ?1 + ttl * 1000 WHERE id = ?2 RETURNING ttl")?
            .query_row(params![now_ms(), lease], |r| r.get(0))
            .optional()?;
        Ok(ttl.ok_or(StoreError::LeaseNotFound(lease)))
    }

    fn revoke(&mut self, lease: LeaseId) -> rusqlite::Result<Result<(), StoreError>> {
        if lease == 0 || !self.lease_exists(lease)? {
            return Ok(Err(StoreError::LeaseNotFound(lease)));
        }
        let keys: Vec<String> = self
            .tx
            .prepare_cached("SELECT key FROM latest WHERE lease = ?1 ORDER BY key")?
            .query_map([lease], |r| r.get::<_, Vec<u8>>(0))?
            .map(|k| k.map(|k| String::from_utf8_lossy(&k).into_owned()))
            .collect::<rusqlite::Result<_>>()?;
        for key in keys {
            // The key exists (we just read it in this transaction), so this cannot fail logically.
            if let Err(e) = self.delete(&key, None)? {
                tracing::warn!(error = %e, key, "deleting a leased key failed");
            }
        }
        self.tx.prepare_cached("DELETE FROM lease WHERE id = ?1")?.execute([lease])?;
        Ok(Ok(()))
    }

    fn expire_leases(&mut self, now: i64) -> rusqlite::Result<()> {
        let expired: Vec<LeaseId> = self
            .tx
            .prepare_cached("SELECT id FROM lease WHERE expires_at_ms <= ?1")?
            .query_map([now], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for lease in expired {
            tracing::debug!(lease, "lease expired");
            let _ = self.revoke(lease)?;
        }
        Ok(())
    }
}
