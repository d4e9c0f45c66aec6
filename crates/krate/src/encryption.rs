//! `--encryption-provider-config`: loading the configuration at start-up.

use std::sync::Arc;

use anyhow::Context as _;
use krate_encryption::{Encryption, EncryptionOptions};

use crate::cli::ServerArgs;

pub async fn load(args: &ServerArgs) -> anyhow::Result<Option<Arc<Encryption>>> {
    let Some(path) = &args.encryption_provider_config else {
        if args.encryption_provider_config_automatic_reload {
            anyhow::bail!(
                "--encryption-provider-config-automatic-reload must be set with --encryption-provider-config"
            );
        }
        return Ok(None);
    };
    let opts = EncryptionOptions::new(path, args.encryption_provider_config_automatic_reload);
    let encryption = Encryption::load(opts).await.with_context(|| format!("loading {}", path.display()))?;
    tracing::info!(path = %path.display(), reload = args.encryption_provider_config_automatic_reload, "encryption at rest configured");
    Ok(Some(encryption))
}
