//! A [`Store`] that encrypts values on the way in and decrypts them on the way out,
//! by the resource each key belongs to. Keys, revisions, leases and watch order pass
//! through untouched; only values change.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use krate_store::{
    DynStore, Event, KeyValue, LeaseId, RangeRequest, RangeResponse, Revision, Store, StoreError, StoreStatus,
    WatchEvent, WatchOptions, WatchStream,
};

use crate::TransformError;
use crate::config::GroupResource;
use crate::reload::Encryption;
use crate::transformer::{ENCRYPTED_PREFIX, Transformer};

/// Which resource a store key belongs to. The API server answers from its resource
/// table; keys of no resource (None) are stored as they are.
pub trait KeyResolver: Send + Sync + 'static {
    fn resolve(&self, key: &str) -> Option<GroupResource>;
}

pub struct EncryptedStore {
    inner: DynStore,
    encryption: Arc<Encryption>,
    resolver: Arc<dyn KeyResolver>,
}

fn transform_err(key: &str, e: TransformError) -> StoreError {
    StoreError::Backend(format!("transforming the stored value of {key}: {e}"))
}

impl EncryptedStore {
    pub fn new(inner: DynStore, encryption: Arc<Encryption>, resolver: Arc<dyn KeyResolver>) -> Self {
        EncryptedStore { inner, encryption, resolver }
    }

    /// The chain for `key`, None when its resource is not encrypted.
    fn chain(&self, key: &str) -> Option<Arc<dyn Transformer>> {
        let gr = self.resolver.resolve(key)?;
        let providers = self.encryption.providers();
        providers.for_resource(&gr).map(|c| c.clone() as Arc<dyn Transformer>)
    }

    async fn encrypt(&self, key: &str, value: Bytes) -> Result<Bytes, StoreError> {
        match self.chain(key) {
            Some(chain) => chain.transform_to_storage(value, key.as_bytes()).await.map_err(|e| transform_err(key, e)),
            None => Ok(value),
        }
    }

    /// Plain value and staleness, with `chain` already looked up (None: not encrypted).
    async fn decrypt_with(
        chain: Option<&Arc<dyn Transformer>>,
        key: &str,
        value: Bytes,
    ) -> Result<(Bytes, bool), StoreError> {
        match chain {
            Some(chain) => chain.transform_from_storage(value, key.as_bytes()).await.map_err(|e| transform_err(key, e)),
            // Not (or no longer) configured: plain data only, as upstream's identity.
            None if value.starts_with(ENCRYPTED_PREFIX) => {
                Err(transform_err(key, TransformError::EncryptedDataForIdentity))
            }
            None => Ok((value, false)),
        }
    }

    async fn decrypt_kv(&self, mut kv: KeyValue) -> Result<KeyValue, StoreError> {
        let chain = self.chain(&kv.key);
        kv.value = Self::decrypt_with(chain.as_ref(), &kv.key, kv.value).await?.0;
        Ok(kv)
    }
}

/// Decrypts an event's values (a delete's own value is empty).
async fn decrypt_event(
    encryption: &Encryption,
    resolver: &dyn KeyResolver,
    mut ev: Event,
) -> Result<Event, StoreError> {
    let chain = resolver
        .resolve(&ev.kv.key)
        .and_then(|gr| encryption.providers().for_resource(&gr).map(|c| c.clone() as Arc<dyn Transformer>));
    if !ev.kv.value.is_empty() {
        ev.kv.value = EncryptedStore::decrypt_with(chain.as_ref(), &ev.kv.key, ev.kv.value).await?.0;
    }
    if let Some(prev) = ev.prev.as_mut() {
        prev.value = EncryptedStore::decrypt_with(chain.as_ref(), &prev.key, std::mem::take(&mut prev.value)).await?.0;
    }
    Ok(ev)
}

#[async_trait]
impl Store for EncryptedStore {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    async fn current_revision(&self) -> krate_store::Result<Revision> {
        self.inner.current_revision().await
    }

    fn revision_hint(&self) -> Option<Revision> {
        self.inner.revision_hint()
    }

    async fn status(&self) -> krate_store::Result<StoreStatus> {
        self.inner.status().await
    }

    async fn get(&self, key: &str, revision: Revision) -> krate_store::Result<(Option<KeyValue>, Revision)> {
        let (kv, rev) = self.inner.get(key, revision).await?;
        let kv = match kv {
            Some(kv) => Some(self.decrypt_kv(kv).await?),
            None => None,
        };
        Ok((kv, rev))
    }

    async fn range(&self, req: RangeRequest) -> krate_store::Result<RangeResponse> {
        let mut resp = self.inner.range(req).await?;
        let mut kvs = Vec::with_capacity(resp.kvs.len());
        for kv in std::mem::take(&mut resp.kvs) {
            kvs.push(self.decrypt_kv(kv).await?);
        }
        resp.kvs = kvs;
        Ok(resp)
    }

    async fn create(&self, key: &str, value: Bytes, lease: LeaseId) -> krate_store::Result<Revision> {
        let value = self.encrypt(key, value).await?;
        self.inner.create(key, value, lease).await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
    ) -> krate_store::Result<Revision> {
        let value = self.encrypt(key, value).await?;
        match self.inner.update(key, value, expected, lease).await {
            Err(StoreError::Conflict { key, expected, current }) => {
                // The caller may retry from `current`: hand it over decrypted, or not at all.
                let current = match current {
                    Some(kv) => self.decrypt_kv(*kv).await.ok().map(Box::new),
                    None => None,
                };
                Err(StoreError::Conflict { key, expected, current })
            }
            other => other,
        }
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> krate_store::Result<(Revision, KeyValue)> {
        let (rev, kv) = self.inner.delete(key, expected).await?;
        // The delete is done; a value that no longer decrypts must not undo that.
        let chain = self.chain(key);
        let raw = kv.clone();
        match Self::decrypt_with(chain.as_ref(), key, kv.value).await {
            Ok((value, _)) => Ok((rev, KeyValue { value, ..raw })),
            Err(e) => {
                tracing::warn!(%key, error = %e, "deleted a value that could not be decrypted");
                Ok((rev, KeyValue { value: Bytes::new(), ..raw }))
            }
        }
    }

    async fn watch(&self, prefix: &str, after: Revision, opts: WatchOptions) -> krate_store::Result<WatchStream> {
        let inner = self.inner.watch(prefix, after, opts).await?;
        let encryption = self.encryption.clone();
        let resolver = self.resolver.clone();
        let stream = inner.then(move |item| {
            let encryption = encryption.clone();
            let resolver = resolver.clone();
            async move {
                match item? {
                    WatchEvent::Event(ev) => {
                        Ok(WatchEvent::Event(decrypt_event(&encryption, resolver.as_ref(), ev).await?))
                    }
                    progress => Ok(progress),
                }
            }
        });
        // Errors end the stream (the trait's contract): a value that fails to decrypt
        // stops the watch rather than being skipped.
        let mut failed = false;
        Ok(Box::pin(stream.take_while(move |item| {
            let go = !failed;
            failed |= item.is_err();
            futures::future::ready(go)
        })))
    }

    async fn compact(&self, revision: Revision) -> krate_store::Result<()> {
        self.inner.compact(revision).await
    }

    async fn grant_lease(&self, ttl_seconds: i64) -> krate_store::Result<LeaseId> {
        self.inner.grant_lease(ttl_seconds).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> krate_store::Result<i64> {
        self.inner.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> krate_store::Result<()> {
        self.inner.revoke_lease(lease).await
    }

    async fn is_stale(&self, key: &str, mod_revision: Revision) -> krate_store::Result<bool> {
        let Some(chain) = self.chain(key) else { return Ok(false) };
        let (kv, _) = self.inner.get(key, 0).await?;
        match kv {
            Some(kv) if kv.mod_revision == mod_revision => {
                Ok(chain.transform_from_storage(kv.value, key.as_bytes()).await.map_err(|e| transform_err(key, e))?.1)
            }
            // Changed since: the caller's compare-and-swap will fail anyway.
            _ => Ok(false),
        }
    }
}
