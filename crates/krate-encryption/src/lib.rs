//! Encryption at rest, as kube-apiserver's `--encryption-provider-config`.
//!
//! An `apiserver.config.k8s.io/v1` EncryptionConfiguration ([`config`]) names, per
//! resource, an ordered list of providers: the first encrypts every write, all of them
//! decrypt, each recognised by the prefix it puts on stored values
//! (`k8s:enc:aescbc:v1:KEY:`, `k8s:enc:aesgcm:v1:KEY:`, `k8s:enc:secretbox:v1:KEY:`,
//! `k8s:enc:kms:v2:PROVIDER:`; identity stores plain data). [`EncryptedStore`] is a
//! [`krate_store::Store`] that applies them between the registry and the real store, so
//! gets, lists, watches and writes all pass through it and nothing above it changes.
//!
//! KMS v2 ([`kms`]) is upstream's envelope: a local seed (DEK source) encrypted once by
//! the KMS plugin over gRPC, keys derived per write, the encrypted seed stored beside
//! each value, and decrypted seeds cached so reads call the plugin once per seed.

pub mod aes;
pub mod config;
mod error;
pub mod kms;
pub mod metrics;
mod providers;
pub mod reload;
pub mod secretbox;
mod store;
pub mod transformer;

#[cfg(feature = "testing")]
pub mod testing;

pub use config::{EncryptionConfiguration, GroupResource};
pub use error::{ConfigError, TransformError};
pub use providers::Providers;
pub use reload::{Encryption, EncryptionOptions};
pub use store::{EncryptedStore, KeyResolver};
