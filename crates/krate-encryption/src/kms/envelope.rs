//! The KMS v2 transformer: one seed per key ID, encrypted once by the plugin, reused
//! for every write; the plugin's Status polled so a new key ID brings a new seed
//! without a restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use prost::Message;
use rand::RngCore;

use super::cache::{Dek, DekCache, SEED_LEN, cache_key};
use super::v2::DecryptRequest;
use super::{EncryptedDekSourceType, EncryptedObject, KmsClient};
use crate::TransformError;
use crate::metrics;
use crate::transformer::Transformer;

/// Upstream's limits on what a plugin returns.
const KEY_ID_MAX: usize = 1024;
const DEK_SOURCE_MAX: usize = 1024;
const ANNOTATIONS_MAX: usize = 32 * 1024;

#[derive(Clone, Debug)]
pub struct KmsOptions {
    /// How often Status is polled while the plugin is healthy (upstream: 1m).
    pub poll_healthy: Duration,
    /// … and while it is not (upstream: 10s).
    pub poll_unhealthy: Duration,
    /// Writes stop this long after the last healthy Status with the seed's key ID
    /// (upstream: 3m), so a plugin that has rotated away is not used with a stale key.
    pub write_ttl: Duration,
    /// How long a healthy (unhealthy) health-check answer is reused (upstream: 20s, 3s).
    pub health_ok_ttl: Duration,
    pub health_err_ttl: Duration,
}

impl Default for KmsOptions {
    fn default() -> Self {
        KmsOptions {
            poll_healthy: Duration::from_secs(60),
            poll_unhealthy: Duration::from_secs(10),
            write_ttl: Duration::from_secs(180),
            health_ok_ttl: Duration::from_secs(20),
            health_err_ttl: Duration::from_secs(3),
        }
    }
}

/// What writes use now.
struct WriteState {
    template: EncryptedObject,
    dek: Arc<Dek>,
    expires: Instant,
}

pub struct KmsV2 {
    name: String,
    client: KmsClient,
    opts: KmsOptions,
    state: RwLock<Option<Arc<WriteState>>>,
    /// One refresh (Status, maybe Encrypt) at a time.
    refreshing: tokio::sync::Mutex<()>,
    cache: DekCache,
    /// One plugin Decrypt per missing DEK, even when many reads miss at once.
    filling: tokio::sync::Mutex<()>,
    health: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl KmsV2 {
    pub fn new(name: &str, client: KmsClient, opts: KmsOptions) -> Arc<Self> {
        Arc::new(KmsV2 {
            name: name.into(),
            client,
            opts,
            state: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            cache: DekCache::new(name),
            filling: tokio::sync::Mutex::new(()),
            health: Mutex::new(None),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Polls Status for as long as the provider is in use (it stops when the last
    /// reference goes, e.g. after a configuration reload replaced it).
    pub fn start_polling(self: &Arc<Self>) {
        let weak: Weak<KmsV2> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(me) = weak.upgrade() else { return };
                let wait = match me.refresh().await {
                    Ok(()) => me.opts.poll_healthy,
                    Err(e) => {
                        tracing::warn!(provider = %me.name, error = %e, "KMS v2 plugin status check failed");
                        me.opts.poll_unhealthy
                    }
                };
                drop(me);
                tokio::time::sleep(wait).await;
            }
        });
    }

    /// Number of DEK sources cached (tests and metrics).
    pub fn cached_deks(&self) -> usize {
        self.cache.len()
    }

    /// The key ID writes use now, if a seed is ready.
    pub fn current_key_id(&self) -> Option<String> {
        self.state.read().as_ref().map(|s| s.template.key_id.clone())
    }

    /// Asks Status; makes a new seed when the key ID changed (or there is none yet),
    /// else extends the current one's life.
    pub async fn refresh(&self) -> Result<(), TransformError> {
        let _one = self.refreshing.lock().await;
        let status = self.healthy_status().await?;
        let current = self.state.read().clone();
        if let Some(cur) = current.filter(|s| s.template.key_id == status) {
            let expires = Instant::now() + self.opts.write_ttl;
            *self.state.write() =
                Some(Arc::new(WriteState { template: cur.template.clone(), dek: cur.dek.clone(), expires }));
            return Ok(());
        }
        let start = Instant::now();
        let generated = self.generate().await;
        metrics::record_key_generation(start, generated.is_ok());
        let state = generated?;
        tracing::info!(provider = %self.name, key_id_hash = %metrics::hash_key_id(&state.template.key_id), "KMS v2: new DEK seed");
        *self.state.write() = Some(Arc::new(state));
        Ok(())
    }

    async fn healthy_status(&self) -> Result<String, TransformError> {
        let status = self.client.status().await.map_err(|e| TransformError::kms(&self.name, e))?;
        let mut problems = Vec::new();
        if status.healthz != "ok" {
            problems.push(format!("got unexpected healthz status: {}", status.healthz));
        }
        if status.version != "v2" {
            problems.push(format!("expected KMSv2 API version v2, got {}", status.version));
        }
        if status.key_id.is_empty() {
            metrics::INVALID_KEY_ID.with_label_values(&[&self.name, "empty"]).inc();
            problems.push("expected KMSv2 KeyID to be set, got ".to_string());
        } else if status.key_id.len() > KEY_ID_MAX {
            metrics::INVALID_KEY_ID.with_label_values(&[&self.name, "too_long"]).inc();
            problems
                .push(format!("keyID is {} bytes, which exceeds the max size of {KEY_ID_MAX}", status.key_id.len()));
        }
        if !problems.is_empty() {
            let joined = if problems.len() == 1 { problems.remove(0) } else { format!("[{}]", problems.join(", ")) };
            return Err(TransformError::kms(
                &self.name,
                format!("kmsv2 Provider {} is not healthy, error: {joined}", self.name),
            ));
        }
        Ok(status.key_id)
    }

    async fn generate(&self) -> Result<WriteState, TransformError> {
        let mut seed = vec![0u8; SEED_LEN];
        rand::rng().fill_bytes(&mut seed);
        let uid = uuid_like();
        let resp = self
            .client
            .encrypt(&uid, seed.clone())
            .await
            .map_err(|e| TransformError::kms(&self.name, format!("failed to encrypt DEK, error: {e}")))?;
        let template = EncryptedObject {
            encrypted_data: vec![0],
            key_id: resp.key_id,
            encrypted_dek_source: resp.ciphertext,
            annotations: resp.annotations.into_iter().collect::<BTreeMap<_, _>>(),
            encrypted_dek_source_type: EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed as i32,
        };
        validate(&template).map_err(|e| TransformError::kms(&self.name, e))?;
        let dek = Arc::new(Dek::new(EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed, seed, &self.name)?);
        // Reads of what we write must not ask the plugin.
        self.cache.insert(cache_key(&template), dek.clone());
        Ok(WriteState {
            template: EncryptedObject { encrypted_data: Vec::new(), ..template },
            dek,
            expires: Instant::now() + self.opts.write_ttl,
        })
    }

    async fn write_state(&self) -> Result<Arc<WriteState>, TransformError> {
        let usable = |s: &Option<Arc<WriteState>>| s.as_ref().filter(|s| Instant::now() < s.expires).cloned();
        if let Some(s) = usable(&self.state.read()) {
            return Ok(s);
        }
        // None yet (the plugin came up after us) or expired: try once now.
        self.refresh().await?;
        usable(&self.state.read())
            .ok_or_else(|| TransformError::kms(&self.name, "no usable DEK seed: the KMS plugin's key is not ready"))
    }

    async fn dek_for(&self, obj: &EncryptedObject) -> Result<Arc<Dek>, TransformError> {
        let key = cache_key(obj);
        if let Some(dek) = self.cache.get(&key) {
            return Ok(dek);
        }
        let _one = self.filling.lock().await;
        if let Some(dek) = self.cache.get(&key) {
            return Ok(dek);
        }
        metrics::CACHE_MISSES.inc();
        let plain = self
            .client
            .decrypt(DecryptRequest {
                ciphertext: obj.encrypted_dek_source.clone(),
                uid: uuid_like(),
                key_id: obj.key_id.clone(),
                annotations: obj.annotations.clone().into_iter().collect(),
            })
            .await
            .map_err(|e| TransformError::kms(&self.name, format!("failed to decrypt DEK, error: {e}")))?;
        let kind = EncryptedDekSourceType::try_from(obj.encrypted_dek_source_type).expect("validated");
        let dek = Arc::new(Dek::new(kind, plain, &self.name)?);
        self.cache.insert(key, dek.clone());
        Ok(dek)
    }

    /// The health check: a cached Status answer, as upstream's kms-provider probes.
    pub async fn check(&self) -> Result<(), String> {
        if let Some((at, result)) = self.health.lock().clone() {
            let ttl = if result.is_ok() { self.opts.health_ok_ttl } else { self.opts.health_err_ttl };
            if at.elapsed() < ttl {
                return result;
            }
        }
        let result = match self.healthy_status().await {
            Ok(_) => Ok(()),
            Err(TransformError::Kms { reason, .. }) if reason.starts_with("kmsv2 Provider") => Err(reason),
            Err(e) => Err(format!(
                "failed to perform status section of the healthz check for KMS Provider {}, error: {e}",
                self.name
            )),
        };
        *self.health.lock() = Some((Instant::now(), result.clone()));
        result
    }
}

/// Upstream's ValidateEncryptedObject.
fn validate(o: &EncryptedObject) -> Result<(), String> {
    if EncryptedDekSourceType::try_from(o.encrypted_dek_source_type).is_err() {
        return Err(format!("unknown encryptedDEKSourceType: {}", o.encrypted_dek_source_type));
    }
    if o.encrypted_data.is_empty() {
        return Err("encrypted data is empty".into());
    }
    if o.encrypted_dek_source.is_empty() {
        return Err("failed to validate encrypted DEK source: encrypted DEK source is empty".into());
    }
    if o.encrypted_dek_source.len() > DEK_SOURCE_MAX {
        return Err(format!(
            "failed to validate encrypted DEK source: encrypted DEK source is {} bytes, which exceeds the max size of {DEK_SOURCE_MAX}",
            o.encrypted_dek_source.len()
        ));
    }
    if o.key_id.is_empty() {
        return Err("failed to validate key id: keyID is empty".into());
    }
    if o.key_id.len() > KEY_ID_MAX {
        return Err(format!(
            "failed to validate key id: keyID is {} bytes, which exceeds the max size of {KEY_ID_MAX}",
            o.key_id.len()
        ));
    }
    let size: usize = o.annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > ANNOTATIONS_MAX {
        return Err(format!(
            "failed to validate annotations: annotations exceeds size limit of {ANNOTATIONS_MAX} bytes"
        ));
    }
    Ok(())
}

/// A random RFC 4122 v4 UID for the plugin's request logs.
fn uuid_like() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

#[async_trait]
impl Transformer for KmsV2 {
    async fn transform_from_storage(&self, data: Bytes, aad: &[u8]) -> Result<(Bytes, bool), TransformError> {
        let obj = EncryptedObject::decode(data).map_err(|e| TransformError::kms(&self.name, e))?;
        validate(&obj).map_err(|e| TransformError::kms(&self.name, e))?;
        let dek = self.dek_for(&obj).await?;
        let plain = dek.open(&obj.encrypted_data, aad)?;
        let current = self.state.read().as_ref().map(|s| s.template.key_id.clone());
        // Written under another key ID (or the older DEK form): rewrite on update.
        let stale = current.is_some_and(|k| k != obj.key_id)
            || obj.encrypted_dek_source_type != EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed as i32;
        Ok((plain.into(), stale))
    }

    async fn transform_to_storage(&self, data: Bytes, aad: &[u8]) -> Result<Bytes, TransformError> {
        let state = self.write_state().await?;
        let obj = EncryptedObject { encrypted_data: state.dek.seal(&data, aad)?, ..state.template.clone() };
        Ok(obj.encode_to_vec().into())
    }
}
