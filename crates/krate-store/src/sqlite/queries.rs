//! SQL shared by the writer and the readers, and the mapping from rows to store types.

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::{Event, EventKind, KeyValue, RangeRequest, RangeResponse, Revision, StoreError, prefix_end};

/// Above every key: keys are UTF-8, and no UTF-8 string contains the byte 0xff.
const KEYSPACE_END: &[u8] = &[0xff];

/// Columns that make a [`KeyValue`], in the order [`kv_at`] reads them.
pub(crate) const KV_COLUMNS: &str = "g.key, g.value, g.create_rev, g.rev, g.version, g.lease";

pub(crate) fn kv_at(row: &Row<'_>, base: usize) -> rusqlite::Result<KeyValue> {
    let key: Vec<u8> = row.get(base)?;
    let value: Option<Vec<u8>> = row.get(base + 1)?;
    Ok(KeyValue {
        key: String::from_utf8(key).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        value: Bytes::from(value.unwrap_or_default()),
        create_revision: row.get(base + 2)?,
        mod_revision: row.get(base + 3)?,
        version: row.get(base + 4)?,
        lease: row.get(base + 5)?,
    })
}

pub(crate) fn meta(conn: &Connection, name: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT value FROM meta WHERE name = ?1")?.query_row([name], |r| r.get(0))
}

/// The live value of a key, at the latest revision.
pub(crate) fn latest_kv(conn: &Connection, key: &str) -> rusqlite::Result<Option<KeyValue>> {
    conn.prepare_cached(&format!("SELECT {KV_COLUMNS} FROM latest l JOIN log g ON g.rev = l.rev WHERE l.key = ?1"))?
        .query_row([key.as_bytes()], |r| kv_at(r, 0))
        .optional()
}

/// Checks that `revision` can be served: not compacted, not in the future.
pub(crate) fn check_revision(conn: &Connection, revision: Revision) -> Result<Revision, ReadError> {
    let current = meta(conn, "revision")?;
    if revision > current {
        return Err(StoreError::FutureRevision { requested: revision, current }.into());
    }
    let compacted = meta(conn, "compacted")?;
    if revision < compacted {
        return Err(StoreError::Compacted { requested: revision, compacted }.into());
    }
    Ok(current)
}

/// A read fails either with a store-level answer or with an engine fault.
pub(crate) enum ReadError {
    Store(StoreError),
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for ReadError {
    fn from(e: rusqlite::Error) -> Self {
        ReadError::Sql(e)
    }
}

impl From<StoreError> for ReadError {
    fn from(e: StoreError) -> Self {
        ReadError::Store(e)
    }
}

impl From<ReadError> for StoreError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Store(e) => e,
            ReadError::Sql(e) => StoreError::backend(e),
        }
    }
}

pub(crate) fn get(conn: &Connection, key: &str, revision: Revision) -> Result<(Option<KeyValue>, Revision), ReadError> {
    if revision == 0 {
        // One statement is one snapshot: the value and the revision agree without an
        // explicit transaction (the hot path of every GET).
        let row = conn
            .prepare_cached(&format!(
                "SELECT m.value, {KV_COLUMNS} FROM meta m
                 LEFT JOIN latest l ON l.key = ?1 LEFT JOIN log g ON g.rev = l.rev
                 WHERE m.name = 'revision'"
            ))?
            .query_row([key.as_bytes()], |r| {
                let current: Revision = r.get(0)?;
                let present = r.get::<_, Option<i64>>(4)?.is_some();
                Ok((present.then(|| kv_at(r, 1)).transpose()?, current))
            })?;
        return Ok(row);
    }
    let tx = conn.unchecked_transaction()?;
    check_revision(&tx, revision)?;
    let found = tx
        .prepare_cached(&format!(
            "SELECT {KV_COLUMNS}, g.deleted FROM log g WHERE g.key = ?1 AND g.rev <= ?2 ORDER BY g.rev DESC LIMIT 1"
        ))?
        .query_row(params![key.as_bytes(), revision], |r| Ok((kv_at(r, 0)?, r.get::<_, bool>(6)?)))
        .optional()?;
    Ok((found.and_then(|(kv, deleted)| (!deleted).then_some(kv)), revision))
}

/// Byte bounds [start, end) of a range request; `end` is None for "to the end".
fn bounds(req: &RangeRequest) -> (Vec<u8>, Option<Vec<u8>>) {
    let end = prefix_end(req.prefix.as_bytes());
    let start = match &req.start_after {
        Some(after) if after.as_str() >= req.prefix.as_str() => {
            let mut k = after.as_bytes().to_vec();
            k.push(0);
            k
        }
        _ => req.prefix.as_bytes().to_vec(),
    };
    (start, end)
}

pub(crate) fn range(conn: &Connection, req: &RangeRequest) -> Result<RangeResponse, ReadError> {
    let tx = conn.unchecked_transaction()?;
    let (start, end) = bounds(req);
    let end = end.unwrap_or_else(|| KEYSPACE_END.to_vec());
    let limit: i64 = if req.limit == 0 { -1 } else { req.limit as i64 + 1 };
    let (rows, count, revision) = if req.revision == 0 {
        let current = meta(&tx, "revision")?;
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT {KV_COLUMNS} FROM latest l JOIN log g ON g.rev = l.rev
             WHERE l.key >= ?1 AND l.key < ?2 ORDER BY l.key LIMIT ?3"
        ))?;
        let rows =
            stmt.query_map(params![start, end, limit], |r| kv_at(r, 0))?.collect::<rusqlite::Result<Vec<_>>>()?;
        let count: i64 = tx
            .prepare_cached("SELECT count(*) FROM latest WHERE key >= ?1 AND key < ?2")?
            .query_row(params![start, end], |r| r.get(0))?;
        (rows, count, current)
    } else {
        check_revision(&tx, req.revision)?;
        // For each key, the newest row at or before the revision (SQLite takes the bare
        // columns from the row holding max(rev)); tombstones mean "absent".
        let historical = "FROM (SELECT key, max(rev) AS rev, deleted FROM log
                                WHERE key >= ?1 AND key < ?2 AND rev <= ?3 GROUP BY key) h
                          JOIN log g ON g.rev = h.rev WHERE h.deleted = 0";
        let mut stmt = tx.prepare_cached(&format!("SELECT {KV_COLUMNS} {historical} ORDER BY g.key LIMIT ?4"))?;
        let rows = stmt
            .query_map(params![start, end, req.revision, limit], |r| kv_at(r, 0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let count: i64 = tx
            .prepare_cached(&format!("SELECT count(*) {historical}"))?
            .query_row(params![start, end, req.revision], |r| r.get(0))?;
        (rows, count, req.revision)
    };
    let mut kvs = rows;
    let more = req.limit != 0 && kvs.len() > req.limit;
    kvs.truncate(if req.limit == 0 { kvs.len() } else { req.limit });
    Ok(RangeResponse { kvs, more, count, revision })
}

/// Events with revisions in (after, upto] under `prefix`, in order, with previous values.
pub(crate) fn events(
    conn: &Connection,
    prefix: &str,
    after: Revision,
    upto: Revision,
) -> Result<Vec<Event>, ReadError> {
    let tx = conn.unchecked_transaction()?;
    let compacted = meta(&tx, "compacted")?;
    if after + 1 < compacted {
        return Err(StoreError::Compacted { requested: after + 1, compacted }.into());
    }
    let start = prefix.as_bytes().to_vec();
    let end = prefix_end(prefix.as_bytes()).unwrap_or_else(|| KEYSPACE_END.to_vec());
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {KV_COLUMNS}, g.deleted, p.key, p.value, p.create_rev, p.rev, p.version, p.lease
         FROM log g LEFT JOIN log p ON p.rev = g.prev_rev
         WHERE g.rev > ?1 AND g.rev <= ?2 AND g.key >= ?3 AND g.key < ?4 ORDER BY g.rev"
    ))?;
    let events = stmt
        .query_map(params![after, upto, start, end], |r| {
            let kv = kv_at(r, 0)?;
            let deleted: bool = r.get(6)?;
            let prev = match r.get::<_, Option<i64>>(10)? {
                Some(_) => Some(kv_at(r, 7)?),
                None => None,
            };
            Ok(row_event(kv, deleted, prev))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(events)
}

pub(crate) fn row_event(kv: KeyValue, deleted: bool, prev: Option<KeyValue>) -> Event {
    if deleted {
        let kv = KeyValue {
            key: kv.key,
            value: Bytes::new(),
            create_revision: 0,
            mod_revision: kv.mod_revision,
            version: 0,
            lease: 0,
        };
        Event { kind: EventKind::Delete, kv, prev }
    } else {
        Event { kind: EventKind::Put, kv, prev }
    }
}
