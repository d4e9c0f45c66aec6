//! A pod's volumes on the node, under DATA_DIR/agent/pods/<uid>/volumes/<plugin>/<name>
//! as the kubelet lays them out: emptyDir (a directory, or a tmpfs for medium Memory),
//! configMap, secret, downwardAPI and projected (files written atomically, secret and
//! projected on tmpfs, rewritten when their sources change), hostPath (type checked)
//! and persistentVolumeClaim bound to a hostPath or local PV. `PodVolumes::sync` sets
//! them up and refreshes them (the pod worker calls it when a watched source changes,
//! on pod updates and every `RESYNC_PERIOD`); `mounts::container_mounts` turns a container's volumeMounts into
//! CRI mounts; `remove_pod_dir` unmounts and removes everything when the pod goes.

pub mod atomic_writer;
mod claims;
mod host_path;
mod mounts;
mod payload;
mod projected;
mod source_watch;
pub mod tmpfs;
mod token;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, Volume};

use self::source_watch::Source;
pub use self::source_watch::{PodWake, SourceWatches};
pub use self::token::TokenManager;
use super::objects::{ObjectCache, not_found};

/// How often API data volumes (configMap, secret, downwardAPI, projected) are
/// refreshed from their sources, besides pod updates.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(10);

/// What volume setup needs from the node.
pub struct VolumeHost {
    pub client: kube::Client,
    /// DATA_DIR/agent/pods.
    pub pods_dir: PathBuf,
    pub tokens: TokenManager,
    /// Watches of the config maps and secrets volumes read.
    pub watches: SourceWatches,
    /// The node's allocatable, for resourceFieldRefs without limits.
    pub allocatable: BTreeMap<String, String>,
}

/// A volume set up on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mounted {
    pub host_path: PathBuf,
    /// Mounted read-only in every container (API data volumes).
    pub read_only: bool,
}

/// Why a volume could not be set up: reported as a FailedMount event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume {volume:?} : {message}")]
pub struct MountFailure {
    pub volume: String,
    pub message: String,
}

/// The directory of the pod's volumes of one plugin, as the kubelet names them.
fn plugin_dir(pods_dir: &Path, uid: &str, plugin: &str) -> PathBuf {
    pods_dir.join(uid).join("volumes").join(plugin)
}

/// Upstream's emptyDir directory mode.
const EMPTY_DIR_MODE: u32 = 0o777;

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| e.to_string())?
}

/// The volume's type name as the API spells it (for messages about unsupported types).
fn type_name(volume: &Volume) -> String {
    serde_json::to_value(volume)
        .ok()
        .and_then(|v| v.as_object().and_then(|o| o.keys().find(|k| *k != "name").cloned()))
        .unwrap_or_else(|| "unknown".into())
}

/// Writes a payload atomically into `dir` (on a tmpfs when `memory`).
async fn write_atomic(dir: PathBuf, payload: atomic_writer::Payload, memory: bool) -> Result<bool, String> {
    blocking(move || {
        if memory {
            tmpfs::ensure_tmpfs(&dir, 0o755, None)
                .map_err(|e| format!("mounting a tmpfs at {}: {e}", dir.display()))?;
        }
        atomic_writer::write(&dir, &payload).map_err(|e| e.to_string())
    })
    .await
}

/// The pod's volumes: what is set up, and when they were last refreshed.
#[derive(Default)]
pub struct PodVolumes {
    mounted: HashMap<String, Mounted>,
    /// Set once every volume was set up: containers may start.
    ready: bool,
    last_sync: Option<Instant>,
    /// The pod's labels and annotations at the last sync (downward API files show them).
    last_metadata: Option<String>,
    /// Set (and the worker woken) when a config map or secret the volumes read changes.
    wake: Arc<PodWake>,
    /// Whether the volumes' sources are being watched.
    watching: bool,
}

fn metadata_signature(pod: &Pod) -> String {
    serde_json::to_string(&(&pod.metadata.labels, &pod.metadata.annotations)).unwrap_or_default()
}

impl PodVolumes {
    /// Whether every volume has been set up.
    pub fn ready(&self) -> bool {
        self.ready
    }

    /// Wakes the pod's worker when a source changed (see `SourceWatches`).
    pub fn wake(&self) -> Arc<PodWake> {
        self.wake.clone()
    }

    /// Whether a sync is due: never done or failed, a source changed, the period
    /// passed, or the pod's labels or annotations changed.
    pub fn due(&self, pod: &Pod) -> bool {
        !self.ready
            || self.wake.changed.load(std::sync::atomic::Ordering::Acquire)
            || self.last_sync.is_none_or(|t| t.elapsed() >= RESYNC_PERIOD)
            || self.last_metadata.as_deref() != Some(metadata_signature(pod).as_str())
    }

    /// Sets up (or refreshes) every volume of the pod. Returns the failures; the pod
    /// becomes ready once a sync has none.
    pub async fn sync(&mut self, host: &VolumeHost, pod: &Pod) -> Vec<MountFailure> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
        self.wake.take_changed();
        if !self.watching {
            self.watching = true;
            let mut sources = BTreeSet::new();
            for v in &volumes {
                let (config_maps, secrets) = source_objects(v);
                let ns = || namespace.clone();
                sources.extend(config_maps.into_iter().map(|name| Source::ConfigMap { namespace: ns(), name }));
                sources.extend(secrets.into_iter().map(|name| Source::Secret { namespace: ns(), name }));
            }
            host.watches.set(&uid, sources, &self.wake);
        }
        let mut objects = ObjectCache::default();
        for v in &volumes {
            let (config_maps, secrets) = source_objects(v);
            for name in config_maps {
                objects.fetch_config_map(&host.client, &namespace, &name).await;
            }
            for name in secrets {
                objects.fetch_secret(&host.client, &namespace, &name).await;
            }
        }
        let mut failures = Vec::new();
        for v in &volumes {
            match self.set_up(host, pod, &uid, v, &objects).await {
                Ok(mounted) => {
                    self.mounted.insert(v.name.clone(), mounted);
                }
                Err(message) => failures.push(MountFailure { volume: v.name.clone(), message }),
            }
        }
        self.last_sync = Some(Instant::now());
        self.last_metadata = Some(metadata_signature(pod));
        if failures.is_empty() && !self.ready {
            tracing::info!(pod = pod.metadata.name, volumes = volumes.len(), "pod volumes set up");
            self.ready = true;
        }
        failures
    }

    async fn set_up(
        &self,
        host: &VolumeHost,
        pod: &Pod,
        uid: &str,
        v: &Volume,
        objects: &ObjectCache,
    ) -> Result<Mounted, String> {
        let dir = |plugin: &str| plugin_dir(&host.pods_dir, uid, plugin).join(&v.name);
        if let Some(e) = &v.empty_dir {
            let path = dir("kubernetes.io~empty-dir");
            let memory = e.medium.as_deref() == Some("Memory");
            let size = e
                .size_limit
                .as_ref()
                .and_then(|q| krate_api::kinds::quantity::Quantity::parse(&q.0).ok())
                .map(|q| q.value().max(0) as u64);
            if size.is_some() && !memory {
                tracing::debug!(volume = v.name, "emptyDir sizeLimit on disk is not enforced by this node");
            }
            let p = path.clone();
            blocking(move || {
                use std::os::unix::fs::PermissionsExt;
                if memory {
                    tmpfs::ensure_tmpfs(&p, EMPTY_DIR_MODE, size).map_err(|e| format!("mounting a tmpfs: {e}"))
                } else {
                    std::fs::create_dir_all(&p).map_err(|e| e.to_string())?;
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(EMPTY_DIR_MODE))
                        .map_err(|e| e.to_string())
                }
            })
            .await?;
            return Ok(Mounted { host_path: path, read_only: false });
        }
        if let Some(h) = &v.host_path {
            let path = PathBuf::from(&h.path);
            let (p, t) = (path.clone(), h.type_.clone());
            blocking(move || host_path::check(&p, t.as_deref())).await?;
            return Ok(Mounted { host_path: path, read_only: false });
        }
        if let Some(c) = &v.config_map {
            let optional = c.optional == Some(true);
            let found = match objects.config_map(&c.name)? {
                None if !optional => return Err(not_found("configmap", &c.name)),
                found => found,
            };
            let mode = c.default_mode.unwrap_or(payload::DEFAULT_MODE);
            let files = payload::config_map(found, c.items.as_deref(), mode, optional)?;
            let path = dir("kubernetes.io~configmap");
            self.write(v, path.clone(), files, false).await?;
            return Ok(Mounted { host_path: path, read_only: true });
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let optional = s.optional == Some(true);
            let found = match objects.secret(&name)? {
                None if !optional => return Err(not_found("secret", &name)),
                found => found,
            };
            let mode = s.default_mode.unwrap_or(payload::DEFAULT_MODE);
            let files = payload::secret(found, s.items.as_deref(), mode, optional)?;
            let path = dir("kubernetes.io~secret");
            self.write(v, path.clone(), files, true).await?;
            return Ok(Mounted { host_path: path, read_only: true });
        }
        if let Some(d) = &v.downward_api {
            let mode = d.default_mode.unwrap_or(payload::DEFAULT_MODE);
            let files = payload::downward_api(pod, d.items.as_deref().unwrap_or_default(), mode, &host.allocatable)?;
            let path = dir("kubernetes.io~downward-api");
            self.write(v, path.clone(), files, false).await?;
            return Ok(Mounted { host_path: path, read_only: true });
        }
        if let Some(p) = &v.projected {
            let files = projected::collect(pod, p, objects, &host.tokens, &host.allocatable).await?;
            let path = dir("kubernetes.io~projected");
            self.write(v, path.clone(), files, true).await?;
            return Ok(Mounted { host_path: path, read_only: true });
        }
        if let Some(c) = &v.persistent_volume_claim {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let found = claims::resolve(&host.client, &namespace, &c.claim_name).await?;
            let (p, t) = (found.path.clone(), found.host_path_type.clone());
            blocking(move || host_path::check(&p, t.as_deref())).await?;
            return Ok(Mounted { host_path: found.path, read_only: c.read_only == Some(true) });
        }
        if v.image.is_some() {
            return Err(
                "image volumes are not supported by the container runtime (containerd 1.6 has no image mounts)".into(),
            );
        }
        Err(format!("volume type {} is not supported by this node", type_name(v)))
    }

    /// Stops watching the pod's sources (it is gone or finished).
    pub fn stop_watching(&mut self, host: &VolumeHost, uid: &str) {
        host.watches.set(uid, BTreeSet::new(), &self.wake);
        self.watching = false;
    }

    async fn write(
        &self,
        v: &Volume,
        path: PathBuf,
        files: atomic_writer::Payload,
        memory: bool,
    ) -> Result<(), String> {
        if write_atomic(path, files, memory).await? {
            tracing::info!(volume = v.name, "volume contents written");
        }
        Ok(())
    }

    /// The container's CRI mounts (its subPathExpr expanded from `env`).
    pub async fn container_mounts(
        &self,
        container: &Container,
        env: &[(String, String)],
    ) -> Result<Vec<cri::Mount>, String> {
        mounts::container_mounts(&self.mounted, container, env).await
    }
}

/// The config maps and secrets a volume reads.
fn source_objects(v: &Volume) -> (Vec<String>, Vec<String>) {
    if let Some(c) = &v.config_map {
        return (vec![c.name.clone()], Vec::new());
    }
    if let Some(s) = &v.secret {
        return (Vec::new(), s.secret_name.iter().cloned().collect());
    }
    if let Some(p) = &v.projected {
        return projected::referenced_objects(p);
    }
    (Vec::new(), Vec::new())
}

/// Unmounts and removes the pod's directory (its volumes) under `pods_dir`.
pub async fn remove_pod_dir(pods_dir: &Path, uid: &str) {
    if uid.is_empty() {
        return;
    }
    let dir = pods_dir.join(uid);
    let result = tokio::task::spawn_blocking(move || {
        if !dir.exists() {
            return Ok(());
        }
        tmpfs::unmount_all_under(&dir)?;
        std::fs::remove_dir_all(&dir)
    })
    .await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(uid, %error, "pod volumes directory not removed"),
        Err(error) => tracing::warn!(uid, %error, "pod volumes cleanup did not run"),
    }
}

/// Unmounts every volume under `pods_dir` (all pods): for a node being torn down.
pub async fn unmount_all(pods_dir: &Path) {
    let dir = pods_dir.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || tmpfs::unmount_all_under(&dir)).await;
}
