//! Periodic compaction, the same for every backend.
//!
//! Like kube-apiserver's compactor, every interval it compacts to the revision it saw one
//! interval earlier, so history covers at least one interval (watchers that reconnect
//! within it can resume) and never grows without bound.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{Revision, Store, StoreError};

#[derive(Clone, Debug)]
pub struct CompactorConfig {
    pub interval: Duration,
}

impl Default for CompactorConfig {
    fn default() -> Self {
        // Upstream's --etcd-compaction-interval default.
        CompactorConfig { interval: Duration::from_secs(300) }
    }
}

pub struct Compactor {
    handle: JoinHandle<()>,
}

impl Compactor {
    pub fn start(store: Arc<dyn Store>, config: CompactorConfig) -> Self {
        let handle = tokio::spawn(async move {
            let mut seen: Option<Revision> = None;
            let mut ticker = tokio::time::interval(config.interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if let Some(rev) = seen {
                    match store.compact(rev).await {
                        Ok(()) => tracing::debug!(revision = rev, "compacted"),
                        // Already compacted that far (another server did it): fine.
                        Err(StoreError::Compacted { .. }) => {}
                        Err(e) => tracing::warn!(error = %e, revision = rev, "compaction failed"),
                    }
                }
                match store.current_revision().await {
                    Ok(rev) => seen = Some(rev),
                    Err(e) => tracing::warn!(error = %e, "compactor could not read the revision"),
                }
            }
        });
        Compactor { handle }
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.handle.abort();
    }
}
