//! `krate server`.

use std::time::Duration;

use krate_store::{Compactor, CompactorConfig};

use crate::cli::ServerArgs;

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let store = crate::storage::open(&args).await?;
    let status = store.status().await?;
    tracing::info!(
        backend = store.backend_name(),
        revision = status.revision,
        compacted = status.compacted,
        "store ready"
    );
    let _compactor = Compactor::start(
        store.clone(),
        CompactorConfig { interval: Duration::from_secs(args.compaction_interval_seconds) },
    );
    anyhow::bail!(
        "the API server is not available yet in this version of krate; the {} store opened at revision {}",
        store.backend_name(),
        status.revision
    )
}
