//! Opening the database file: layout, pragmas, and the start-up checks that turn a
//! corrupt, truncated or foreign file into a clear error instead of silent loss.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::{Result, StoreError};

/// "krat" — marks the file as ours, so a foreign SQLite file is refused.
const APPLICATION_ID: i64 = 0x6b72_6174;
const SCHEMA_VERSION: i64 = 1;
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

const SCHEMA: &str = "
CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES ('revision', 0), ('compacted', 0), ('compact_done', 0);
-- One row per revision: the history. Tombstones have deleted = 1 and no value.
CREATE TABLE log (
    rev INTEGER PRIMARY KEY,
    key BLOB NOT NULL,
    deleted INTEGER NOT NULL,
    create_rev INTEGER NOT NULL,
    version INTEGER NOT NULL,
    lease INTEGER NOT NULL,
    prev_rev INTEGER,
    value BLOB
);
CREATE INDEX log_key_rev ON log(key, rev);
-- The live keys and the log row holding each one's current value.
CREATE TABLE latest (key BLOB PRIMARY KEY, rev INTEGER NOT NULL, lease INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX latest_lease ON latest(lease) WHERE lease != 0;
CREATE TABLE lease (id INTEGER PRIMARY KEY, ttl INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL);
CREATE INDEX lease_expiry ON lease(expires_at_ms);
";

fn corrupt(path: &Path, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt { path: path.display().to_string(), reason: reason.into() }
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseCorrupt) | Some(rusqlite::ErrorCode::NotADatabase) => {
            corrupt(path, e.to_string())
        }
        _ => StoreError::backend(format!("{}: {e}", path.display())),
    }
}

/// Opens (creating if needed) the database for the single writer and verifies it.
pub(crate) fn open_writer(path: &Path, integrity_check: bool) -> Result<Connection> {
    let existed = path.metadata().map(|m| m.len() > 0).unwrap_or(false);
    if existed {
        check_header(path)?;
    }
    let err = sql_err(path);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(&err)?;
    if !existed {
        // Must precede the first table: lets compaction hand pages back to the OS.
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL;").map_err(&err)?;
    }
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(&err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::backend(format!("{}: cannot enable WAL (journal_mode is {mode})", path.display())));
    }
    // FULL: a commit returns only after the WAL is fsynced — a write is acknowledged only when durable.
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = OFF; PRAGMA cache_size = -8000;")
        .map_err(&err)?;

    if existed {
        let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(&err)?;
        if app != APPLICATION_ID {
            return Err(corrupt(path, format!("not a krate database (application_id {app:#x})")));
        }
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(&err)?;
        if version != SCHEMA_VERSION {
            return Err(corrupt(path, format!("unknown schema version {version} (this build knows {SCHEMA_VERSION})")));
        }
        if integrity_check {
            let result: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(&err)?;
            if result != "ok" {
                return Err(corrupt(path, format!("integrity check failed: {result}")));
            }
        }
    } else {
        conn.execute_batch(&format!(
            "BEGIN; {SCHEMA} PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        ))
        .map_err(&err)?;
    }
    Ok(conn)
}

/// A read-only connection for the reader pool.
pub(crate) fn open_reader(path: &Path) -> Result<Connection> {
    let err = sql_err(path);
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(&err)?;
    conn.execute_batch("PRAGMA query_only = ON; PRAGMA cache_size = -4000;").map_err(&err)?;
    Ok(conn)
}

/// A file too short for a header, or with another header, is not a database we wrote.
fn check_header(path: &Path) -> Result<()> {
    let mut header = [0u8; 16];
    let mut file = File::open(path).map_err(|e| corrupt(path, e.to_string()))?;
    file.read_exact(&mut header).map_err(|_| corrupt(path, "file is truncated (shorter than a SQLite header)"))?;
    if &header != SQLITE_MAGIC {
        return Err(corrupt(path, "file is not a SQLite database (bad header)"));
    }
    Ok(())
}
