//! Encryption at rest through the real server: values in the SQLite file (and in etcd)
//! are ciphertext with upstream's prefixes, reads decrypt, a restart asks the KMS plugin
//! once per DEK, and rotation plus an unchanged replace re-encrypts.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use krate_apiserver::start::{Options, Running, start};
use krate_encryption::kms::{EncryptedObject, KmsOptions};
use krate_encryption::testing::TestKmsPlugin;
use krate_encryption::{Encryption, EncryptionOptions};
use krate_store::sqlite::{SqliteConfig, SqliteStore};
use krate_store::{DynStore, Store};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use prost::Message;

const PLAIN: &[u8] = b"topsecret-value";

fn key(fill: u8, len: usize) -> String {
    base64::engine::general_purpose::STANDARD.encode(vec![fill; len])
}

fn config(resources: &[(&str, &str)]) -> String {
    let mut out = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n".to_string();
    for (res, providers) in resources {
        out.push_str(&format!("- resources: {res}\n  providers:\n{providers}"));
    }
    out
}

fn aescbc(name: &str, fill: u8) -> String {
    format!("  - aescbc: {{keys: [{{name: {name}, secret: \"{}\"}}]}}\n", key(fill, 32))
}

fn kms(endpoint: &str) -> String {
    format!("  - kms: {{apiVersion: v2, name: kms1, endpoint: \"{endpoint}\", timeout: 3s}}\n")
}

const IDENTITY: &str = "  - identity: {}\n";

fn fast_options(path: &Path, reload: bool) -> EncryptionOptions {
    let mut opts = EncryptionOptions::new(path, reload);
    opts.reload_interval = Duration::from_millis(100);
    opts.kms = KmsOptions {
        poll_healthy: Duration::from_millis(200),
        poll_unhealthy: Duration::from_millis(200),
        health_ok_ttl: Duration::ZERO,
        health_err_ttl: Duration::ZERO,
        ..KmsOptions::default()
    };
    opts
}

async fn serve(dir: &Path, store: DynStore, encryption: Arc<Encryption>) -> Running {
    let mut opts = Options::new(dir.to_path_buf(), store);
    opts.event_ttl = Duration::from_secs(60);
    opts.encryption = Some(encryption);
    start(opts).await.expect("server starts")
}

async fn sqlite(dir: &Path) -> DynStore {
    Arc::new(SqliteStore::open(SqliteConfig::new(dir.join("state.db"))).await.expect("open store"))
}

async fn client(running: &Running) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&running.kubeconfig_path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

fn secret(name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(BTreeMap::from([("password".to_string(), ByteString(PLAIN.to_vec()))])),
        ..Default::default()
    }
}

/// The live value of `key` as it lies in the SQLite file.
fn raw_sqlite(dir: &Path, key: &str) -> Vec<u8> {
    let conn = rusqlite::Connection::open_with_flags(dir.join("state.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open database file");
    conn.query_row(
        "SELECT log.value FROM latest JOIN log ON log.rev = latest.rev WHERE latest.key = ?1",
        [key.as_bytes()],
        |row| row.get::<_, Vec<u8>>(0),
    )
    .unwrap_or_else(|e| panic!("{key}: {e}"))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn assert_ciphertext(raw: &[u8], prefix: &str) {
    assert!(
        raw.starts_with(prefix.as_bytes()),
        "expected {prefix}, got {:?}",
        String::from_utf8_lossy(&raw[..40.min(raw.len())])
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(PLAIN);
    assert!(!contains(raw, PLAIN) && !contains(raw, b64.as_bytes()), "plaintext in the stored value");
    assert!(!contains(raw, b"\"kind\""), "JSON in the stored value");
}

fn kms_key_id(raw: &[u8]) -> String {
    let prefix = b"k8s:enc:kms:v2:kms1:";
    assert!(raw.starts_with(prefix));
    EncryptedObject::decode(&raw[prefix.len()..]).expect("EncryptedObject").key_id
}

/// Runs one "process lifetime" of the server on its own runtime: dropping the runtime
/// ends every task, releasing the store, as a restart would.
fn lifetime<T>(f: impl Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let out = rt.block_on(f);
    rt.shutdown_timeout(Duration::from_secs(10));
    out
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_encrypted_per_resource_rule_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("encryption.yaml");
    let gcm = format!("  - aesgcm: {{keys: [{{name: g1, secret: \"{}\"}}]}}\n", key(2, 16));
    let sbox = format!("  - secretbox: {{keys: [{{name: s1, secret: \"{}\"}}]}}\n", key(3, 32));
    std::fs::write(
        &cfg,
        config(&[
            ("[secrets]", &format!("{}{IDENTITY}", aescbc("key1", 1))),
            ("[configmaps]", &gcm),
            ("[\"*.apps\"]", &sbox),
        ]),
    )
    .unwrap();
    let encryption = Encryption::load(fast_options(&cfg, false)).await.unwrap();
    let running = serve(dir.path(), sqlite(dir.path()).await, encryption).await;
    let c = client(&running).await;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
    secrets.create(&PostParams::default(), &secret("s1")).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta { name: Some("c1".into()), ..Default::default() },
        data: Some(BTreeMap::from([("k".to_string(), String::from_utf8(PLAIN.to_vec()).unwrap())])),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let deploys: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(c.clone(), "default");
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "d1"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "topsecret-value"}]}}}
    }))
    .unwrap();
    deploys.create(&PostParams::default(), &d).await.unwrap();

    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/secrets/default/s1"), "k8s:enc:aescbc:v1:key1:");
    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/configmaps/default/c1"), "k8s:enc:aesgcm:v1:g1:");
    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/apps/deployments/default/d1"), "k8s:enc:secretbox:v1:s1:");
    // Not configured: plain JSON.
    assert!(raw_sqlite(dir.path(), "/registry/namespaces/default").starts_with(b"{"));

    // Every read path decrypts: get, list, watch (through the watch cache).
    assert_eq!(secrets.get("s1").await.unwrap().data.unwrap()["password"].0, PLAIN);
    let list = secrets.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let cached = cms.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(cached.items[0].data.as_ref().unwrap()["k"].as_bytes(), PLAIN);
    let mut watch = Box::pin(secrets.watch(&kube::api::WatchParams::default(), "0").await.expect("watch"));
    use futures::StreamExt;
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next()).await.expect("an event").unwrap().unwrap();
    match first {
        kube::api::WatchEvent::Added(s) => assert_eq!(s.data.unwrap()["password"].0, PLAIN),
        other => panic!("{other:?}"),
    }
    secrets.create(&PostParams::default(), &secret("s2")).await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), watch.next()).await.expect("an event").unwrap().unwrap();
    assert!(matches!(next, kube::api::WatchEvent::Added(s) if s.metadata.name.as_deref() == Some("s2")));

    // Upstream's metric, by provider prefix.
    let metrics = prometheus::gather();
    let ops = metrics.iter().find(|m| m.name() == "apiserver_storage_transformation_operations_total").expect("metric");
    assert!(ops.get_metric().iter().any(|m| m.get_label().iter().any(|l| l.value() == "k8s:enc:aescbc:v1:")));
}

#[test]
fn kms_v2_restart_asks_once_per_dek_and_rotation_reencrypts_on_replace() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let cfg = dir.path().join("encryption.yaml");
    // The plugin lives across server lifetimes, on its own runtime.
    let kms_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let plugin = kms_rt.block_on(TestKmsPlugin::start(dir.path().join("kms.sock"), "key-1")).unwrap();
    std::fs::write(&cfg, config(&[("[secrets]", &format!("{}{IDENTITY}", kms(&plugin.endpoint())))])).unwrap();
    const N: usize = 20;

    lifetime(async {
        let encryption = Encryption::load(fast_options(&cfg, false)).await.unwrap();
        let running = serve(&data, sqlite(&data).await, encryption).await;
        let secrets: Api<Secret> = Api::namespaced(client(&running).await, "default");
        for i in 0..N {
            secrets.create(&PostParams::default(), &secret(&format!("s{i}"))).await.unwrap();
        }
        for i in 0..N {
            let raw = raw_sqlite(&data, &format!("/registry/secrets/default/s{i}"));
            assert_ciphertext(&raw, "k8s:enc:kms:v2:kms1:");
            assert_eq!(kms_key_id(&raw), "key-1");
        }
        assert_eq!(plugin.encrypt_calls(), 1, "one DEK for all writes");
        assert_eq!(plugin.decrypt_calls(), 0);
    });

    let encrypts_before_restart = plugin.encrypt_calls();
    lifetime(async {
        let encryption = Encryption::load(fast_options(&cfg, false)).await.unwrap();
        let running = serve(&data, sqlite(&data).await, encryption.clone()).await;
        let c = client(&running).await;
        let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
        let all: Api<Secret> = Api::all(c.clone());
        let list = secrets.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), N);
        assert!(list.items.iter().all(|s| s.data.as_ref().unwrap()["password"].0 == PLAIN));
        for i in 0..N {
            secrets.get(&format!("s{i}")).await.unwrap();
        }
        assert_eq!(plugin.decrypt_calls(), 1, "Decrypt once per DEK (one), not once per Secret ({N})");

        // /healthz/kms-provider-0 (no reload: one check per provider).
        let health = c.request_text(http::Request::get("/healthz/kms-provider-0").body(vec![]).unwrap()).await.unwrap();
        assert_eq!(health, "ok");
        let verbose = c.request_text(http::Request::get("/readyz?verbose").body(vec![]).unwrap()).await.unwrap();
        assert!(verbose.contains("[+]kms-provider-0 ok"), "{verbose}");

        // Replacing an unchanged, current Secret writes nothing.
        let s0 = secrets.get("s0").await.unwrap();
        let same = secrets.replace("s0", &PostParams::default(), &s0).await.unwrap();
        assert_eq!(same.metadata.resource_version, s0.metadata.resource_version);

        // Rotation: the plugin's key ID changes; the next Status poll brings a new DEK.
        plugin.set_key_id("key-2");
        let kms = encryption.providers().kms()[0].clone();
        wait_for("the new key ID", || kms.current_key_id().as_deref() == Some("key-2")).await;
        assert!(plugin.encrypt_calls() > encrypts_before_restart);
        // `kubectl get secrets -A -o json | kubectl replace -f -`, unchanged objects.
        for s in all.list(&ListParams::default()).await.unwrap().items {
            let name = s.metadata.name.clone().unwrap();
            let ns: Api<Secret> = Api::namespaced(c.clone(), s.metadata.namespace.as_deref().unwrap());
            let replaced = ns.replace(&name, &PostParams::default(), &s).await.unwrap();
            assert_ne!(replaced.metadata.resource_version, s.metadata.resource_version, "stale value rewritten");
        }
        for i in 0..N {
            let raw = raw_sqlite(&data, &format!("/registry/secrets/default/s{i}"));
            assert_ciphertext(&raw, "k8s:enc:kms:v2:kms1:");
            assert_eq!(kms_key_id(&raw), "key-2", "s{i} re-encrypted under the new key");
        }
    });

    // The plugin is down at start: reads are 500s naming the provider, nothing is lost.
    plugin.set_failing(true);
    lifetime(async {
        let encryption = Encryption::load(fast_options(&cfg, false)).await.unwrap();
        let running = serve(&data, sqlite(&data).await, encryption).await;
        let c = client(&running).await;
        let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
        match secrets.get("s1").await {
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
                assert!(s.message.contains("KMS provider kms1"), "{}", s.message);
            }
            other => panic!("expected a 500, got {other:?}"),
        }
        let err = secrets.create(&PostParams::default(), &secret("while-down")).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 500 && s.message.contains("kms1")), "{err:?}");
        let health = c
            .request_status::<serde_json::Value>(http::Request::get("/healthz/kms-provider-0").body(vec![]).unwrap())
            .await;
        assert!(health.is_err(), "unhealthy KMS fails its check");
        plugin.set_failing(false);
        assert_eq!(secrets.get("s1").await.unwrap().data.unwrap()["password"].0, PLAIN);
        assert_eq!(secrets.list(&ListParams::default()).await.unwrap().items.len(), N);
    });
    drop(plugin);
    kms_rt.shutdown_timeout(Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_reload_switches_providers_and_keeps_the_old_on_bad_configs() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("encryption.yaml");
    let kms_sock = dir.path().join("kms.sock");
    let plugin = TestKmsPlugin::start(&kms_sock, "k").await.unwrap();
    std::fs::write(&cfg, config(&[("[secrets]", &format!("{}{IDENTITY}", aescbc("key1", 1)))])).unwrap();
    let encryption = Encryption::load(fast_options(&cfg, true)).await.unwrap();
    let running = serve(dir.path(), sqlite(dir.path()).await, encryption.clone()).await;
    let c = client(&running).await;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
    secrets.create(&PostParams::default(), &secret("a")).await.unwrap();
    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/secrets/default/a"), "k8s:enc:aescbc:v1:key1:");

    // New config: KMS first, key1 still readable.
    let before = Arc::as_ptr(&encryption.providers());
    std::fs::write(
        &cfg,
        config(&[("[secrets]", &format!("{}{}{IDENTITY}", kms(&plugin.endpoint()), aescbc("key1", 1)))]),
    )
    .unwrap();
    wait_for("the new configuration", || Arc::as_ptr(&encryption.providers()) != before).await;
    secrets.create(&PostParams::default(), &secret("b")).await.unwrap();
    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/secrets/default/b"), "k8s:enc:kms:v2:kms1:");
    assert_eq!(secrets.get("a").await.unwrap().data.unwrap()["password"].0, PLAIN);
    let health = c.request_text(http::Request::get("/healthz/kms-providers").body(vec![]).unwrap()).await.unwrap();
    assert_eq!(health, "ok");

    // Bad configs are refused: duplicate KMS names, a key of the wrong size.
    let failures = || {
        prometheus::gather()
            .iter()
            .find(|m| m.name() == "apiserver_encryption_config_controller_automatic_reloads_total")
            .map(|m| {
                m.get_metric()
                    .iter()
                    .filter(|x| x.get_label().iter().any(|l| l.value() == "failure"))
                    .map(|x| x.get_counter().get_value())
                    .sum::<f64>()
            })
            .unwrap_or(0.0)
    };
    let current = Arc::as_ptr(&encryption.providers());
    for bad in [
        config(&[("[secrets]", &format!("{}{}", kms(&plugin.endpoint()), kms(&plugin.endpoint())))]),
        config(&[("[secrets]", &format!("  - aescbc: {{keys: [{{name: k, secret: \"{}\"}}]}}\n", key(1, 20)))]),
    ] {
        let f0 = failures();
        std::fs::write(&cfg, bad).unwrap();
        wait_for("the refusal", || failures() > f0).await;
        assert_eq!(Arc::as_ptr(&encryption.providers()), current, "old providers kept");
    }
    secrets.create(&PostParams::default(), &secret("c")).await.unwrap();
    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/secrets/default/c"), "k8s:enc:kms:v2:kms1:");

    // Re-encryption: an unchanged replace rewrites the aescbc Secret with KMS.
    let a = secrets.get("a").await.unwrap();
    secrets.replace("a", &PostParams::default(), &a).await.unwrap();
    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/secrets/default/a"), "k8s:enc:kms:v2:kms1:");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_values_stay_readable_with_identity_and_are_rewritten_encrypted() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(dir.path()).await;
    // A Secret written before encryption was configured.
    let plain = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "old", "namespace": "default",
        "uid": "8a1d7c3e-0000-4000-8000-000000000001", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "data": {"password": base64::engine::general_purpose::STANDARD.encode(PLAIN)}, "type": "Opaque"});
    store.create("/registry/secrets/default/old", serde_json::to_vec(&plain).unwrap().into(), 0).await.unwrap();
    let cfg = dir.path().join("encryption.yaml");
    std::fs::write(&cfg, config(&[("[secrets]", &format!("{}{IDENTITY}", aescbc("key1", 1)))])).unwrap();
    let encryption = Encryption::load(fast_options(&cfg, false)).await.unwrap();
    let running = serve(dir.path(), store, encryption).await;
    let secrets: Api<Secret> = Api::namespaced(client(&running).await, "default");
    let old = secrets.get("old").await.unwrap();
    assert_eq!(old.data.as_ref().unwrap()["password"].0, PLAIN);
    secrets.replace("old", &PostParams::default(), &old).await.unwrap();
    assert_ciphertext(&raw_sqlite(dir.path(), "/registry/secrets/default/old"), "k8s:enc:aescbc:v1:key1:");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_values_are_encrypted() {
    use krate_store::etcd::EtcdStore;
    use krate_store::testsuite::etcd_process::EtcdCluster;
    let etcd = EtcdCluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("encryption.yaml");
    std::fs::write(&cfg, config(&[("[\"*.*\"]", &aescbc("etcdkey", 4))])).unwrap();
    let store: DynStore = Arc::new(EtcdStore::connect(&etcd.endpoints()).await.expect("connect"));
    let raw = EtcdStore::connect(&etcd.endpoints()).await.expect("connect");
    let encryption = Encryption::load(fast_options(&cfg, false)).await.unwrap();
    let running = serve(dir.path(), store, encryption).await;
    let secrets: Api<Secret> = Api::namespaced(client(&running).await, "default");
    secrets.create(&PostParams::default(), &secret("e1")).await.unwrap();
    let (kv, _) = raw.get("/registry/secrets/default/e1", 0).await.unwrap();
    assert_ciphertext(&kv.expect("stored").value, "k8s:enc:aescbc:v1:etcdkey:");
    // "*.*" covers everything, namespaces included.
    let (ns, _) = raw.get("/registry/namespaces/default", 0).await.unwrap();
    assert!(ns.expect("stored").value.starts_with(b"k8s:enc:aescbc:v1:etcdkey:"));
    assert_eq!(secrets.get("e1").await.unwrap().data.unwrap()["password"].0, PLAIN);
    assert_eq!(secrets.list(&ListParams::default()).await.unwrap().items.len(), 1);
    drop(running);
    drop(etcd);
}
