use crate::{KeyValue, Revision};

/// Everything a store operation can fail with. Callers (the API server) map these onto
/// Kubernetes statuses: `AlreadyExists` → 409 AlreadyExists, `Conflict` → 409 Conflict,
/// `Compacted` → 410 Gone, and so on; `Backend` and `Corrupt` are server faults.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("key {0:?} already exists")]
    AlreadyExists(String),
    #[error("key {0:?} not found")]
    NotFound(String),
    /// The key's mod_revision did not match the expected one. `current` is the value the
    /// store holds now, so a caller can retry without another read.
    #[error("key {key:?} was modified: expected revision {expected}, found {}", current.as_ref().map(|kv| kv.mod_revision).unwrap_or(0))]
    Conflict { key: String, expected: Revision, current: Option<Box<KeyValue>> },
    /// The requested revision is older than the compaction point.
    #[error("revision {requested} has been compacted (compacted revision is {compacted})")]
    Compacted { requested: Revision, compacted: Revision },
    /// The requested revision is newer than anything written yet.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision { requested: Revision, current: Revision },
    #[error("lease {0} not found")]
    LeaseNotFound(i64),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The database on disk failed its integrity check or has an unknown layout.
    #[error("database {path} is corrupt or unreadable: {reason}")]
    Corrupt { path: String, reason: String },
    /// The store has shut down.
    #[error("store is closed")]
    Closed,
    /// A fault in the backend itself (I/O, the database engine, the etcd connection).
    #[error("storage backend error: {0}")]
    Backend(String),
}

impl StoreError {
    pub fn backend(e: impl std::fmt::Display) -> Self {
        StoreError::Backend(e.to_string())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
