//! Encryption at rest with the `krate` binary and kubectl: Secrets are ciphertext in the
//! database file, a key rotation by configuration reload, and re-encryption with
//! `kubectl get secrets -A -o json | kubectl replace -f -`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Server, free_port, kubectl_binary};

fn key(fill: u8) -> String {
    // base64 of 32 bytes of `fill`, without a base64 crate: 32 bytes = 10 groups of 3 + 2.
    let bytes = [fill; 32];
    let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(table[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn config(keys: &[(&str, u8)], identity: bool) -> String {
    let keys: Vec<String> = keys.iter().map(|(n, f)| format!("{{name: {n}, secret: \"{}\"}}", key(*f))).collect();
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {{keys: [{}]}}\n{}",
        keys.join(", "),
        if identity { "  - identity: {}\n" } else { "" }
    )
}

/// Every live Secret's stored value, from the database file.
fn stored_secrets(data: &Path) -> Vec<(String, Vec<u8>)> {
    let conn = rusqlite::Connection::open_with_flags(
        data.join("server/db/state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the database file");
    let mut stmt = conn
        .prepare("SELECT CAST(latest.key AS TEXT), log.value FROM latest JOIN log ON log.rev = latest.rev WHERE latest.key >= CAST('/registry/secrets/' AS BLOB) AND latest.key < CAST('/registry/secrets0' AS BLOB)")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))).unwrap().map(Result::unwrap).collect()
}

fn reloads(srv: &Server) -> usize {
    let metrics = srv.kubectl_ok(&["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_encryption_config_controller_automatic_reloads_total")
                && l.contains("status=\"success\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

#[test]
fn kubectl_replace_reencrypts_every_secret_after_a_key_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = dir.path().join("encryption.yaml");
    std::fs::write(&cfg, config(&[("key1", 1)], true)).unwrap();
    let cfg_arg = cfg.to_str().unwrap();
    let port = free_port();
    let args = ["--encryption-provider-config", cfg_arg, "--encryption-provider-config-automatic-reload"];
    let srv = Server::start_with(&data, port, &args);

    for (ns, name) in [("default", "one"), ("default", "two"), ("kube-system", "three")] {
        srv.kubectl_ok(&["create", "secret", "generic", name, "-n", ns, "--from-literal=password=topsecret-value"]);
    }
    let stored = stored_secrets(&data);
    // The three, and the join token's bootstrap-token Secret the server made at start.
    assert_eq!(stored.len(), 4, "{:?}", stored.iter().map(|s| &s.0).collect::<Vec<_>>());
    for (k, v) in &stored {
        assert!(v.starts_with(b"k8s:enc:aescbc:v1:key1:"), "{k}");
        assert!(!v.windows(15).any(|w| w == b"topsecret-value") && !v.windows(6).any(|w| w == b"\"kind\""), "{k}");
    }
    assert_eq!(srv.kubectl_ok(&["get", "secret", "one", "-o", "jsonpath={.data.password}"]), "dG9wc2VjcmV0LXZhbHVl");

    // Rotate: key2 writes, key1 still reads. The server picks the file up by itself.
    let before = reloads(&srv);
    std::fs::write(&cfg, config(&[("key2", 2), ("key1", 1)], false)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while reloads(&srv) <= before {
        assert!(Instant::now() < deadline, "configuration not reloaded: {}", srv.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{k} get secrets -A -o json | {k} replace -f -", k = kubectl_binary()))
        .env("KUBECONFIG", srv.kubeconfig())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).matches("replaced").count(), 4);
    for (k, v) in stored_secrets(&data) {
        assert!(v.starts_with(b"k8s:enc:aescbc:v1:key2:"), "{k} not re-encrypted");
    }

    // key1 can go now: a restart with key2 alone reads every Secret.
    srv.stop();
    std::fs::write(&cfg, config(&[("key2", 2)], false)).unwrap();
    let srv = Server::start_with(&data, port, &args[..2]);
    let names = srv.kubectl_ok(&["get", "secrets", "-A", "-o", "jsonpath={.items[*].metadata.name}"]);
    let mut names: Vec<&str> = names.split_whitespace().filter(|n| !n.starts_with("bootstrap-token-")).collect();
    names.sort();
    assert_eq!(names, ["one", "three", "two"]);
    assert_eq!(
        srv.kubectl_ok(&["get", "secret", "three", "-n", "kube-system", "-o", "jsonpath={.data.password}"]),
        "dG9wc2VjcmV0LXZhbHVl"
    );
    srv.stop();
}

#[test]
fn an_invalid_configuration_stops_start_up_with_upstreams_message() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("encryption.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [\"*.*\"]\n  providers: [{identity: {}}]\n- resources: [secrets]\n  providers: [{identity: {}}]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_krate"))
        .args(["server", "--disable-agent", "--bind-address", "127.0.0.1", "--secure-port", &free_port().to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--encryption-provider-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("resource \\\"secrets\\\" is masked by earlier rule \\\"*.*\\\"")
            || err.contains("resource \"secrets\" is masked by earlier rule \"*.*\""),
        "{err}"
    );
}
