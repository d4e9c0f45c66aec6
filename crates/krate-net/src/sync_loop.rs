//! What the proxy, NetworkPolicy and pod network loops share: reflectors nudging one
//! loop, which waits for every list, then syncs when due (soon after a change, but no
//! sooner than a minimum interval after the last sync; at a retry; periodically) until
//! told to stop; and the handle that stops it and shows its reports.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinHandle;

/// A running loop: its task, the stop signal and the latest report.
pub(crate) struct LoopHandle<R, E> {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), E>>,
    reports: watch::Receiver<Option<Arc<R>>>,
}

impl<R, E> LoopHandle<R, E> {
    /// Spawns `run` on the current Tokio runtime, giving it a future that completes when
    /// the handle is stopped or dropped, and where to publish its reports.
    pub(crate) fn spawn<F, Fut>(run: F) -> LoopHandle<R, E>
    where
        F: FnOnce(BoxFuture<'static, ()>, watch::Sender<Option<Arc<R>>>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let (reports_tx, reports) = watch::channel(None);
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        LoopHandle { stop: Some(stop), task: tokio::spawn(run(shutdown, reports_tx)), reports }
    }

    pub(crate) fn reports(&self) -> watch::Receiver<Option<Arc<R>>> {
        self.reports.clone()
    }

    /// Signals the stop and waits for the loop; `task_failed` describes a panicked task.
    pub(crate) async fn stop(mut self, task_failed: fn(String) -> E) -> Result<(), E> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.map_err(|e| task_failed(e.to_string()))?
    }
}

impl<R, E> Drop for LoopHandle<R, E> {
    fn drop(&mut self) {
        // Dropping the sender is the stop signal; the task cleans up on its own.
        self.stop.take();
    }
}

/// Tasks aborted when this goes out of scope.
pub(crate) struct Aborting(pub(crate) Vec<JoinHandle<()>>);

impl Drop for Aborting {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// One kind's reflector: its store (objects trimmed by `trim` first), marked ready
/// after each complete list, with a nudge to the loop on every change. `what` names
/// the loop in logs.
pub(crate) fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    changed: Arc<Notify>,
    what: &'static str,
) -> (Store<K>, watch::Receiver<bool>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let (ready_tx, ready) = watch::channel(false);
    let task = tokio::spawn(async move {
        let kind = K::kind(&()).to_string();
        let stream = watcher::watcher(api, config).default_backoff().modify(trim);
        let mut events = reflector::reflector(writer, stream).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::InitDone) => {
                    ready_tx.send_replace(true);
                    changed.notify_one();
                }
                Ok(Event::Apply(_) | Event::Delete(_)) => changed.notify_one(),
                Ok(Event::Init | Event::InitApply(_)) => {}
                Err(error) => tracing::warn!(kind, %error, "{what} watch failed; retrying"),
            }
        }
    });
    (reader, ready, task)
}

/// When a loop syncs next, from what it remembers of the syncs so far.
pub(crate) struct Pacing {
    /// Something changed since the last sync.
    pub(crate) dirty: bool,
    pub(crate) last_sync: Option<Instant>,
    /// The last full sync, or when the loop started.
    pub(crate) last_full: Instant,
    pub(crate) retry_at: Option<Instant>,
}

impl Pacing {
    /// A loop starting now, with a first sync to make.
    pub(crate) fn starting_now() -> Pacing {
        Pacing { dirty: true, last_sync: None, last_full: Instant::now(), retry_at: None }
    }

    /// As soon as `min_interval` after the last sync allows if anything changed, else
    /// at the next retry, at `also` (a deadline of the loop's own), or `full_interval`
    /// after the last full sync, whichever comes first.
    pub(crate) fn due(&self, min_interval: Duration, full_interval: Duration, also: Option<Instant>) -> Instant {
        let now = Instant::now();
        let earliest = self.last_sync.map_or(now, |t| t + min_interval);
        let mut due = self.last_full + full_interval;
        if self.dirty {
            due = now;
        }
        for at in [self.retry_at, also].into_iter().flatten() {
            due = due.min(at);
        }
        due.max(earliest)
    }
}

/// One loop's inputs and memory between syncs.
pub(crate) trait SyncLoop: Send {
    type Report: Send + Sync;

    fn pacing(&mut self) -> &mut Pacing;

    fn due(&self) -> Instant;

    /// Syncs once; None when there was nothing to report.
    fn sync(&mut self) -> impl Future<Output = Option<Self::Report>> + Send;
}

/// Waits for every list in `ready`, then makes the loop with `start` and syncs it
/// whenever due, publishing its reports, until `shutdown` completes.
pub(crate) async fn drive<S: SyncLoop>(
    shutdown: impl Future<Output = ()>,
    ready: Vec<watch::Receiver<bool>>,
    changed: &Notify,
    start: impl FnOnce() -> S,
    reports: &watch::Sender<Option<Arc<S::Report>>>,
) {
    tokio::pin!(shutdown);
    let all_ready = async {
        for mut ready in ready {
            let _ = ready.wait_for(|r| *r).await;
        }
    };
    tokio::select! {
        () = &mut shutdown => return,
        () = all_ready => {}
    }

    let mut state = start();
    loop {
        let due = state.due();
        tokio::select! {
            biased;
            () = &mut shutdown => return,
            () = tokio::time::sleep_until(due.into()) => {}
            () = changed.notified() => {
                state.pacing().dirty = true;
                continue;
            }
        }
        if let Some(report) = state.sync().await {
            reports.send_replace(Some(Arc::new(report)));
        }
    }
}

/// Logs at info level when `loud` (full syncs: rare, worth seeing), else at debug.
macro_rules! log_sync {
    ($loud:expr, $($event:tt)+) => {
        if $loud {
            tracing::info!($($event)+);
        } else {
            tracing::debug!($($event)+);
        }
    };
}
pub(crate) use log_sync;
