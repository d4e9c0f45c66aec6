//! Pod cgroups: containerd never removes the pod-level cgroups the kubelet names as
//! cgroup parents, so the agent removes them once a pod's sandboxes are gone.

use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";

/// Every hierarchy's directory for `relative` (v1 controllers, the v2 mount, or the
/// unified root itself).
fn candidates(relative: &str) -> Vec<PathBuf> {
    let relative = relative.trim_start_matches('/');
    let root = Path::new(ROOT);
    let mut out = vec![root.join(relative)];
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(entry.path().join(relative));
            }
        }
    }
    out
}

/// Removes the (empty) cgroup `relative` and every cgroup below it in all hierarchies.
/// Best effort: a cgroup still holding processes stays.
pub async fn remove_tree(relative: String) {
    // Never the hierarchies' roots themselves.
    if relative.trim_matches('/').is_empty() {
        return;
    }
    let _ = tokio::task::spawn_blocking(move || {
        for dir in candidates(&relative) {
            remove_dir_tree(&dir);
        }
    })
    .await;
}

fn remove_dir_tree(dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_dir_tree(&entry.path());
            }
        }
    }
    // cgroup directories hold only control files, which rmdir takes along.
    if let Err(error) = std::fs::remove_dir(dir) {
        tracing::debug!(dir = %dir.display(), %error, "cgroup not removed");
    }
}
