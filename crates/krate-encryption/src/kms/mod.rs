//! KMS v2: upstream's envelope encryption with a KMS plugin over gRPC on a unix socket.

mod cache;
mod client;
mod envelope;

/// k8s.io/kms/apis/v2 (package v2): Status, Encrypt, Decrypt.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v2;

pub use client::KmsClient;
pub use envelope::{KmsOptions, KmsV2};

/// Stored after the `k8s:enc:kms:v2:NAME:` prefix (upstream's
/// apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2 EncryptedObject).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EncryptedObject {
    #[prost(bytes = "vec", tag = "1")]
    pub encrypted_data: Vec<u8>,
    #[prost(string, tag = "2")]
    pub key_id: String,
    #[prost(bytes = "vec", tag = "3")]
    pub encrypted_dek_source: Vec<u8>,
    #[prost(btree_map = "string, bytes", tag = "4")]
    pub annotations: std::collections::BTreeMap<String, Vec<u8>>,
    #[prost(enumeration = "EncryptedDekSourceType", tag = "5")]
    pub encrypted_dek_source_type: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum EncryptedDekSourceType {
    /// The DEK itself, an AES-GCM key.
    AesGcmKey = 0,
    /// A seed from which a key is derived per write (HKDF-SHA256, 32-byte info).
    HkdfSha256XnonceAesGcmSeed = 1,
}
