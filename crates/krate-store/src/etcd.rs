//! The etcd v3 backend.
//!
//! Every [`Store`] operation maps onto one etcd request (a transaction for the
//! compare-and-swap writes), so etcd provides durability, linearizability and the
//! revision counter; this module only translates requests, responses and errors.
//!
//! Two things etcd 3.4 does not give us directly:
//!
//! * The compacted revision. We learn it from etcd itself when we need it (see
//!   [`EtcdStore::learn_compacted`]): a watch started at a compacted revision is
//!   cancelled with the compaction point.
//! * Safe progress notifications. Before 3.4.25 / 3.5.8 etcd answers a progress request
//!   with the store revision even while events below it are still queued for the watcher
//!   (etcd-io/etcd#15220). The watch stream therefore confirms a progress revision with a
//!   second request before reporting it (see [`WatchState::on_progress`]).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client as etcd;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use futures::StreamExt;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::metrics::{self, Timer, WatcherGauge};
use crate::{
    Event, EventKind, KeyValue, LeaseId, RangeRequest, RangeResponse, Result, Revision, Store, StoreError, StoreStatus,
    WatchEvent, WatchOptions, WatchStream, prefix_end,
};

const BACKEND: &str = "etcd";

/// Largest response we accept, as kube-apiserver does: a full list can be big.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// How long [`EtcdStore::learn_compacted`] waits for etcd to report its compaction point.
const COMPACTION_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A key no one writes; compaction probes watch it. Its events, if any, are ignored.
const PROBE_KEY: &[u8] = b"\0krate/compaction-probe";

/// Delay between a progress response and the request that confirms it. Longer than
/// etcd's 100 ms loop that catches up lagging watchers, so that a watcher still catching
/// up delivers events (and so voids the candidate) before the confirmation arrives.
const PROGRESS_CONFIRM_DELAY: Duration = Duration::from_millis(200);

const MIN_PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// gRPC status codes we look at (tonic's `Code` as `i32`).
const GRPC_RESOURCE_EXHAUSTED: i32 = 8;
const GRPC_UNAVAILABLE: i32 = 14;

/// Connection settings for [`EtcdStore`].
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Timeout for establishing a connection to a member.
    pub dial_timeout: Duration,
    /// Upper bound for one operation, retries included.
    pub request_timeout: Duration,
    /// Upper bound for a compaction, which etcd applies in batches and can take a while.
    pub compact_timeout: Duration,
    /// HTTP/2 keep-alive ping interval and timeout: how watches notice a dead connection.
    pub keep_alive_interval: Duration,
    pub keep_alive_timeout: Duration,
}

impl EtcdConfig {
    pub fn new(endpoints: &[String]) -> Self {
        EtcdConfig {
            endpoints: endpoints.to_vec(),
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(15),
            compact_timeout: Duration::from_secs(120),
            // kube-apiserver's defaults.
            keep_alive_interval: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(10),
        }
    }
}

/// The [`Store`] backed by an etcd v3 cluster.
///
/// Reads are retried on transient failures (no leader, a member down) for up to the
/// request timeout; writes only when the failure proves etcd never saw them, since a
/// repeated compare-and-swap could report a conflict with its own first attempt.
pub struct EtcdStore {
    kv: etcd::KvClient,
    watch: etcd::WatchClient,
    lease: etcd::LeaseClient,
    maintenance: etcd::MaintenanceClient,
    config: EtcdConfig,
    /// Highest revision this client compacted to: a fallback when etcd cannot tell.
    compacted: AtomicI64,
}

impl EtcdStore {
    /// Connects with default settings (see [`EtcdStore::connect_with`]).
    pub async fn connect(endpoints: &[String]) -> Result<EtcdStore> {
        Self::connect_with(EtcdConfig::new(endpoints)).await
    }

    /// Connects and checks that the cluster answers a linearizable read within the dial
    /// timeout; `Backend` otherwise.
    pub async fn connect_with(config: EtcdConfig) -> Result<EtcdStore> {
        if config.endpoints.is_empty() {
            return Err(StoreError::InvalidRequest("no etcd endpoints given".into()));
        }
        let options = etcd::ConnectOptions::new()
            .with_connect_timeout(config.dial_timeout)
            .with_keep_alive(config.keep_alive_interval, config.keep_alive_timeout)
            // Like kube-apiserver: a member cut off from the leader fails requests (and
            // cancels watches) instead of serving stale data.
            .with_require_leader(true);
        // No per-request timeout in the channel: it would also cut long-lived watches.
        let client = etcd::Client::connect(&config.endpoints, Some(options))
            .await
            .map_err(|e| StoreError::Backend(format!("etcd connect to {:?}: {e}", config.endpoints)))?;
        let store = EtcdStore {
            kv: client.kv_client().max_decoding_message_size(MAX_RESPONSE_BYTES),
            watch: client.watch_client().max_decoding_message_size(MAX_RESPONSE_BYTES),
            lease: client.lease_client(),
            maintenance: client.maintenance_client(),
            config,
            compacted: AtomicI64::new(0),
        };
        // The client connects lazily; make a bad address or a dead cluster fail here.
        store.latest_revision(store.config.dial_timeout).await?;
        Ok(store)
    }

    /// Runs `op` against a clone of `client`, retrying transient failures with backoff
    /// until `limit` has passed. `retry` says which failures are safe to repeat.
    async fn call<C, T, F, Fut>(&self, client: &C, retry: Retry, limit: Duration, mut op: F) -> Result<T, CallError>
    where
        C: Clone,
        F: FnMut(C) -> Fut,
        Fut: Future<Output = Result<T, etcd::Error>>,
    {
        let deadline = Instant::now() + limit;
        let mut backoff = Duration::from_millis(20);
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let err = match timeout(remaining, op(client.clone())).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) => e,
                Err(_) => return Err(CallError::TimedOut(limit)),
            };
            if !retry.allows(&classify(&err)) || Instant::now() + backoff >= deadline {
                return Err(CallError::Etcd(err));
            }
            tracing::debug!(error = %err, "etcd request failed, retrying");
            sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Turns a failed call into a [`StoreError`]. `revision` and `lease` are what the
    /// request asked for, reported back in `Compacted`, `FutureRevision` and `LeaseNotFound`.
    async fn fail(&self, op: &str, err: CallError, revision: Revision, lease: LeaseId) -> StoreError {
        let CallError::Etcd(err) = err else {
            return backend_error(op, err);
        };
        match classify(&err) {
            Failure::Compacted => StoreError::Compacted {
                requested: revision,
                compacted: self.learn_compacted(revision).await.unwrap_or(0),
            },
            Failure::FutureRevision => StoreError::FutureRevision {
                requested: revision,
                current: self.latest_revision(self.config.request_timeout).await.unwrap_or(0),
            },
            Failure::LeaseNotFound => StoreError::LeaseNotFound(lease),
            Failure::NotSent | Failure::Unavailable | Failure::Other => {
                StoreError::Backend(format!("etcd {op}: {err}"))
            }
        }
    }

    /// The latest revision, by a linearizable single-key read, retried for up to `limit`.
    async fn latest_revision(&self, limit: Duration) -> Result<Revision> {
        let resp = self
            .call(&self.kv, Retry::Reads, limit, |mut kv| async move {
                kv.get(PROBE_KEY, Some(GetOptions::new().with_count_only())).await
            })
            .await;
        match resp {
            Ok(resp) => Ok(header_revision(resp.header())),
            // A read of the latest revision fails with nothing more specific than this.
            Err(e) => Err(backend_error("current revision", e)),
        }
    }

    /// The compaction point, learned from etcd, for a revision `below` it.
    ///
    /// etcd 3.4 has no API for the compacted revision, but a watch that starts below it is
    /// cancelled with `compact_revision` set to it. Falls back to the highest compaction
    /// this client made when etcd does not answer in time (say, a member that has not
    /// applied the compaction yet); `None` if neither is known.
    async fn learn_compacted(&self, below: Revision) -> Option<Revision> {
        let probe = async {
            let options = etcd::WatchOptions::new().with_start_revision(below.max(1));
            let mut stream = self.watch.clone().watch(PROBE_KEY, Some(options)).await.ok()?;
            while let Some(resp) = stream.next().await {
                let resp = resp.ok()?;
                if resp.compact_revision() > 0 {
                    return Some(resp.compact_revision());
                }
                if resp.canceled() {
                    return None;
                }
            }
            None
        };
        match timeout(COMPACTION_PROBE_TIMEOUT, probe).await {
            Ok(Some(rev)) => {
                self.compacted.fetch_max(rev, Ordering::Relaxed);
                Some(rev)
            }
            _ => Some(self.compacted.load(Ordering::Relaxed)).filter(|&rev| rev > below),
        }
    }

    /// Runs a write transaction (no retries once it may have reached etcd).
    async fn txn(&self, op: &str, txn: Txn, lease: LeaseId) -> Result<etcd::TxnResponse> {
        let resp = self
            .call(&self.kv, Retry::Writes, self.config.request_timeout, |mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await;
        match resp {
            Ok(resp) => Ok(resp),
            Err(e) => Err(self.fail(op, e, 0, lease).await),
        }
    }
}

#[async_trait]
impl Store for EtcdStore {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    async fn current_revision(&self) -> Result<Revision> {
        let _timer = Timer::new(BACKEND, "current_revision");
        self.latest_revision(self.config.request_timeout).await
    }

    /// `compacted` is 0 until etcd has compacted history, then learned from etcd (see
    /// [`EtcdStore::learn_compacted`]), so it is right whichever client compacted.
    /// `db_size_bytes` is the size of whichever member answered (all hold the same data).
    async fn status(&self) -> Result<StoreStatus> {
        let _timer = Timer::new(BACKEND, "status");
        let revision = self.latest_revision(self.config.request_timeout).await?;
        let status = self
            .call(&self.maintenance, Retry::Reads, self.config.request_timeout, |mut m| async move { m.status().await })
            .await;
        let db_size = match status {
            Ok(status) => u64::try_from(status.db_size()).ok(),
            Err(e) => return Err(self.fail("status", e, 0, 0).await),
        };
        // Reading at revision 1 fails exactly when something was compacted; only then is
        // there a compaction point to learn.
        let probe = self
            .call(&self.kv, Retry::Reads, self.config.request_timeout, |mut kv| async move {
                kv.get(PROBE_KEY, Some(GetOptions::new().with_revision(1).with_count_only())).await
            })
            .await;
        let compacted = match probe {
            Ok(_) => 0,
            Err(CallError::Etcd(e)) if matches!(classify(&e), Failure::Compacted) => {
                self.learn_compacted(1).await.unwrap_or(0)
            }
            Err(e) => return Err(self.fail("status", e, 0, 0).await),
        };
        Ok(StoreStatus { revision, compacted, db_size_bytes: db_size })
    }

    async fn get(&self, key: &str, revision: Revision) -> Result<(Option<KeyValue>, Revision)> {
        let _timer = Timer::new(BACKEND, "get");
        let resp = self
            .call(&self.kv, Retry::Reads, self.config.request_timeout, |mut kv| async move {
                kv.get(key, Some(GetOptions::new().with_revision(revision))).await
            })
            .await;
        let mut resp = match resp {
            Ok(resp) => resp,
            Err(e) => return Err(self.fail("get", e, revision, 0).await),
        };
        let served = served_at(revision, resp.header());
        let kv = resp.take_kvs().into_iter().next().map(convert_kv).transpose()?;
        Ok((kv, served))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let _timer = Timer::new(BACKEND, "range");
        let (mut start, end) = prefix_range(&req.prefix);
        if let Some(after) = &req.start_after {
            // The smallest key greater than `after`.
            let mut next = after.as_bytes().to_vec();
            next.push(0);
            start = start.max(next);
        }
        let limit = i64::try_from(req.limit).unwrap_or(i64::MAX);
        let options = GetOptions::new().with_range(end).with_limit(limit).with_revision(req.revision);
        let resp = self
            .call(&self.kv, Retry::Reads, self.config.request_timeout, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await;
        let mut resp = match resp {
            Ok(resp) => resp,
            Err(e) => return Err(self.fail("range", e, req.revision, 0).await),
        };
        let revision = served_at(req.revision, resp.header());
        let (more, count) = (resp.more(), resp.count());
        let kvs = resp.take_kvs().into_iter().map(convert_kv).collect::<Result<Vec<_>>>()?;
        Ok(RangeResponse { kvs, more, count, revision })
    }

    async fn create(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<Revision> {
        let _timer = Timer::new(BACKEND, "create");
        let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, 0)]).and_then([TxnOp::put(
            key,
            value.to_vec(),
            Some(PutOptions::new().with_lease(lease)),
        )]);
        let resp = self.txn("create", txn, lease).await?;
        if !resp.succeeded() {
            return Err(StoreError::AlreadyExists(key.to_string()));
        }
        Ok(wrote(resp.header()))
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision, lease: LeaseId) -> Result<Revision> {
        let _timer = Timer::new(BACKEND, "update");
        // `version > 0` keeps an update from creating an absent key when `expected` is 0.
        let txn = Txn::new()
            .when([
                Compare::version(key, CompareOp::Greater, 0),
                Compare::mod_revision(key, CompareOp::Equal, expected),
            ])
            .and_then([TxnOp::put(key, value.to_vec(), Some(PutOptions::new().with_lease(lease)))])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.txn("update", txn, lease).await?;
        if !resp.succeeded() {
            return Err(mismatch(key, expected, &resp));
        }
        Ok(wrote(resp.header()))
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(Revision, KeyValue)> {
        let _timer = Timer::new(BACKEND, "delete");
        let mut compares = vec![Compare::version(key, CompareOp::Greater, 0)];
        if let Some(expected) = expected {
            compares.push(Compare::mod_revision(key, CompareOp::Equal, expected));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::delete(key, Some(etcd::DeleteOptions::new().with_prev_key()))])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.txn("delete", txn, 0).await?;
        if !resp.succeeded() {
            return Err(mismatch(key, expected.unwrap_or(0), &resp));
        }
        let revision = wrote(resp.header());
        let prev = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Delete(mut del) => del.take_prev_kvs().into_iter().next(),
            _ => None,
        });
        match prev {
            Some(kv) => Ok((revision, convert_kv(kv)?)),
            None => Err(StoreError::NotFound(key.to_string())),
        }
    }

    async fn watch(&self, prefix: &str, after: Revision, opts: WatchOptions) -> Result<WatchStream> {
        let _timer = Timer::new(BACKEND, "watch");
        let (key, end) = prefix_range(prefix);
        let requested = after.saturating_add(1);
        let options = etcd::WatchOptions::new().with_range(end).with_start_revision(requested).with_prev_key();
        let stream = self
            .call(&self.watch, Retry::Reads, self.config.request_timeout, |mut w| {
                let (key, options) = (key.clone(), options.clone());
                async move { w.watch(key, Some(options)).await }
            })
            .await;
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => return Err(self.fail("watch", e, requested, 0).await),
        };
        let state = WatchState {
            inner: stream,
            requested,
            delivered: after,
            reported: 0,
            pending: VecDeque::new(),
            error: None,
            progress: opts.progress_interval.map(|interval| Progress {
                // A floor, so that a zero interval does not flood etcd with requests.
                interval: interval.max(MIN_PROGRESS_INTERVAL),
                next_request: Instant::now() + interval,
                candidate: None,
            }),
            done: false,
            _gauge: WatcherGauge::new(BACKEND),
        };
        // Polled by the consumer only: dropping the stream drops the etcd watch stream,
        // which cancels the watch on the server. No task is left behind.
        Ok(Box::pin(futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        })))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let _timer = Timer::new(BACKEND, "compact");
        // Physical: return once the member has removed the history, as the trait promises
        // that older reads fail from now on.
        let resp = self
            .call(&self.kv, Retry::Writes, self.config.compact_timeout, |mut kv| async move {
                kv.compact(revision, Some(etcd::CompactionOptions::new().with_physical())).await
            })
            .await;
        match resp {
            Ok(_) => {
                self.compacted.fetch_max(revision, Ordering::Relaxed);
                Ok(())
            }
            Err(CallError::Etcd(e)) if matches!(classify(&e), Failure::Compacted) => {
                // etcd also refuses `revision == compaction point`; a probe from just below
                // it sees that point too.
                let compacted = self.learn_compacted(revision - 1).await.unwrap_or(revision);
                Err(StoreError::Compacted { requested: revision, compacted })
            }
            Err(e) => Err(self.fail("compact", e, revision, 0).await),
        }
    }

    async fn grant_lease(&self, ttl_seconds: i64) -> Result<LeaseId> {
        let _timer = Timer::new(BACKEND, "grant_lease");
        // Retried only when it cannot have reached etcd: a retry would grant twice.
        let resp = self
            .call(&self.lease, Retry::Writes, self.config.request_timeout, |mut l| async move {
                l.grant(ttl_seconds, None).await
            })
            .await;
        match resp {
            Ok(resp) if !resp.error().is_empty() => {
                Err(StoreError::Backend(format!("etcd grant lease: {}", resp.error())))
            }
            Ok(resp) => Ok(resp.id()),
            Err(e) => Err(self.fail("grant lease", e, 0, 0).await),
        }
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<i64> {
        let _timer = Timer::new(BACKEND, "keep_alive");
        let resp = self
            .call(&self.lease, Retry::Reads, self.config.request_timeout, |mut l| async move {
                // The client reads the first response itself and only checks that the lease
                // exists; one more keep-alive on the same stream reports the TTL.
                let (mut keeper, mut responses) = l.keep_alive(lease).await?;
                keeper.keep_alive().await?;
                responses.message().await
            })
            .await;
        match resp {
            Ok(Some(resp)) if resp.ttl() > 0 => Ok(resp.ttl()),
            Ok(Some(_)) => Err(StoreError::LeaseNotFound(lease)),
            Ok(None) => Err(StoreError::Backend("etcd keep-alive: stream closed".into())),
            Err(e) => Err(self.fail("keep-alive", e, 0, lease).await),
        }
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        let _timer = Timer::new(BACKEND, "revoke_lease");
        // Retried only when it cannot have reached etcd: a repeated revoke would report
        // LeaseNotFound for a revoke that worked.
        let resp = self
            .call(&self.lease, Retry::Writes, self.config.request_timeout, |mut l| async move { l.revoke(lease).await })
            .await;
        match resp {
            Ok(resp) => {
                metrics::REVISION.with_label_values(&[BACKEND]).set(header_revision(resp.header()));
                Ok(())
            }
            Err(e) => Err(self.fail("revoke lease", e, 0, lease).await),
        }
    }
}

/// One watch, driven by its consumer (see [`EtcdStore::watch`]).
struct WatchState {
    inner: etcd::WatchStream,
    /// The first revision asked for (`after + 1`).
    requested: Revision,
    /// Every event up to this revision has been handed out.
    delivered: Revision,
    /// The last `Progress` handed out.
    reported: Revision,
    pending: VecDeque<WatchEvent>,
    /// An error to hand out once `pending` is drained; it ends the stream.
    error: Option<StoreError>,
    progress: Option<Progress>,
    done: bool,
    _gauge: WatcherGauge,
}

/// Progress requests for a quiet watch.
///
/// A progress revision is reported only once a second progress response arrived with no
/// event in between: etcd before 3.4.25 may answer the first one ahead of events still
/// queued for this watcher (etcd-io/etcd#15220), which would then arrive in between.
struct Progress {
    interval: Duration,
    next_request: Instant,
    /// Revision from a first progress response, awaiting confirmation.
    candidate: Option<Revision>,
}

enum Step {
    Message(Option<Result<etcd::WatchResponse, etcd::Error>>),
    RequestProgress,
}

impl WatchState {
    async fn next(&mut self) -> Option<Result<WatchEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if let Some(err) = self.error.take() {
                return self.finish(err);
            }
            if self.done {
                return None;
            }
            let step = match &self.progress {
                None => Step::Message(self.inner.next().await),
                Some(progress) => {
                    let deadline = progress.next_request;
                    tokio::select! {
                        message = self.inner.next() => Step::Message(message),
                        () = sleep_until(deadline) => Step::RequestProgress,
                    }
                }
            };
            let resp = match step {
                Step::RequestProgress => {
                    if let Some(progress) = &mut self.progress {
                        // Ask again after a full interval if this one goes unanswered
                        // (newer etcd stays silent while the watcher is catching up).
                        progress.next_request = Instant::now() + progress.interval;
                    }
                    if let Err(e) = self.inner.request_progress().await {
                        return self.finish(StoreError::Backend(format!("etcd watch progress request: {e}")));
                    }
                    continue;
                }
                Step::Message(None) => return self.finish(StoreError::Backend("etcd closed the watch stream".into())),
                Step::Message(Some(Err(e))) => return self.finish(StoreError::Backend(format!("etcd watch: {e}"))),
                Step::Message(Some(Ok(resp))) => resp,
            };
            if resp.compact_revision() > 0 {
                let compacted = resp.compact_revision();
                return self.finish(StoreError::Compacted { requested: self.requested, compacted });
            }
            if resp.canceled() {
                let reason = resp.cancel_reason();
                return self.finish(StoreError::Backend(format!("etcd cancelled the watch: {reason}")));
            }
            if resp.created() {
                continue;
            }
            if resp.events().is_empty() {
                self.on_progress(header_revision(resp.header()));
                continue;
            }
            for event in resp.events() {
                match convert_event(event) {
                    Ok(event) => {
                        self.delivered = event.revision();
                        self.pending.push_back(WatchEvent::Event(event));
                    }
                    Err(e) => {
                        // Hand out what came before the bad event, then the error.
                        self.error = Some(e);
                        break;
                    }
                }
            }
            if let Some(progress) = &mut self.progress {
                // Events void a pending candidate: it may have been sent ahead of them.
                progress.candidate = None;
                progress.next_request = Instant::now() + progress.interval;
            }
        }
    }

    /// A header-only response: etcd's answer to a progress request.
    fn on_progress(&mut self, revision: Revision) {
        let Some(progress) = &mut self.progress else {
            return; // Not asked for.
        };
        match progress.candidate.take() {
            None => {
                progress.candidate = Some(revision);
                progress.next_request = Instant::now() + PROGRESS_CONFIRM_DELAY;
            }
            Some(candidate) => {
                if candidate >= self.delivered && candidate >= self.reported {
                    self.reported = candidate;
                    self.pending.push_back(WatchEvent::Progress(candidate));
                }
                progress.next_request = Instant::now() + progress.interval;
            }
        }
    }

    fn finish(&mut self, err: StoreError) -> Option<Result<WatchEvent>> {
        self.done = true;
        Some(Err(err))
    }
}

/// Which failed calls [`EtcdStore::call`] repeats.
#[derive(Clone, Copy)]
enum Retry {
    /// Reads and other idempotent calls: anything transient.
    Reads,
    /// Writes: only failures that prove the request never reached etcd.
    Writes,
}

impl Retry {
    fn allows(self, failure: &Failure) -> bool {
        match failure {
            Failure::NotSent => true,
            Failure::Unavailable => matches!(self, Retry::Reads),
            _ => false,
        }
    }
}

enum CallError {
    Etcd(etcd::Error),
    TimedOut(Duration),
}

enum Failure {
    Compacted,
    FutureRevision,
    LeaseNotFound,
    /// The request did not reach etcd (no connection, or refused before processing).
    NotSent,
    /// Transient, but the request may have been applied.
    Unavailable,
    Other,
}

fn classify(err: &etcd::Error) -> Failure {
    match err {
        etcd::Error::GRpcStatus(status) => {
            let message = status.message();
            let code = i32::from(status.code());
            if message.contains("required revision has been compacted") {
                Failure::Compacted
            } else if message.contains("required revision is a future revision") {
                Failure::FutureRevision
            } else if message.contains("requested lease not found") {
                Failure::LeaseNotFound
            } else if is_connect_error(message)
                // Both rejected before etcd processes the request.
                || message.contains("etcdserver: no leader")
                || code == GRPC_RESOURCE_EXHAUSTED && message.contains("too many requests")
            {
                Failure::NotSent
            } else if code == GRPC_UNAVAILABLE || message.contains("transport error") {
                // Also a connection that broke under the request (tonic reports those
                // as "Unknown: transport error").
                Failure::Unavailable
            } else {
                Failure::Other
            }
        }
        etcd::Error::LeaseKeepAliveError(message) if message.contains("lease not found") => Failure::LeaseNotFound,
        etcd::Error::TransportError(e) if is_connect_error(&e.to_string()) => Failure::NotSent,
        etcd::Error::TransportError(_) | etcd::Error::IoError(_) => Failure::Unavailable,
        _ => Failure::Other,
    }
}

fn backend_error(op: &str, err: CallError) -> StoreError {
    match err {
        CallError::Etcd(e) => StoreError::Backend(format!("etcd {op}: {e}")),
        CallError::TimedOut(limit) => StoreError::Backend(format!("etcd {op}: timed out after {limit:?}")),
    }
}

/// Errors of establishing a connection: the request was never sent.
fn is_connect_error(message: &str) -> bool {
    ["error trying to connect", "tcp connect error", "Connection refused", "Service was not ready"]
        .iter()
        .any(|needle| message.contains(needle))
}

/// The `[start, end)` etcd range of all keys with `prefix`. etcd needs a non-empty start
/// key and takes `"\0"` as end for "no upper bound".
fn prefix_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let start = if prefix.is_empty() { vec![0] } else { prefix.as_bytes().to_vec() };
    let end = prefix_end(prefix.as_bytes()).unwrap_or_else(|| vec![0]);
    (start, end)
}

fn header_revision(header: Option<&etcd::ResponseHeader>) -> Revision {
    header.map(|h| h.revision()).unwrap_or(0)
}

/// The revision a read was served at: the one asked for, else the header's (latest).
fn served_at(requested: Revision, header: Option<&etcd::ResponseHeader>) -> Revision {
    if requested > 0 { requested } else { header_revision(header) }
}

/// The revision of a successful write, recorded in the metrics.
fn wrote(header: Option<&etcd::ResponseHeader>) -> Revision {
    let revision = header_revision(header);
    metrics::REVISION.with_label_values(&[BACKEND]).set(revision);
    revision
}

/// The error for a failed compare-and-swap, from the `get` in the transaction's else branch.
fn mismatch(key: &str, expected: Revision, resp: &etcd::TxnResponse) -> StoreError {
    let current = resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(mut get) => get.take_kvs().into_iter().next(),
        _ => None,
    });
    match current.map(convert_kv) {
        None => StoreError::NotFound(key.to_string()),
        Some(Ok(kv)) => StoreError::Conflict { key: key.to_string(), expected, current: Some(Box::new(kv)) },
        Some(Err(e)) => e,
    }
}

fn convert_kv(kv: etcd::KeyValue) -> Result<KeyValue> {
    let (create_revision, mod_revision, version, lease) =
        (kv.create_revision(), kv.mod_revision(), kv.version(), kv.lease());
    let (key, value) = kv.into_key_value();
    let key = String::from_utf8(key).map_err(|e| {
        StoreError::Backend(format!("etcd holds a key that is not UTF-8: {:?}", String::from_utf8_lossy(e.as_bytes())))
    })?;
    Ok(KeyValue { key, value: Bytes::from(value), create_revision, mod_revision, version, lease })
}

fn convert_event(event: &etcd::Event) -> Result<Event> {
    let kind = match event.event_type() {
        etcd::EventType::Put => EventKind::Put,
        etcd::EventType::Delete => EventKind::Delete,
    };
    let kv = event.kv().cloned().ok_or_else(|| StoreError::Backend("etcd sent a watch event without a key".into()))?;
    let prev = event.prev_kv().cloned().map(convert_kv).transpose()?;
    Ok(Event { kind, kv: convert_kv(kv)?, prev })
}
