//! A container's CRI mounts from its volumeMounts, as upstream's makeMounts: the
//! volume's node path (or a subPath / subPathExpr inside it, created if missing and
//! kept inside the volume), read-only when the mount asks or the volume is an API
//! data volume, and the mount propagation.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, VolumeMount};

use super::Mounted;
use crate::runtime::env;

/// Checks a subPath as upstream does: relative, no `..` element.
pub fn check_sub_path(sub_path: &str) -> Result<(), String> {
    if sub_path.starts_with('/') {
        return Err(format!("error SubPath `{sub_path}` must not be an absolute path"));
    }
    if Path::new(sub_path).components().any(|c| c == Component::ParentDir) {
        return Err(format!("unable to provision SubPath `{sub_path}`: must not contain '..'"));
    }
    Ok(())
}

fn propagation(m: &VolumeMount) -> Result<i32, String> {
    Ok(match m.mount_propagation.as_deref() {
        None | Some("None") => cri::MountPropagation::PropagationPrivate as i32,
        Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer as i32,
        Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional as i32,
        Some(other) => return Err(format!("invalid MountPropagation mode: {other:?}")),
    })
}

/// The node path of `sub_path` in the volume at `volume`: made (as a directory) when
/// missing, and refused when it resolves outside the volume.
async fn sub_path_host(volume: &Path, sub_path: &str, mount: &VolumeMount, container: &str) -> Result<PathBuf, String> {
    let path = volume.join(sub_path);
    if tokio::fs::symlink_metadata(&path).await.is_err() {
        tokio::fs::create_dir_all(&path).await.map_err(|e| {
            tracing::warn!(%e, path = %path.display(), "subPath directory not created");
            format!("failed to create subPath directory for volumeMount {:?} of container {container:?}", mount.name)
        })?;
    }
    let resolved = tokio::fs::canonicalize(&path).await.map_err(|e| e.to_string())?;
    let base = tokio::fs::canonicalize(volume).await.map_err(|e| e.to_string())?;
    if !resolved.starts_with(&base) {
        tracing::warn!(path = %resolved.display(), volume = %base.display(), "subPath resolves outside its volume");
        return Err(format!("failed to prepare subPath for volumeMount {:?} of container {container:?}", mount.name));
    }
    Ok(resolved)
}

/// The container's mounts; an error is the container's CreateContainerConfigError.
pub async fn container_mounts(
    volumes: &HashMap<String, Mounted>,
    container: &Container,
    env: &[(String, String)],
) -> Result<Vec<cri::Mount>, String> {
    let mut out = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let Some(volume) = volumes.get(&m.name) else {
            return Err(format!("cannot find volume {:?} to mount into container {:?}", m.name, container.name));
        };
        let sub_path = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            Some(expr) => env::expand_sub_path(expr, env).map_err(|e| e.0)?,
            None => m.sub_path.clone().unwrap_or_default(),
        };
        let host_path = if sub_path.is_empty() {
            volume.host_path.clone()
        } else {
            check_sub_path(&sub_path)?;
            sub_path_host(&volume.host_path, &sub_path, m, &container.name).await?
        };
        if m.recursive_read_only.as_deref() == Some("Enabled") {
            return Err("recursive read-only mounts are not supported by the container runtime".into());
        }
        out.push(cri::Mount {
            container_path: m.mount_path.clone(),
            host_path: host_path.to_string_lossy().into_owned(),
            readonly: m.read_only == Some(true) || volume.read_only,
            propagation: propagation(m)?,
            ..Default::default()
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_paths_stay_relative_and_inside() {
        assert!(check_sub_path("a/b").is_ok());
        assert!(check_sub_path("a/..b").is_ok());
        assert_eq!(check_sub_path("/etc"), Err("error SubPath `/etc` must not be an absolute path".into()));
        assert!(check_sub_path("a/../../etc").is_err());
    }

    #[tokio::test]
    async fn mounts_resolve_sub_paths_modes_and_missing_volumes() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("vol");
        std::fs::create_dir_all(&vol).unwrap();
        std::os::unix::fs::symlink("/etc", vol.join("escape")).unwrap();
        let volumes = HashMap::from([
            ("data".to_string(), Mounted { host_path: vol.clone(), read_only: false }),
            ("api".to_string(), Mounted { host_path: vol.clone(), read_only: true }),
        ]);
        let container: Container = serde_json::from_value(serde_json::json!({"name": "c", "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "data", "mountPath": "/logs", "subPathExpr": "logs/$(POD)", "readOnly": true,
             "mountPropagation": "HostToContainer"},
            {"name": "api", "mountPath": "/api"},
        ]}))
        .unwrap();
        let env = vec![("POD".to_string(), "web".to_string())];
        let mounts = container_mounts(&volumes, &container, &env).await.unwrap();
        assert_eq!(mounts[0].host_path, vol.to_string_lossy());
        assert!(!mounts[0].readonly);
        let real = std::fs::canonicalize(&vol).unwrap();
        assert_eq!(mounts[1].host_path, real.join("logs/web").to_string_lossy());
        assert!(vol.join("logs/web").is_dir(), "subPath directory made");
        assert!(mounts[1].readonly);
        assert_eq!(mounts[1].propagation, cri::MountPropagation::PropagationHostToContainer as i32);
        assert!(mounts[2].readonly, "API data volumes are read-only");

        let escape: Container = serde_json::from_value(serde_json::json!({"name": "c", "volumeMounts": [
            {"name": "data", "mountPath": "/x", "subPath": "escape"}]}))
        .unwrap();
        assert!(container_mounts(&volumes, &escape, &env).await.is_err());
        let missing: Container = serde_json::from_value(serde_json::json!({"name": "c", "volumeMounts": [
            {"name": "nope", "mountPath": "/x"}]}))
        .unwrap();
        assert_eq!(
            container_mounts(&volumes, &missing, &env).await,
            Err("cannot find volume \"nope\" to mount into container \"c\"".into())
        );
    }
}
