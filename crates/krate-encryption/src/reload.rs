//! Loading the configuration file and, with `--encryption-provider-config-automatic-reload`,
//! following its changes: a changed file is parsed, validated and its KMS plugins asked
//! for a key before it replaces the running providers; a bad one is refused (logged,
//! counted) and the old providers stay.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};

use crate::config::EncryptionConfiguration;
use crate::kms::KmsOptions;
use crate::metrics;
use crate::{ConfigError, Providers};

#[derive(Clone, Debug)]
pub struct EncryptionOptions {
    /// `--encryption-provider-config`.
    pub config_path: PathBuf,
    /// `--encryption-provider-config-automatic-reload`.
    pub automatic_reload: bool,
    /// How often the file is checked for changes when reloading.
    pub reload_interval: Duration,
    /// How long a new configuration's KMS plugins get to answer before it is refused.
    pub kms_ready_timeout: Duration,
    pub kms: KmsOptions,
}

impl EncryptionOptions {
    pub fn new(config_path: impl Into<PathBuf>, automatic_reload: bool) -> Self {
        EncryptionOptions {
            config_path: config_path.into(),
            automatic_reload,
            reload_interval: Duration::from_secs(5),
            kms_ready_timeout: Duration::from_secs(10),
            kms: KmsOptions::default(),
        }
    }
}

/// The running encryption configuration.
pub struct Encryption {
    opts: EncryptionOptions,
    providers: RwLock<Arc<Providers>>,
    /// Hash of the file content the providers were built from.
    loaded: Mutex<[u8; 32]>,
}

fn apiserver_id_hash() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    metrics::hash_key_id(&format!("kube-apiserver-{host}"))
}

impl Encryption {
    /// Loads the file (failing start-up if it is bad, as upstream) and, if asked,
    /// starts following it.
    pub async fn load(opts: EncryptionOptions) -> Result<Arc<Self>, ConfigError> {
        let (hash, providers) = Self::read_and_build(&opts).await?;
        providers.start();
        let me = Arc::new(Encryption { opts, providers: RwLock::new(Arc::new(providers)), loaded: Mutex::new(hash) });
        if me.opts.automatic_reload {
            Self::follow(Arc::downgrade(&me), me.opts.reload_interval);
        }
        Ok(me)
    }

    /// An encryption with fixed providers (tests of the store layer).
    pub fn fixed(providers: Providers) -> Arc<Self> {
        Arc::new(Encryption {
            opts: EncryptionOptions::new("", false),
            providers: RwLock::new(Arc::new(providers)),
            loaded: Mutex::new([0; 32]),
        })
    }

    pub fn providers(&self) -> Arc<Providers> {
        self.providers.read().clone()
    }

    pub fn automatic_reload(&self) -> bool {
        self.opts.automatic_reload
    }

    async fn read_and_build(opts: &EncryptionOptions) -> Result<([u8; 32], Providers), ConfigError> {
        let path = opts.config_path.display().to_string();
        let data = tokio::fs::read(&opts.config_path)
            .await
            .map_err(|e| ConfigError::Read { path: path.clone(), reason: e.to_string() })?;
        if data.is_empty() {
            return Err(ConfigError::Empty(path));
        }
        let config = EncryptionConfiguration::parse(&data)?;
        let providers = Providers::build(&config, &opts.kms)?;
        Ok((Sha256::digest(&data).into(), providers))
    }

    /// Re-reads the file; returns whether new providers took over. An unchanged file
    /// is not reloaded.
    pub async fn reload(&self) -> Result<bool, ConfigError> {
        let data = tokio::fs::read(&self.opts.config_path).await.map_err(|e| ConfigError::Read {
            path: self.opts.config_path.display().to_string(),
            reason: e.to_string(),
        })?;
        let hash: [u8; 32] = Sha256::digest(&data).into();
        if hash == *self.loaded.lock() {
            return Ok(false);
        }
        let (hash, providers) = Self::read_and_build(&self.opts).await?;
        // Its KMS plugins must answer with a key before it may serve writes.
        for kms in providers.kms() {
            match tokio::time::timeout(self.opts.kms_ready_timeout, kms.refresh()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(ConfigError::Provider(format!("failed to load KMS provider: {e}"))),
                Err(_) => {
                    return Err(ConfigError::Provider(format!(
                        "KMS provider {} did not become ready within {:?}",
                        kms.name(),
                        self.opts.kms_ready_timeout
                    )));
                }
            }
        }
        providers.start();
        *self.providers.write() = Arc::new(providers);
        *self.loaded.lock() = hash;
        Ok(true)
    }

    fn follow(weak: Weak<Encryption>, every: Duration) {
        tokio::spawn(async move {
            let id = apiserver_id_hash();
            loop {
                tokio::time::sleep(every).await;
                let Some(me) = weak.upgrade() else { return };
                let now =
                    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
                match me.reload().await {
                    Ok(false) => {}
                    Ok(true) => {
                        tracing::info!(path = %me.opts.config_path.display(), "loaded new encryption configuration");
                        metrics::RELOADS.with_label_values(&["success", &id]).inc();
                        metrics::RELOAD_LAST_TIMESTAMP.with_label_values(&["success", &id]).set(now);
                    }
                    Err(e) => {
                        tracing::error!(path = %me.opts.config_path.display(), error = %e, "refused new encryption configuration, keeping the current one");
                        metrics::RELOADS.with_label_values(&["failure", &id]).inc();
                        metrics::RELOAD_LAST_TIMESTAMP.with_label_values(&["failure", &id]).set(now);
                        // Not retried until the file changes again.
                        if let Ok(data) = tokio::fs::read(&me.opts.config_path).await {
                            *me.loaded.lock() = Sha256::digest(&data).into();
                        }
                    }
                }
            }
        });
    }

    /// Health of each KMS provider, named as upstream's checks (kms-provider-0, …).
    pub async fn kms_health(&self) -> Vec<(String, Result<(), String>)> {
        let providers = self.providers();
        let mut out = Vec::new();
        for (i, kms) in providers.kms().iter().enumerate() {
            out.push((format!("kms-provider-{i}"), kms.check().await));
        }
        out
    }
}
