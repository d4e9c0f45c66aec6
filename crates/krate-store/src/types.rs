use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;

use crate::StoreError;

/// A point in the store's history. Every successful write takes the next revision; the
/// API server exposes it as `metadata.resourceVersion`.
pub type Revision = i64;

/// A lease identifier; `0` means "no lease".
pub type LeaseId = i64;

/// One key as it stands at some revision, with etcd's bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// Revision of the write that created this incarnation of the key.
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
    /// Number of writes since creation (1 on create).
    pub version: i64,
    pub lease: LeaseId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change. For a delete, `kv` holds only the key and the revision of the delete
/// (as etcd does) and `prev` holds the value that was deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    /// The value before this change: present on updates and deletes, absent on creates
    /// (and when that earlier revision has already been compacted away).
    pub prev: Option<KeyValue>,
}

impl Event {
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
    /// A put that created the key (as opposed to updating it).
    pub fn is_create(&self) -> bool {
        self.kind == EventKind::Put && self.kv.create_revision == self.kv.mod_revision
    }
}

/// What a watch stream yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    Event(Event),
    /// Every matching event up to and including this revision has been delivered.
    /// The API server turns these into BOOKMARK events.
    Progress(Revision),
}

pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, StoreError>> + Send>>;

#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// When set, a `Progress` item is sent whenever the watch has been quiet this long.
    pub progress_interval: Option<Duration>,
}

/// A range over all keys starting with `prefix` (or exactly `key`, see [`RangeRequest::key`]).
#[derive(Clone, Debug, Default)]
pub struct RangeRequest {
    pub prefix: String,
    /// Continue after this key (exclusive): the continuation of a paged list.
    pub start_after: Option<String>,
    /// At most this many keys; 0 means no limit.
    pub limit: usize,
    /// Serve at this revision instead of the latest; 0 means latest.
    pub revision: Revision,
}

impl RangeRequest {
    pub fn prefix(prefix: impl Into<String>) -> Self {
        RangeRequest { prefix: prefix.into(), ..Default::default() }
    }
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
    pub fn at(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }
    pub fn start_after(mut self, key: impl Into<String>) -> Self {
        self.start_after = Some(key.into());
        self
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// More keys follow the last one returned.
    pub more: bool,
    /// How many keys the range held from its start (after `start_after`), including
    /// those returned; the API server derives `remainingItemCount` from it.
    pub count: i64,
    /// The revision the answer was served at.
    pub revision: Revision,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStatus {
    pub revision: Revision,
    pub compacted: Revision,
    /// Bytes the backend occupies on disk, when it can tell.
    pub db_size_bytes: Option<u64>,
}

/// The smallest key greater than every key that starts with `prefix`, or `None` when no
/// such key exists (empty prefix or all 0xff bytes): the exclusive end of a prefix range.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"/registry/pods/"), Some(b"/registry/pods0".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
