//! The sandbox (pause) image, built locally from the host's static busybox so no
//! registry is ever needed: `sh` sleeping until TERM, as an OCI layout tarball that
//! containerd imports.

use sha2::{Digest, Sha256};

use super::ustar::Tar;

/// The static busybox the image is made from (Debian's busybox-static).
pub const BUSYBOX: &str = "/bin/busybox";
/// The name containerd knows the sandbox image by (its config's sandbox_image).
pub const PAUSE_IMAGE: &str = "krate.local/pause:1";

/// Holds the sandbox until TERM (PID 1 ignores signals it does not handle, hence the
/// trap; `wait` lets the trap run at once rather than after the sleep).
const PAUSE_SCRIPT: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

/// An OCI layout tarball holding `name`: a root filesystem with `busybox` and the
/// given applet links in /bin, and `cmd` as the image's command.
pub fn oci_layout(name: &str, busybox: &[u8], applets: &[&str], cmd: &[&str]) -> Vec<u8> {
    let mut layer = Tar::new();
    layer.dir("bin/");
    layer.file("bin/busybox", 0o755, busybox);
    for applet in applets {
        layer.symlink(&format!("bin/{applet}"), "busybox");
    }
    let layer = layer.finish();
    let layer_digest = sha256(&layer);
    let arch = go_arch();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": { "Cmd": cmd, "Env": ["PATH=/bin"] },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    }))
    .expect("json");
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len() },
        "layers": [{ "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len() }],
    }))
    .expect("json");
    let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(&manifest),
            "size": manifest.len(),
            "platform": { "architecture": arch, "os": "linux" },
            "annotations": { "io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag },
        }],
    }))
    .expect("json");

    let mut out = Tar::new();
    out.file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#);
    out.file("index.json", 0o644, &index);
    out.dir("blobs/");
    out.dir("blobs/sha256/");
    for blob in [&layer, &config, &manifest] {
        let digest = sha256(blob);
        out.file(&format!("blobs/sha256/{}", &digest["sha256:".len()..]), 0o644, blob);
    }
    out.finish()
}

/// The pause image's tarball, from the host's busybox.
pub async fn build() -> std::io::Result<Vec<u8>> {
    let busybox = tokio::fs::read(BUSYBOX).await?;
    tokio::task::spawn_blocking(move || {
        oci_layout(PAUSE_IMAGE, &busybox, &["sh", "sleep"], &["/bin/sh", "-c", PAUSE_SCRIPT])
    })
    .await
    .map_err(std::io::Error::other)
}

pub fn sha256(data: &[u8]) -> String {
    let hash = Sha256::digest(data);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Go's name for this architecture, as image configs spell it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_deterministic_and_names_the_image() {
        let a = oci_layout("krate.local/x:2", b"bin", &["sh"], &["/bin/sh"]);
        let b = oci_layout("krate.local/x:2", b"bin", &["sh"], &["/bin/sh"]);
        assert_eq!(sha256(&a), sha256(&b));
        let text = String::from_utf8_lossy(&a);
        assert!(text.contains(r#""io.containerd.image.name":"krate.local/x:2""#));
        assert!(text.contains(r#""org.opencontainers.image.ref.name":"2""#));
    }
}
