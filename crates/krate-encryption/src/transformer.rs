//! Value transformers and upstream's prefix dispatch between them.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use crate::TransformError;
use crate::metrics;

/// Turns stored bytes into plain ones and back. `aad` is the authenticated data: the
/// store key, so a value copied to another key fails to decrypt.
#[async_trait]
pub trait Transformer: Send + Sync {
    /// Plain data, and whether the stored form is stale (not what a write would produce
    /// now), so an unchanged update should still be written.
    async fn transform_from_storage(&self, data: Bytes, aad: &[u8]) -> Result<(Bytes, bool), TransformError>;
    async fn transform_to_storage(&self, data: Bytes, aad: &[u8]) -> Result<Bytes, TransformError>;
}

/// The prefix every encrypting provider's output starts with.
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

/// Stores data as is, and refuses to read data that was written encrypted.
pub struct Identity;

#[async_trait]
impl Transformer for Identity {
    async fn transform_from_storage(&self, data: Bytes, _aad: &[u8]) -> Result<(Bytes, bool), TransformError> {
        if data.starts_with(ENCRYPTED_PREFIX) {
            return Err(TransformError::EncryptedDataForIdentity);
        }
        Ok((data, false))
    }
    async fn transform_to_storage(&self, data: Bytes, _aad: &[u8]) -> Result<Bytes, TransformError> {
        Ok(data)
    }
}

/// A transformer and the prefix that marks its output.
pub struct Prefixed {
    pub prefix: Vec<u8>,
    pub transformer: Arc<dyn Transformer>,
}

/// Upstream's PrefixTransformers: the first entry writes (prefix + its output); a read
/// goes to the first entry whose prefix the data carries. Data read by any entry but the
/// first is stale. The empty prefix (identity) matches everything but steps aside when
/// the data is encrypted, so identity can be listed before the encrypting providers
/// while migrating away from encryption.
pub struct PrefixChain {
    entries: Vec<Prefixed>,
    no_match: &'static str,
    /// Records upstream's transformation metrics (the outermost chain only).
    record_metrics: bool,
}

impl PrefixChain {
    pub fn new(entries: Vec<Prefixed>, no_match: &'static str) -> Self {
        PrefixChain { entries, no_match, record_metrics: false }
    }

    /// The chain of one resource: records metrics per provider prefix.
    pub fn for_resource(entries: Vec<Prefixed>) -> Self {
        PrefixChain { entries, no_match: "no matching prefix found", record_metrics: true }
    }

    fn label(prefix: &[u8]) -> String {
        if prefix.is_empty() { "identity".into() } else { String::from_utf8_lossy(prefix).into_owned() }
    }
}

#[async_trait]
impl Transformer for PrefixChain {
    async fn transform_from_storage(&self, data: Bytes, aad: &[u8]) -> Result<(Bytes, bool), TransformError> {
        for (i, entry) in self.entries.iter().enumerate() {
            if !data.starts_with(&entry.prefix) {
                continue;
            }
            let start = Instant::now();
            let result = entry.transformer.transform_from_storage(data.slice(entry.prefix.len()..), aad).await;
            if entry.prefix.is_empty() && result.is_err() {
                // identity saw encrypted data: let a later provider read it.
                continue;
            }
            if self.record_metrics {
                metrics::record_transformation("from_storage", &Self::label(&entry.prefix), start, result.is_ok());
            }
            return result.map(|(plain, stale)| (plain, stale || i != 0));
        }
        if self.record_metrics {
            metrics::record_transformation("from_storage", "unknown", Instant::now(), false);
        }
        Err(TransformError::NoMatchingPrefix(self.no_match.to_string()))
    }

    async fn transform_to_storage(&self, data: Bytes, aad: &[u8]) -> Result<Bytes, TransformError> {
        let entry = self.entries.first().ok_or_else(|| TransformError::NoMatchingPrefix(self.no_match.into()))?;
        let start = Instant::now();
        let result = entry.transformer.transform_to_storage(data, aad).await;
        if self.record_metrics {
            metrics::record_transformation("to_storage", &Self::label(&entry.prefix), start, result.is_ok());
        }
        let out = result?;
        if entry.prefix.is_empty() {
            return Ok(out);
        }
        let mut prefixed = Vec::with_capacity(entry.prefix.len() + out.len());
        prefixed.extend_from_slice(&entry.prefix);
        prefixed.extend_from_slice(&out);
        Ok(prefixed.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reverses bytes: enough to tell which entry ran.
    struct Reverse;
    #[async_trait]
    impl Transformer for Reverse {
        async fn transform_from_storage(&self, data: Bytes, _: &[u8]) -> Result<(Bytes, bool), TransformError> {
            Ok((data.iter().rev().copied().collect::<Vec<_>>().into(), false))
        }
        async fn transform_to_storage(&self, data: Bytes, _: &[u8]) -> Result<Bytes, TransformError> {
            Ok(data.iter().rev().copied().collect::<Vec<_>>().into())
        }
    }

    fn entry(prefix: &str, t: Arc<dyn Transformer>) -> Prefixed {
        Prefixed { prefix: prefix.as_bytes().to_vec(), transformer: t }
    }

    #[tokio::test]
    async fn first_entry_writes_any_entry_reads_and_later_ones_are_stale() {
        let chain = PrefixChain::new(
            vec![entry("k8s:enc:a:", Arc::new(Reverse)), entry("", Arc::new(Identity))],
            "no matching prefix found",
        );
        let stored = chain.transform_to_storage(Bytes::from_static(b"abc"), b"/k").await.unwrap();
        assert_eq!(&stored[..], b"k8s:enc:a:cba");
        assert_eq!(chain.transform_from_storage(stored, b"/k").await.unwrap(), (Bytes::from_static(b"abc"), false));
        // Plain data is read by identity, listed second: stale.
        assert_eq!(
            chain.transform_from_storage(Bytes::from_static(b"{}"), b"/k").await.unwrap(),
            (Bytes::from_static(b"{}"), true)
        );
    }

    #[tokio::test]
    async fn identity_first_steps_aside_for_encrypted_data() {
        let chain = PrefixChain::new(
            vec![entry("", Arc::new(Identity)), entry("k8s:enc:a:", Arc::new(Reverse))],
            "no matching prefix found",
        );
        let (plain, stale) = chain.transform_from_storage(Bytes::from_static(b"k8s:enc:a:cba"), b"/k").await.unwrap();
        assert_eq!((&plain[..], stale), (&b"abc"[..], true));
        assert_eq!(&chain.transform_to_storage(Bytes::from_static(b"x"), b"/k").await.unwrap()[..], b"x");
    }

    #[tokio::test]
    async fn unknown_prefix_without_identity_fails() {
        let chain = PrefixChain::new(vec![entry("k8s:enc:a:", Arc::new(Reverse))], "no matching prefix found");
        let err = chain.transform_from_storage(Bytes::from_static(b"{}"), b"/k").await.unwrap_err();
        assert_eq!(err.to_string(), "no matching prefix found");
        let err = Identity.transform_from_storage(Bytes::from_static(b"k8s:enc:b:x"), b"/k").await.unwrap_err();
        assert_eq!(err.to_string(), "identity transformer tried to read encrypted data");
    }
}
