//! In-process watch: the writer publishes each committed batch into a ring of recent
//! events; watchers pull from it at their own pace.
//!
//! Every revision is exactly one event, so the ring is indexed by revision. A watcher
//! only keeps a cursor (the last revision it has seen); when it falls behind the ring it
//! catches up from the event log on disk. Nobody buffers on a slow watcher's behalf and
//! no event can be skipped or repeated.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::stream;
use parking_lot::RwLock;
use tokio::sync::watch as notify;

use super::Readers;
use super::queries;
use crate::{Event, Revision, StoreError, WatchEvent, WatchOptions, WatchStream, metrics};

/// Shortest gap between progress reports sent because the watch passed other keys' writes.
const PROGRESS_EAGER_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// Events read from disk per catch-up query.
const CATCH_UP_WINDOW: Revision = 1000;

pub(crate) struct Hub {
    ring: RwLock<Ring>,
    latest: notify::Sender<Revision>,
    closed: AtomicBool,
    max_events: usize,
    max_bytes: usize,
}

struct Ring {
    events: VecDeque<Arc<Event>>,
    /// Revision of `events[0]`; when empty, the revision the next event will have.
    first: Revision,
    bytes: usize,
}

fn event_bytes(e: &Event) -> usize {
    e.kv.key.len() + e.kv.value.len() + e.prev.as_ref().map_or(0, |p| p.value.len()) + 128
}

impl Hub {
    pub(crate) fn new(revision: Revision, max_events: usize, max_bytes: usize) -> Self {
        Hub {
            ring: RwLock::new(Ring { events: VecDeque::new(), first: revision + 1, bytes: 0 }),
            latest: notify::Sender::new(revision),
            closed: AtomicBool::new(false),
            max_events: max_events.max(1),
            max_bytes,
        }
    }

    /// Adds committed events (consecutive revisions) and wakes the watchers.
    pub(crate) fn publish(&self, events: Vec<Event>) {
        let Some(last) = events.last().map(Event::revision) else {
            return;
        };
        {
            let mut ring = self.ring.write();
            for e in events {
                debug_assert_eq!(e.revision(), ring.first + ring.events.len() as Revision);
                ring.bytes += event_bytes(&e);
                ring.events.push_back(Arc::new(e));
            }
            while ring.events.len() > self.max_events || (ring.bytes > self.max_bytes && ring.events.len() > 1) {
                if let Some(old) = ring.events.pop_front() {
                    ring.bytes -= event_bytes(&old);
                    ring.first += 1;
                }
            }
        }
        self.latest.send_replace(last);
    }

    /// The last published (hence committed) revision.
    pub(crate) fn latest_revision(&self) -> Revision {
        *self.latest.borrow()
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let last = *self.latest.borrow();
        self.latest.send_replace(last);
    }

    /// Ring events after `cursor` under `prefix`, and the revision they bring the cursor
    /// to; `None` when the ring no longer reaches back to `cursor`.
    fn read_ring(&self, prefix: &str, cursor: Revision) -> Option<(Vec<Event>, Revision)> {
        let ring = self.ring.read();
        if cursor + 1 < ring.first {
            return None;
        }
        let skip = (cursor + 1 - ring.first) as usize;
        let events =
            ring.events.iter().skip(skip).filter(|e| e.kv.key.starts_with(prefix)).map(|e| (**e).clone()).collect();
        Some((events, (ring.first + ring.events.len() as Revision - 1).max(cursor)))
    }

    fn oldest_in_ring(&self) -> Revision {
        self.ring.read().first
    }
}

struct Watcher {
    hub: Arc<Hub>,
    readers: Arc<Readers>,
    prefix: String,
    cursor: Revision,
    pending: VecDeque<Event>,
    latest: notify::Receiver<Revision>,
    opts: WatchOptions,
    last_sent: Instant,
    /// The cursor passed other keys' writes that no progress report has covered yet.
    unreported: bool,
    done: bool,
    _gauge: metrics::WatcherGauge,
}

impl Watcher {
    async fn next(&mut self) -> Option<Result<WatchEvent, StoreError>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(e) = self.pending.pop_front() {
                self.last_sent = Instant::now();
                self.unreported = false;
                return Some(Ok(WatchEvent::Event(e)));
            }
            let latest = *self.latest.borrow_and_update();
            if self.cursor < latest {
                let before = self.cursor;
                if let Err(e) = self.fill().await {
                    self.done = true;
                    return Some(Err(e));
                }
                // Passed only other keys' writes: say so at once, so a watch cache above
                // knows it is current (bounded: at most once per PROGRESS_EAGER_EVERY).
                if self.pending.is_empty() && self.cursor > before && self.opts.progress_interval.is_some() {
                    if self.last_sent.elapsed() >= PROGRESS_EAGER_EVERY {
                        self.last_sent = Instant::now();
                        self.unreported = false;
                        return Some(Ok(WatchEvent::Progress(self.cursor)));
                    }
                    // Too soon: report when the window ends (below).
                    self.unreported = true;
                }
                continue;
            }
            if self.hub.closed.load(Ordering::SeqCst) {
                self.done = true;
                return Some(Err(StoreError::Closed));
            }
            match self.opts.progress_interval {
                None => {
                    if self.latest.changed().await.is_err() {
                        self.done = true;
                        return Some(Err(StoreError::Closed));
                    }
                }
                Some(interval) => {
                    let wait = if self.unreported { PROGRESS_EAGER_EVERY } else { interval };
                    let deadline = self.last_sent + wait;
                    match tokio::time::timeout_at(deadline.into(), self.latest.changed()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => {
                            self.done = true;
                            return Some(Err(StoreError::Closed));
                        }
                        Err(_) => {
                            self.last_sent = Instant::now();
                            self.unreported = false;
                            return Some(Ok(WatchEvent::Progress(self.cursor)));
                        }
                    }
                }
            }
        }
    }

    /// Moves the cursor forward, from the ring or, when behind it, from disk.
    async fn fill(&mut self) -> Result<(), StoreError> {
        if let Some((events, cursor)) = self.hub.read_ring(&self.prefix, self.cursor) {
            self.pending.extend(events);
            self.cursor = cursor;
            return Ok(());
        }
        // Everything below the ring's start is committed, so the log on disk has it.
        let upto = (self.cursor + CATCH_UP_WINDOW).min(self.hub.oldest_in_ring() - 1);
        let (prefix, after) = (self.prefix.clone(), self.cursor);
        let events = self.readers.read(move |conn| queries::events(conn, &prefix, after, upto)).await?;
        self.pending.extend(events);
        self.cursor = upto;
        Ok(())
    }
}

pub(crate) fn watch(
    hub: Arc<Hub>,
    readers: Arc<Readers>,
    prefix: &str,
    after: Revision,
    opts: WatchOptions,
) -> WatchStream {
    let latest = hub.latest.subscribe();
    let watcher = Watcher {
        hub,
        readers,
        prefix: prefix.to_string(),
        cursor: after,
        pending: VecDeque::new(),
        latest,
        opts,
        last_sent: Instant::now(),
        unreported: false,
        done: false,
        _gauge: metrics::WatcherGauge::new("sqlite"),
    };
    Box::pin(stream::unfold(watcher, |mut w| async move { w.next().await.map(|item| (item, w)) }))
}
