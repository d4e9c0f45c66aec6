//! krate's storage layer: a revisioned key-value store with etcd v3 semantics.
//!
//! Everything the API server promises about `resourceVersion`, optimistic concurrency
//! and watch rests on the [`Store`] trait: one cluster-wide revision bumped by every
//! write, compare-and-swap on a key's `mod_revision`, ranges at a fixed revision with
//! paging, gap-free ordered watches with resumption, compaction and leases.
//!
//! Two backends implement it: [`sqlite::SqliteStore`] (embedded, the default) and
//! [`etcd::EtcdStore`] (for large or highly available control planes). The behaviour
//! suite in [`testsuite`] runs unchanged against both.

mod compactor;
mod error;
pub mod etcd;
pub mod metrics;
pub mod sqlite;
mod types;

#[cfg(feature = "testsuite")]
pub mod testsuite;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

pub use compactor::{Compactor, CompactorConfig};
pub use error::{Result, StoreError};
pub use types::*;

/// A revisioned key-value store with etcd v3 semantics.
///
/// Every mutating call returns only once the write is durable. Keys are UTF-8 strings
/// ordered bytewise, as in etcd. A write that fails with [`StoreError::Backend`] has an
/// unknown outcome (the backend may have applied it before failing); every other error
/// means nothing was written.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A short name for logs and metrics ("sqlite", "etcd").
    fn backend_name(&self) -> &'static str;

    /// The latest revision.
    async fn current_revision(&self) -> Result<Revision>;

    /// The latest acknowledged revision, when the backend knows it without I/O: every
    /// write acknowledged to anyone has a revision at or below it. Lets the API server
    /// check that its watch cache is current before answering from it. None: ask
    /// [`Store::current_revision`].
    fn revision_hint(&self) -> Option<Revision> {
        None
    }

    /// Revision, compaction point and size.
    async fn status(&self) -> Result<StoreStatus>;

    /// One key at the latest revision or at `revision` (0 = latest). Returns the key, if
    /// present, and the revision the answer was served at.
    async fn get(&self, key: &str, revision: Revision) -> Result<(Option<KeyValue>, Revision)>;

    /// Keys with a prefix, in key order, optionally paged and at a fixed revision.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// Creates `key` if it does not exist; `AlreadyExists` otherwise. Returns the new revision.
    async fn create(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<Revision>;

    /// Replaces `key` if its mod_revision is `expected`; `Conflict` (with the current
    /// value) if not, `NotFound` if the key is absent. Returns the new revision.
    async fn update(&self, key: &str, value: Bytes, expected: Revision, lease: LeaseId) -> Result<Revision>;

    /// Deletes `key`, if `expected` is given only when its mod_revision matches. Returns
    /// the revision of the delete and the value deleted.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(Revision, KeyValue)>;

    /// Watches every key with `prefix` for changes with a revision greater than `after`.
    ///
    /// Events arrive in revision order with no gaps and no duplicates. With a progress
    /// interval set, a backend may also report progress sooner (SQLite does so whenever
    /// the watch has passed other keys' writes). If `after` is older
    /// than what compaction kept, the watch fails with [`StoreError::Compacted`], either
    /// from this call or as the stream's first item. Any error ends the stream.
    async fn watch(&self, prefix: &str, after: Revision, opts: WatchOptions) -> Result<WatchStream>;

    /// Discards history before `revision`: reads and watches at older revisions fail with
    /// `Compacted` from now on. The space is reclaimed in the background in small steps.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// Grants a lease that expires after `ttl_seconds` unless kept alive. Keys written
    /// with the lease are deleted when it expires or is revoked.
    async fn grant_lease(&self, ttl_seconds: i64) -> Result<LeaseId>;

    /// Renews a lease for its full TTL; returns that TTL.
    async fn keep_alive(&self, lease: LeaseId) -> Result<i64>;

    /// Revokes a lease now, deleting its keys.
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()>;

    /// Whether the value of `key` stored at `mod_revision` should be written again even
    /// when the object is unchanged: a layer that transforms values (encryption at rest)
    /// says so when the stored form is stale, e.g. encrypted with a key that no longer
    /// writes. Plain backends never are.
    async fn is_stale(&self, _key: &str, _mod_revision: Revision) -> Result<bool> {
        Ok(false)
    }
}

pub type DynStore = Arc<dyn Store>;
