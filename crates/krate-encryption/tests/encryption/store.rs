//! EncryptedStore over a real SQLite store: every path a value takes in and out.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use krate_encryption::kms::KmsOptions;
use krate_encryption::{EncryptedStore, Encryption, EncryptionConfiguration, GroupResource, KeyResolver, Providers};
use krate_store::sqlite::{SqliteConfig, SqliteStore};
use krate_store::{DynStore, EventKind, RangeRequest, Store, StoreError, WatchEvent, WatchOptions};

struct Secrets;
impl KeyResolver for Secrets {
    fn resolve(&self, key: &str) -> Option<GroupResource> {
        key.starts_with("/registry/secrets/").then(|| GroupResource::new("", "secrets"))
    }
}

fn encryption(keys: &[(&str, u8)]) -> Arc<Encryption> {
    let keys: Vec<String> = keys
        .iter()
        .map(|(n, f)| {
            format!("{{name: {n}, secret: \"{}\"}}", base64::engine::general_purpose::STANDARD.encode([*f; 32]))
        })
        .collect();
    let yaml = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {{keys: [{}]}}\n",
        keys.join(", ")
    );
    let config = EncryptionConfiguration::parse(yaml.as_bytes()).unwrap();
    Encryption::fixed(Providers::build(&config, &KmsOptions::default()).unwrap())
}

#[tokio::test]
async fn values_are_encrypted_in_and_decrypted_out_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let inner: DynStore = Arc::new(SqliteStore::open(SqliteConfig::new(dir.path().join("s.db"))).await.unwrap());
    let store = EncryptedStore::new(inner.clone(), encryption(&[("k1", 1)]), Arc::new(Secrets));
    let key = "/registry/secrets/ns/a";
    let mut watch = store.watch("/registry/", 0, WatchOptions::default()).await.unwrap();

    let r1 = store.create(key, Bytes::from_static(b"v1"), 0).await.unwrap();
    store.create("/registry/pods/ns/p", Bytes::from_static(b"pod"), 0).await.unwrap();
    let r2 = store.update(key, Bytes::from_static(b"v2"), r1, 0).await.unwrap();
    // Raw: ciphertext for the Secret, plain for the Pod.
    let raw = inner.get(key, 0).await.unwrap().0.unwrap().value;
    assert!(raw.starts_with(b"k8s:enc:aescbc:v1:k1:"));
    assert_eq!(&inner.get("/registry/pods/ns/p", 0).await.unwrap().0.unwrap().value[..], b"pod");
    // get, range, get at an older revision.
    assert_eq!(&store.get(key, 0).await.unwrap().0.unwrap().value[..], b"v2");
    assert_eq!(&store.get(key, r1).await.unwrap().0.unwrap().value[..], b"v1");
    let all = store.range(RangeRequest::prefix("/registry/")).await.unwrap();
    assert_eq!(all.kvs.iter().map(|kv| &kv.value[..]).collect::<Vec<_>>(), [&b"pod"[..], b"v2"]);
    // A conflict hands the current value back decrypted.
    match store.update(key, Bytes::from_static(b"v3"), r1, 0).await {
        Err(StoreError::Conflict { current: Some(kv), .. }) => assert_eq!(&kv.value[..], b"v2"),
        other => panic!("{other:?}"),
    }
    let (_, deleted) = store.delete(key, Some(r2)).await.unwrap();
    assert_eq!(&deleted.value[..], b"v2");

    // The watch: values and previous values decrypted, in order.
    let mut seen = Vec::new();
    while seen.len() < 4 {
        match tokio::time::timeout(Duration::from_secs(5), watch.next()).await.expect("event").unwrap().unwrap() {
            WatchEvent::Event(ev) => seen.push((ev.kind, ev.kv.value.clone(), ev.prev.map(|p| p.value))),
            WatchEvent::Progress(_) => {}
        }
    }
    assert_eq!(seen[0], (EventKind::Put, Bytes::from_static(b"v1"), None));
    assert_eq!(seen[2], (EventKind::Put, Bytes::from_static(b"v2"), Some(Bytes::from_static(b"v1"))));
    assert_eq!(seen[3], (EventKind::Delete, Bytes::new(), Some(Bytes::from_static(b"v2"))));
}

#[tokio::test]
async fn stale_after_rotation_and_unreadable_without_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let inner: DynStore = Arc::new(SqliteStore::open(SqliteConfig::new(dir.path().join("s.db"))).await.unwrap());
    let old = EncryptedStore::new(inner.clone(), encryption(&[("k1", 1)]), Arc::new(Secrets));
    let key = "/registry/secrets/ns/a";
    let rev = old.create(key, Bytes::from_static(b"v"), 0).await.unwrap();
    assert!(!old.is_stale(key, rev).await.unwrap());

    let rotated = EncryptedStore::new(inner.clone(), encryption(&[("k2", 2), ("k1", 1)]), Arc::new(Secrets));
    assert!(rotated.is_stale(key, rev).await.unwrap(), "written with a key that no longer writes");
    let rev = rotated.update(key, Bytes::from_static(b"v"), rev, 0).await.unwrap();
    assert!(!rotated.is_stale(key, rev).await.unwrap());
    assert!(inner.get(key, 0).await.unwrap().0.unwrap().value.starts_with(b"k8s:enc:aescbc:v1:k2:"));

    let err = old.get(key, 0).await.unwrap_err().to_string();
    assert!(err.contains("no matching key was found"), "{err}");
}
