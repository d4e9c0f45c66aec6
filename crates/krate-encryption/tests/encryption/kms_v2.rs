//! KMS v2 against a real gRPC plugin on a unix socket (krate_encryption::testing).

use std::time::Duration;

use bytes::Bytes;
use krate_encryption::kms::{EncryptedDekSourceType, EncryptedObject, KmsOptions};
use krate_encryption::testing::TestKmsPlugin;
use krate_encryption::transformer::Transformer;
use krate_encryption::{EncryptionConfiguration, GroupResource, Providers};
use prost::Message;

const PREFIX: &[u8] = b"k8s:enc:kms:v2:kms1:";

fn providers(endpoint: &str) -> Providers {
    let yaml = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - kms: {{apiVersion: v2, name: kms1, endpoint: \"{endpoint}\", timeout: 2s}}\n  - identity: {{}}\n"
    );
    let config = EncryptionConfiguration::parse(yaml.as_bytes()).expect("valid config");
    Providers::build(&config, &KmsOptions::default()).expect("providers")
}

fn secrets(p: &Providers) -> std::sync::Arc<krate_encryption::transformer::PrefixChain> {
    p.for_resource(&GroupResource::new("", "secrets")).expect("configured").clone()
}

async fn plugin(dir: &tempfile::TempDir, key_id: &str) -> TestKmsPlugin {
    TestKmsPlugin::start(dir.path().join("kms.sock"), key_id).await.expect("plugin starts")
}

#[tokio::test]
async fn envelope_layout_prefix_and_one_dek_for_many_writes() {
    let dir = tempfile::tempdir().unwrap();
    let kms = plugin(&dir, "key-1").await;
    let p = providers(&kms.endpoint());
    let chain = secrets(&p);
    let mut stored = Vec::new();
    for i in 0..10 {
        let key = format!("/registry/secrets/default/s{i}");
        let v = chain.transform_to_storage(Bytes::from(format!("{{\"n\":{i}}}")), key.as_bytes()).await.unwrap();
        assert!(v.starts_with(PREFIX));
        stored.push((key, v));
    }
    assert_eq!(kms.encrypt_calls(), 1, "one DEK seed for every write");
    let obj = EncryptedObject::decode(&stored[0].1[PREFIX.len()..]).unwrap();
    assert_eq!(obj.key_id, "key-1");
    assert_eq!(obj.encrypted_dek_source_type, EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed as i32);
    assert_eq!(obj.annotations.get("kms.krate.dev/plugin").map(Vec::as_slice), Some(&b"test"[..]));
    assert!(!obj.encrypted_data.windows(5).any(|w| w == b"\"n\":0"));
    for (i, (key, v)) in stored.iter().enumerate() {
        let (plain, stale) = chain.transform_from_storage(v.clone(), key.as_bytes()).await.unwrap();
        assert_eq!((plain, stale), (Bytes::from(format!("{{\"n\":{i}}}")), false));
    }
    assert_eq!(kms.decrypt_calls(), 0, "the writer's own seed is cached");
    // The key path is authenticated: a value moved to another key does not decrypt.
    assert!(chain.transform_from_storage(stored[0].1.clone(), stored[1].0.as_bytes()).await.is_err());

    // A restart: new providers read everything with one Decrypt.
    let restarted = providers(&kms.endpoint());
    let chain = secrets(&restarted);
    for (key, v) in &stored {
        chain.transform_from_storage(v.clone(), key.as_bytes()).await.unwrap();
    }
    assert_eq!(kms.decrypt_calls(), 1, "one Decrypt per DEK, not per object");
    assert_eq!(restarted.kms()[0].cached_deks(), 1);
}

#[tokio::test]
async fn key_id_change_brings_a_new_dek_and_marks_old_data_stale() {
    let dir = tempfile::tempdir().unwrap();
    let kms = plugin(&dir, "key-1").await;
    let p = providers(&kms.endpoint());
    let chain = secrets(&p);
    let old = chain.transform_to_storage(Bytes::from_static(b"{}"), b"/k").await.unwrap();
    kms.set_key_id("key-2");
    p.kms()[0].refresh().await.unwrap();
    assert_eq!(p.kms()[0].current_key_id().as_deref(), Some("key-2"));
    assert_eq!(kms.encrypt_calls(), 2);
    let new = chain.transform_to_storage(Bytes::from_static(b"{}"), b"/k").await.unwrap();
    assert_eq!(EncryptedObject::decode(&new[PREFIX.len()..]).unwrap().key_id, "key-2");
    assert!(chain.transform_from_storage(old, b"/k").await.unwrap().1, "data under the old key ID is stale");
    assert!(!chain.transform_from_storage(new, b"/k").await.unwrap().1);
    // Unchanged key ID: no new DEK.
    p.kms()[0].refresh().await.unwrap();
    assert_eq!(kms.encrypt_calls(), 2);
}

#[tokio::test]
async fn plugin_failures_are_errors_naming_the_provider_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let kms = plugin(&dir, "key-1").await;
    let p = providers(&kms.endpoint());
    let stored = secrets(&p).transform_to_storage(Bytes::from_static(b"{\"a\":1}"), b"/k").await.unwrap();
    kms.set_failing(true);
    // Cached DEK: reads go on while the plugin is down.
    assert_eq!(&secrets(&p).transform_from_storage(stored.clone(), b"/k").await.unwrap().0[..], b"{\"a\":1}");
    let fresh = providers(&kms.endpoint());
    let err = secrets(&fresh).transform_from_storage(stored.clone(), b"/k").await.unwrap_err().to_string();
    assert!(err.contains("KMS provider kms1") && err.contains("failed to decrypt DEK"), "{err}");
    let err = secrets(&fresh).transform_to_storage(Bytes::from_static(b"{}"), b"/k").await.unwrap_err().to_string();
    assert!(err.contains("KMS provider kms1"), "{err}");
    let health = fresh.kms()[0].check().await.unwrap_err();
    assert!(health.contains("KMS Provider kms1"), "{health}");
    kms.set_failing(false);
    assert_eq!(&secrets(&fresh).transform_from_storage(stored, b"/k").await.unwrap().0[..], b"{\"a\":1}");
}

#[tokio::test]
async fn a_plugin_that_starts_late_is_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kms.sock");
    let p = providers(&format!("unix://{}", socket.display()));
    assert!(secrets(&p).transform_to_storage(Bytes::from_static(b"{}"), b"/k").await.is_err());
    let _kms = TestKmsPlugin::start(&socket, "late").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match secrets(&p).transform_to_storage(Bytes::from_static(b"{}"), b"/k").await {
            Ok(v) => break assert!(v.starts_with(PREFIX)),
            Err(e) if tokio::time::Instant::now() > deadline => panic!("plugin never used: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
