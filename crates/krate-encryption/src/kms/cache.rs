//! Decrypted DEK sources by their encrypted form, so reading many objects written with
//! one DEK asks the KMS plugin once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hkdf::Hkdf;
use parking_lot::Mutex;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::{EncryptedDekSourceType, EncryptedObject};
use crate::TransformError;
use crate::aes::Gcm;
use crate::metrics;

/// Entries unused this long are dropped (upstream's cache TTL).
const TTL: Duration = Duration::from_secs(24 * 3600);
pub(crate) const SEED_LEN: usize = 32;
const INFO_LEN: usize = 32;

/// Decrypts (and, for the current seed, encrypts) values of one DEK source.
pub(crate) enum Dek {
    /// HKDF_SHA256_XNONCE_AES_GCM_SEED: each value is info ‖ nonce ‖ sealed, with an
    /// AES-256-GCM key derived as HKDF-Expand(SHA-256, seed, info).
    Seed { seed: Vec<u8>, provider: String },
    /// AES_GCM_KEY: each value is nonce ‖ sealed under the DEK itself.
    Key(Gcm),
}

impl Dek {
    pub(crate) fn new(kind: EncryptedDekSourceType, plain: Vec<u8>, provider: &str) -> Result<Self, TransformError> {
        match kind {
            EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed => {
                if plain.len() < SEED_LEN {
                    return Err(TransformError::kms(provider, format!("invalid seed length {}", plain.len())));
                }
                Ok(Dek::Seed { seed: plain, provider: provider.into() })
            }
            EncryptedDekSourceType::AesGcmKey => Gcm::new(format!("KMS provider {provider}"), &plain)
                .map(Dek::Key)
                .map_err(|e| TransformError::kms(provider, e)),
        }
    }

    fn derived(seed: &[u8], info: &[u8], provider: &str) -> Result<Gcm, TransformError> {
        let hk =
            Hkdf::<Sha256>::from_prk(seed).map_err(|_| TransformError::kms(provider, "seed too short for HKDF"))?;
        let mut key = [0u8; 32];
        hk.expand(info, &mut key).map_err(|_| TransformError::kms(provider, "HKDF expand failed"))?;
        Gcm::new(format!("KMS provider {provider}"), &key).map_err(|e| TransformError::kms(provider, e))
    }

    pub(crate) fn seal(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, TransformError> {
        match self {
            Dek::Seed { seed, provider } => {
                let mut info = [0u8; INFO_LEN];
                rand::rng().fill_bytes(&mut info);
                let sealed = Self::derived(seed, &info, provider)?.seal(data, aad)?;
                let mut out = Vec::with_capacity(INFO_LEN + sealed.len());
                out.extend_from_slice(&info);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
            Dek::Key(gcm) => gcm.seal(data, aad),
        }
    }

    pub(crate) fn open(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, TransformError> {
        match self {
            Dek::Seed { seed, provider } => {
                if data.len() < INFO_LEN {
                    return Err(TransformError::kms(provider, "the stored data was shorter than the required size"));
                }
                let (info, sealed) = data.split_at(INFO_LEN);
                Self::derived(seed, info, provider)?.open(sealed, aad)
            }
            Dek::Key(gcm) => gcm.open(data, aad),
        }
    }
}

/// What identifies a DEK source: its type, encrypted form, key ID and annotations.
pub(crate) fn cache_key(obj: &EncryptedObject) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(&obj.encrypted_dek_source_type.to_le_bytes());
    field(&obj.encrypted_dek_source);
    field(obj.key_id.as_bytes());
    for (k, v) in &obj.annotations {
        field(k.as_bytes());
        field(v);
    }
    h.finalize().into()
}

/// A DEK and when it was last used.
type Entry = (Arc<Dek>, Instant);

pub(crate) struct DekCache {
    provider: String,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

impl DekCache {
    pub(crate) fn new(provider: &str) -> Self {
        DekCache { provider: provider.into(), entries: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn get(&self, key: &[u8; 32]) -> Option<Arc<Dek>> {
        let mut entries = self.entries.lock();
        let entry = entries.get_mut(key)?;
        entry.1 = Instant::now();
        Some(entry.0.clone())
    }

    pub(crate) fn insert(&self, key: [u8; 32], dek: Arc<Dek>) {
        let mut entries = self.entries.lock();
        let now = Instant::now();
        entries.retain(|_, (_, used)| now.duration_since(*used) < TTL);
        entries.insert(key, (dek, now));
        metrics::DEK_SOURCE_CACHE_SIZE.with_label_values(&[&self.provider]).set(entries.len() as i64);
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_values_round_trip_and_bind_the_key_path() {
        let dek = Dek::new(EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed, vec![5u8; 32], "p").unwrap();
        let sealed = dek.seal(b"data", b"/registry/secrets/a/b").unwrap();
        assert_eq!(sealed.len(), INFO_LEN + 12 + 4 + 16);
        assert_eq!(dek.open(&sealed, b"/registry/secrets/a/b").unwrap(), b"data");
        assert!(dek.open(&sealed, b"/registry/secrets/a/c").is_err());
        let other = Dek::new(EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed, vec![6u8; 32], "p").unwrap();
        assert!(other.open(&sealed, b"/registry/secrets/a/b").is_err());
    }

    #[test]
    fn cache_key_covers_every_identifying_field() {
        let base = EncryptedObject { encrypted_dek_source: vec![1], key_id: "k".into(), ..Default::default() };
        let mut other_key = base.clone();
        other_key.key_id = "k2".into();
        let mut other_ann = base.clone();
        other_ann.annotations.insert("a.example.com".into(), vec![1]);
        assert_ne!(cache_key(&base), cache_key(&other_key));
        assert_ne!(cache_key(&base), cache_key(&other_ann));
        let mut data_only = base.clone();
        data_only.encrypted_data = vec![9, 9];
        assert_eq!(cache_key(&base), cache_key(&data_only), "the data itself is not part of the key");
    }
}
