//! Every sync report of a running loop, in order: its handle's watch channel keeps
//! only the latest, and syncs are at least the minimum interval apart, so a collector
//! task sees each one.

use std::sync::Arc;
use std::time::Duration;

use krate_net::{netpol, proxy};
use krate_testkit::eventually;
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(30);

/// A report, by its sync's number.
pub trait Numbered: Send + Sync + 'static {
    fn number(&self) -> u64;
}

impl Numbered for proxy::SyncReport {
    fn number(&self) -> u64 {
        self.number
    }
}

impl Numbered for netpol::SyncReport {
    fn number(&self) -> u64 {
        self.number
    }
}

pub struct History<R>(Arc<parking_lot::Mutex<Vec<Arc<R>>>>);

impl<R: Numbered> History<R> {
    pub fn collect(mut reports: watch::Receiver<Option<Arc<R>>>) -> History<R> {
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = seen.clone();
        tokio::spawn(async move {
            while reports.changed().await.is_ok() {
                if let Some(report) = reports.borrow_and_update().clone() {
                    sink.lock().push(report);
                }
            }
        });
        History(seen)
    }

    pub fn all(&self) -> Vec<Arc<R>> {
        self.0.lock().clone()
    }

    pub fn last_number(&self) -> u64 {
        self.0.lock().last().map_or(0, |r| r.number())
    }

    pub fn since(&self, after: u64) -> Vec<Arc<R>> {
        self.0.lock().iter().filter(|r| r.number() > after).cloned().collect()
    }

    /// The first report after `after` (a sync number) that `pred` accepts.
    pub async fn wait(&self, what: &str, after: u64, pred: impl Fn(&R) -> bool) -> Arc<R> {
        eventually(what, WAIT, || {
            let found = self.0.lock().iter().find(|r| r.number() > after && pred(r)).cloned();
            async move { found }
        })
        .await
    }
}
