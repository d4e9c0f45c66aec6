//! Images on the node: importing tarballs into containerd's CRI namespace (air-gapped
//! installs, `krate images import`), and making sure a container's image is present as
//! its imagePullPolicy says, checking ImageStatus before any pull.

use std::path::{Path, PathBuf};

use k8s_cri::v1::{ImageSpec, ImageStatusRequest, PullImageRequest};
use tokio::process::Command;

use super::cri::Cri;

/// containerd's namespace for CRI images.
const CRI_NAMESPACE: &str = "k8s.io";

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot run ctr to import {file}: {source}")]
    Spawn { file: PathBuf, source: std::io::Error },
    #[error("importing {file} failed: {output}")]
    Failed { file: PathBuf, output: String },
}

/// Imports one OCI-layout or docker-archive tarball through containerd's own import
/// (CRI has no import call).
pub async fn import(socket: &Path, file: &Path) -> Result<(), ImportError> {
    let output = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", CRI_NAMESPACE, "images", "import"])
        .arg(file)
        .output()
        .await
        .map_err(|source| ImportError::Spawn { file: file.into(), source })?;
    if !output.status.success() {
        let mut text = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if text.is_empty() {
            text = String::from_utf8_lossy(&output.stdout).trim().to_string();
        }
        return Err(ImportError::Failed { file: file.into(), output: text });
    }
    tracing::info!(file = %file.display(), "image tarball imported");
    Ok(())
}

/// The tarballs in `dir` (DATA_DIR/agent/images), sorted; none if it does not exist.
pub async fn tarballs_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    while let Some(entry) = entries.next_entry().await? {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "tar") && entry.file_type().await?.is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Why a container's image is not there, as container waiting reasons say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFailure {
    pub reason: &'static str,
    pub message: String,
}

/// The effective pull policy: the field, else upstream's default (Always for `:latest`
/// or an untagged image, IfNotPresent otherwise).
pub fn pull_policy(image: &str, policy: Option<&str>) -> String {
    if let Some(p) = policy.filter(|p| !p.is_empty()) {
        return p.to_string();
    }
    let name = image.split('@').next().unwrap_or(image);
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent".into(),
        _ if image.contains('@') => "IfNotPresent".into(),
        _ => "Always".into(),
    }
}

/// Makes sure `image` is present as `policy` asks; returns the image's id (imageRef).
pub async fn ensure(cri: &Cri, image: &str, policy: &str) -> Result<String, ImageFailure> {
    let spec = ImageSpec { image: image.to_string(), ..Default::default() };
    if policy != "Always" {
        let status = cri
            .images
            .clone()
            .image_status(ImageStatusRequest { image: Some(spec.clone()), verbose: false })
            .await
            .map_err(|e| ImageFailure { reason: "ErrImagePull", message: e.message().to_string() })?
            .into_inner();
        if let Some(found) = status.image {
            return Ok(found.id);
        }
        if policy == "Never" {
            return Err(ImageFailure {
                reason: "ErrImageNeverPull",
                message: format!("Container image \"{image}\" is not present with pull policy of Never"),
            });
        }
    }
    let started = std::time::Instant::now();
    match cri.images.clone().pull_image(PullImageRequest { image: Some(spec), auth: None, sandbox_config: None }).await
    {
        Ok(reply) => {
            tracing::info!(image, elapsed = ?started.elapsed(), "image pulled");
            Ok(reply.into_inner().image_ref)
        }
        Err(e) => Err(ImageFailure {
            reason: "ErrImagePull",
            message: format!("Failed to pull image \"{image}\": {}", e.message()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_follows_the_tag() {
        assert_eq!(pull_policy("busybox", None), "Always");
        assert_eq!(pull_policy("busybox:latest", None), "Always");
        assert_eq!(pull_policy("localhost:5000/busybox", None), "Always");
        assert_eq!(pull_policy("localhost:5000/busybox:1", None), "IfNotPresent");
        assert_eq!(pull_policy("busybox@sha256:abc", None), "IfNotPresent");
        assert_eq!(pull_policy("busybox", Some("Never")), "Never");
    }
}
