//! The watch cache: one store watch per resource feeds an in-memory copy of the
//! resource and a ring of recent events; every API watch and every list that may be
//! served from memory (resourceVersion=0, NotOlderThan) reads from it. Ten thousand
//! watchers cost one store watch and one decode per change.
//!
//! Like the store's own hub, a watcher is a cursor into the ring, woken by a
//! notification: no per-watcher buffers. A watcher that falls behind the ring, or asks
//! for a revision older than it, gets 410 Expired and relists, as upstream's do.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::RwLock;
use serde_json::{Map, Value};
use tokio::sync::watch as notify;
use tokio::task::JoinHandle;

use krate_store::{DynStore, EventKind, RangeRequest, Revision, StoreError, WatchEvent, WatchOptions};

use crate::object;
use crate::strategy::{Strategy, field_value};

/// Events kept for watchers to resume from.
const RING_EVENTS: usize = 4096;
/// How often a quiet resource's cache learns that the store has moved on.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(2);
const RELIST_PAGE: usize = 1000;

/// One object as the cache holds it: its JSON (with resourceVersion) and what filters need.
#[derive(Debug)]
pub struct CachedObject {
    pub key: String,
    pub namespace: Option<String>,
    pub name: String,
    pub revision: Revision,
    pub json: Bytes,
    pub labels: Option<Map<String, Value>>,
    /// Values of the strategy's selectable fields, in its order.
    pub fields: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct CacheEvent {
    pub kind: EventType,
    pub revision: Revision,
    /// The object after the change; for a delete, its last state at the delete's revision.
    pub object: Arc<CachedObject>,
    pub prev: Option<Arc<CachedObject>>,
    /// The event as a JSON watch line, encoded once for every watcher that sees it as is
    /// (as upstream's cacher serializes an event once per encoding).
    line: std::sync::OnceLock<Bytes>,
}

impl CacheEvent {
    pub fn new(
        kind: EventType,
        revision: Revision,
        object: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
    ) -> Self {
        CacheEvent { kind, revision, object, prev, line: std::sync::OnceLock::new() }
    }

    /// `{"type":"…","object":…}\n` for this event's own type and stored JSON, shared.
    pub fn json_line(&self) -> Bytes {
        self.line.get_or_init(|| watch_line(self.kind.as_str(), &self.object.json)).clone()
    }
}

/// One line of a JSON watch stream.
pub fn watch_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

#[derive(Default)]
struct State {
    ready: bool,
    /// Everything up to this revision has been applied.
    revision: Revision,
    objects: BTreeMap<String, Arc<CachedObject>>,
    ring: VecDeque<Arc<CacheEvent>>,
    /// A watch may start after any revision >= floor.
    floor: Revision,
    /// Bumped when the cache relists: watchers of an older epoch must start over.
    epoch: u64,
}

impl State {
    /// The objects under `prefix`, in key order, at this state's revision.
    fn snapshot(&self, prefix: &str) -> Snapshot {
        let objects = self
            .objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, o)| o.clone())
            .collect();
        Snapshot { revision: self.revision, objects }
    }
}

pub struct Cacher {
    prefix: String,
    state: RwLock<State>,
    /// Bumped on events and resets: wakes API watchers.
    changed: notify::Sender<u64>,
    /// Bumped whenever the revision moves (events and progress): wakes readers waiting
    /// for the cache to catch up. Progress alone must not wake every watcher.
    progressed: notify::Sender<u64>,
    task: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

/// A consistent view for listing: objects and the revision they represent.
pub struct Snapshot {
    pub revision: Revision,
    pub objects: Vec<Arc<CachedObject>>,
}

/// Why a watcher cannot continue.
#[derive(Debug)]
pub enum CacheError {
    /// The revision is older than the cache can serve (410 Expired).
    TooOld { requested: Revision, oldest: Revision },
    /// The cache relisted under the watcher.
    Reset,
}

fn decode(key: &str, data: &[u8], rev: Revision, strategy: &dyn Strategy) -> Option<CachedObject> {
    let obj = match object::from_storage(data, rev) {
        Ok(obj) => obj,
        Err(e) => {
            tracing::error!(key, error = %e, "skipping undecodable object");
            return None;
        }
    };
    Some(cached_from_value(key, &obj, rev, strategy))
}

pub fn cached_from_value(key: &str, obj: &Value, rev: Revision, strategy: &dyn Strategy) -> CachedObject {
    CachedObject {
        key: key.to_string(),
        namespace: object::meta_str(obj, "namespace").map(String::from),
        name: object::name(obj).to_string(),
        revision: rev,
        json: Bytes::from(serde_json::to_vec(obj).unwrap_or_default()),
        labels: object::labels(obj).cloned(),
        fields: strategy.selectable_fields().iter().map(|(_, path)| field_value(obj, path)).collect(),
    }
}

impl Cacher {
    /// Starts filling the cache for `prefix` from the store.
    pub fn start(store: DynStore, prefix: String, strategy: Arc<dyn Strategy>) -> Arc<Cacher> {
        let cacher = Arc::new(Cacher {
            prefix: prefix.clone(),
            state: RwLock::new(State::default()),
            changed: notify::Sender::new(0),
            progressed: notify::Sender::new(0),
            task: parking_lot::Mutex::new(None),
        });
        let weak = Arc::downgrade(&cacher);
        let handle = tokio::spawn(async move {
            loop {
                let Some(c) = weak.upgrade() else { return };
                match c.run(&store, strategy.as_ref()).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(prefix = %c.prefix, error = %e, "watch cache feed ended; relisting");
                        drop(c);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        *cacher.task.lock() = Some(handle);
        cacher
    }

    /// Lists the prefix, then follows the store's watch until it fails.
    async fn run(&self, store: &DynStore, strategy: &dyn Strategy) -> Result<(), StoreError> {
        let mut objects = BTreeMap::new();
        let first = store.range(RangeRequest::prefix(self.prefix.clone()).limit(RELIST_PAGE)).await?;
        let revision = first.revision;
        let mut page = first;
        loop {
            for kv in &page.kvs {
                if let Some(o) = decode(&kv.key, &kv.value, kv.mod_revision, strategy) {
                    objects.insert(kv.key.clone(), Arc::new(o));
                }
            }
            let Some(last) = page.kvs.last().filter(|_| page.more).map(|kv| kv.key.clone()) else { break };
            page = store
                .range(RangeRequest::prefix(self.prefix.clone()).limit(RELIST_PAGE).at(revision).start_after(last))
                .await?;
        }
        {
            let mut s = self.state.write();
            let epoch = s.epoch + 1;
            *s = State { ready: true, revision, objects, ring: VecDeque::new(), floor: revision, epoch };
        }
        self.changed.send_modify(|v| *v += 1);
        self.progressed.send_modify(|v| *v += 1);
        tracing::debug!(prefix = %self.prefix, revision, "watch cache ready");

        let opts = WatchOptions { progress_interval: Some(PROGRESS_INTERVAL) };
        let mut watch = store.watch(&self.prefix, revision, opts).await?;
        while let Some(item) = watch.next().await {
            match item? {
                WatchEvent::Event(e) => {
                    let rev = e.revision();
                    let event = match e.kind {
                        EventKind::Put => {
                            let Some(obj) = decode(&e.kv.key, &e.kv.value, rev, strategy) else { continue };
                            let prev = self.state.read().objects.get(&e.kv.key).cloned();
                            let kind = if prev.is_some() { EventType::Modified } else { EventType::Added };
                            CacheEvent::new(kind, rev, Arc::new(obj), prev)
                        }
                        EventKind::Delete => {
                            let prev = self.state.read().objects.get(&e.kv.key).cloned();
                            let last = match (&prev, &e.prev) {
                                (_, Some(p)) => decode(&p.key, &p.value, rev, strategy),
                                (Some(p), None) => Some(Self::restamp(p, rev)),
                                (None, None) => None,
                            };
                            let Some(last) = last else { continue };
                            CacheEvent::new(EventType::Deleted, rev, Arc::new(last), prev)
                        }
                    };
                    self.apply(event);
                }
                WatchEvent::Progress(rev) => {
                    let mut s = self.state.write();
                    if rev > s.revision {
                        s.revision = rev;
                    }
                    drop(s);
                    self.progressed.send_modify(|v| *v += 1);
                }
            }
        }
        Err(StoreError::Closed)
    }

    /// A copy of a cached object with another resourceVersion.
    fn restamp(o: &CachedObject, rev: Revision) -> CachedObject {
        let mut v: Value = serde_json::from_slice(&o.json).unwrap_or(Value::Null);
        object::set_resource_version(&mut v, rev);
        CachedObject {
            key: o.key.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
            revision: rev,
            json: Bytes::from(serde_json::to_vec(&v).unwrap_or_default()),
            labels: o.labels.clone(),
            fields: o.fields.clone(),
        }
    }

    fn apply(&self, event: CacheEvent) {
        let mut s = self.state.write();
        match event.kind {
            EventType::Deleted => {
                s.objects.remove(&event.object.key);
            }
            _ => {
                s.objects.insert(event.object.key.clone(), event.object.clone());
            }
        }
        s.revision = event.revision;
        s.ring.push_back(Arc::new(event));
        while s.ring.len() > RING_EVENTS {
            if let Some(old) = s.ring.pop_front() {
                s.floor = old.revision;
            }
        }
        drop(s);
        self.changed.send_modify(|v| *v += 1);
        self.progressed.send_modify(|v| *v += 1);
    }

    /// Waits (bounded) until the cache has been filled.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let mut rx = self.progressed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.state.read().ready {
                return true;
            }
            if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
                return false;
            }
        }
    }

    /// Waits (bounded) until the cache has seen `revision`.
    pub async fn wait_for(&self, revision: Revision, timeout: Duration) -> bool {
        let mut rx = self.progressed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            {
                let s = self.state.read();
                if s.ready && s.revision >= revision {
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
                return false;
            }
        }
    }

    pub fn revision(&self) -> Revision {
        self.state.read().revision
    }

    /// One object by key, with the revision the cache is current to; None until filled.
    pub fn object(&self, key: &str) -> Option<(Revision, Option<Arc<CachedObject>>)> {
        let s = self.state.read();
        s.ready.then(|| (s.revision, s.objects.get(key).cloned()))
    }

    /// The objects under `prefix` (a namespace's, or all) at the cache's revision.
    pub fn snapshot(&self, prefix: &str) -> Snapshot {
        self.state.read().snapshot(prefix)
    }

    /// Starts a cursor after `after`, or fails if the ring does not reach back that far.
    pub fn cursor(&self, after: Revision) -> Result<Cursor, CacheError> {
        let s = self.state.read();
        if after < s.floor {
            return Err(CacheError::TooOld { requested: after, oldest: s.floor });
        }
        Ok(Cursor { after, epoch: s.epoch, changed: self.changed.subscribe() })
    }

    /// A snapshot and a cursor positioned right after it, taken atomically.
    pub fn snapshot_and_cursor(&self, prefix: &str) -> (Snapshot, Cursor) {
        let s = self.state.read();
        let cursor = Cursor { after: s.revision, epoch: s.epoch, changed: self.changed.subscribe() };
        (s.snapshot(prefix), cursor)
    }

    /// Events after the cursor (advancing it), or an error if it fell behind.
    pub fn next_events(&self, cursor: &mut Cursor) -> Result<(Vec<Arc<CacheEvent>>, Revision), CacheError> {
        let s = self.state.read();
        if s.epoch != cursor.epoch {
            return Err(CacheError::Reset);
        }
        if cursor.after < s.floor {
            return Err(CacheError::TooOld { requested: cursor.after, oldest: s.floor });
        }
        let start = s.ring.partition_point(|e| e.revision <= cursor.after);
        let events: Vec<_> = s.ring.iter().skip(start).cloned().collect();
        cursor.after = cursor.after.max(s.revision);
        Ok((events, s.revision))
    }
}

impl Drop for Cacher {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().take() {
            t.abort();
        }
    }
}

/// A watcher's position in the cache.
pub struct Cursor {
    pub after: Revision,
    epoch: u64,
    changed: notify::Receiver<u64>,
}

impl Cursor {
    /// Waits until the cache changes; false once the cache is gone.
    pub async fn changed(&mut self) -> bool {
        self.changed.changed().await.is_ok()
    }
}
