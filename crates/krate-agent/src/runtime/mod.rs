//! Real pods through CRI: the agent's container runtime side. `PodRuntime::start`
//! checks the host, starts (and supervises) the agent's own containerd with a
//! generated config under DATA_DIR/agent unless an existing CRI endpoint is given,
//! imports the locally built pause image and DATA_DIR/agent/images/*.tar, and
//! `PodRuntime::run` runs this node's pods until the future is dropped.
//!
//! ```ignore
//! let runtime = PodRuntime::start(RuntimeConfig::new("/var/lib/krate")).await?;
//! let version = runtime.runtime_version().await?;   // nodeInfo.containerRuntimeVersion
//! let images = runtime.images().await?;             // status.images
//! runtime.run(client, "node-1").await;
//! ```

mod backoff;
mod cgroups;
mod cni;
mod containerd;
pub mod cri;
pub mod cri_config;
mod downward_api;
mod env;
mod events;
mod hooks;
pub mod host_check;
pub mod images;
mod metrics;
mod objects;
pub mod pause_image;
mod pod_manager;
pub mod pod_status;
mod pod_worker;
pub mod probe;
mod service_env;
mod ustar;
pub mod volumes;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ContainerImage;

pub use self::cri::Cri;
use self::cri_config::NodeSettings;
pub use self::host_check::Missing;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("this host cannot run pods; missing: {}", .0.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("; "))]
    HostMissing(Vec<Missing>),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("the container runtime at {socket} did not answer: {message}")]
    Unreachable { socket: PathBuf, message: String },
    #[error("container runtime call failed: {0}")]
    Cri(String),
    #[error(transparent)]
    Import(#[from] images::ImportError),
}

impl From<tonic::Status> for RuntimeError {
    fn from(s: tonic::Status) -> Self {
        RuntimeError::Cri(s.message().to_string())
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Io { what, source }
}

/// How the runtime side is set up.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The data dir shared with `krate server`/`krate agent`; state goes to DATA_DIR/agent.
    pub data_dir: PathBuf,
    /// An existing CRI runtime's unix socket (`--container-runtime-endpoint`, with or
    /// without `unix://`); None starts the agent's own containerd.
    pub container_runtime_endpoint: Option<PathBuf>,
    /// The node's pod CIDR, for the CNI config (see `set_pod_cidr` once it is known).
    pub pod_cidr: String,
    /// The CNI bridge device.
    pub bridge: String,
    /// The cgroup (cgroupfs driver) pods' cgroups are made under.
    pub cgroup_root: String,
    /// The node's IP: pods' hostIP, and podIP of hostNetwork pods.
    pub node_ip: String,
    /// Cluster DNS servers for dnsPolicy ClusterFirst (none: the host's resolver).
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
}

impl RuntimeConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> RuntimeConfig {
        RuntimeConfig {
            data_dir: data_dir.into(),
            container_runtime_endpoint: None,
            pod_cidr: "10.42.0.0/24".into(),
            bridge: "krate0".into(),
            cgroup_root: "/kubepods".into(),
            node_ip: default_node_ip(),
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
        }
    }

    pub fn agent_dir(&self) -> PathBuf {
        self.data_dir.join("agent")
    }
}

/// The address of the interface the default route uses (no packet is sent), else loopback.
fn default_node_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

/// The runtime side of a node: a CRI client, the containerd it supervises (if any).
/// Cheap to clone.
#[derive(Clone)]
pub struct PodRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    config: RuntimeConfig,
    cri: Cri,
    layout: Option<containerd::Layout>,
    /// Kills containerd when the last clone is dropped.
    containerd: Option<containerd::Supervisor>,
}

/// Where pods' volumes live: DATA_DIR/agent/pods/<uid>/volumes/<plugin>/<name>.
pub fn pods_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("agent").join("pods")
}

/// Unmounts every pod volume mounted under DATA_DIR/agent/pods (tmpfs volumes): for a
/// node being torn down (and tests cleaning up).
pub async fn unmount_pod_volumes(data_dir: &Path) {
    volumes::unmount_all(&pods_dir(data_dir)).await
}

/// The socket of the containerd the agent runs for `data_dir`.
pub fn own_socket(data_dir: &Path) -> PathBuf {
    containerd::Layout::under(&data_dir.join("agent")).socket
}

impl PodRuntime {
    /// Checks the host, starts containerd if the agent runs its own, and imports the
    /// pause image and DATA_DIR/agent/images/*.tar.
    pub async fn start(config: RuntimeConfig) -> Result<PodRuntime, RuntimeError> {
        let own = config.container_runtime_endpoint.is_none();
        let missing = tokio::task::spawn_blocking(move || host_check::check(own)).await.unwrap_or_default();
        if !missing.is_empty() {
            return Err(RuntimeError::HostMissing(missing));
        }
        let agent_dir = config.agent_dir();
        let (socket, layout, supervisor) = match &config.container_runtime_endpoint {
            Some(endpoint) => {
                let text = endpoint.to_string_lossy();
                let path = PathBuf::from(text.strip_prefix("unix://").unwrap_or(&text));
                (path, None, None)
            }
            None => {
                let layout = containerd::Layout::under(&agent_dir);
                cni::write(&layout.cni_conf_dir, &config.bridge, &config.pod_cidr, &layout.ipam_dir)
                    .await
                    .map_err(io("writing the CNI config"))?;
                let supervisor = containerd::Supervisor::start(layout.clone(), pause_image::PAUSE_IMAGE)
                    .await
                    .map_err(io("starting containerd"))?;
                (layout.socket.clone(), Some(layout), Some(supervisor))
            }
        };
        let cri = Cri::new(&socket);
        let version = cri
            .wait_ready(Duration::from_secs(20))
            .await
            .map_err(|e| RuntimeError::Unreachable { socket: socket.clone(), message: e.message().to_string() })?;
        tracing::info!(version, socket = %socket.display(), "container runtime ready");
        let runtime = PodRuntime { inner: Arc::new(Inner { config, cri, layout, containerd: supervisor }) };
        runtime.import_pause_image().await?;
        for file in images::tarballs_in(&agent_dir.join("images")).await.map_err(io("reading the images dir"))? {
            if let Err(error) = images::import(&socket, &file).await {
                tracing::error!(%error, "image tarball not imported");
            }
        }
        Ok(runtime)
    }

    async fn import_pause_image(&self) -> Result<(), RuntimeError> {
        let spec = k8s_cri::v1::ImageSpec { image: pause_image::PAUSE_IMAGE.into(), ..Default::default() };
        let status = self
            .inner
            .cri
            .images
            .clone()
            .image_status(k8s_cri::v1::ImageStatusRequest { image: Some(spec), verbose: false })
            .await?;
        if status.into_inner().image.is_some() {
            return Ok(());
        }
        let tarball = pause_image::build().await.map_err(io(format!("reading {}", pause_image::BUSYBOX)))?;
        let dir = self.inner.config.agent_dir();
        tokio::fs::create_dir_all(&dir).await.map_err(io("creating the agent dir"))?;
        let file = dir.join("pause-image.tar");
        tokio::fs::write(&file, tarball).await.map_err(io("writing the pause image"))?;
        images::import(&self.inner.cri.socket, &file).await?;
        Ok(())
    }

    /// Runs this node's pods until the returned future is dropped.
    pub async fn run(&self, client: kube::Client, node_name: &str) {
        let host_dns = match tokio::fs::read_to_string("/etc/resolv.conf").await {
            Ok(text) => cri_config::parse_resolv_conf(&text),
            Err(_) => Default::default(),
        };
        let c = &self.inner.config;
        let data_dir = c.data_dir.clone();
        let allocatable =
            tokio::task::spawn_blocking(move || crate::node::host::Resources::read(&data_dir).allocatable())
                .await
                .unwrap_or_default();
        let informers = krate_client::informers::Informers::new(client.clone());
        let services = informers.get::<k8s_openapi::api::core::v1::Service>();
        let shared = Arc::new(pod_worker::Shared {
            cri: self.inner.cri.clone(),
            client: client.clone(),
            node_name: node_name.to_string(),
            informers,
            services,
            events: events::PodEvents::new(client.clone(), node_name),
            volumes: volumes::VolumeHost {
                client: client.clone(),
                pods_dir: pods_dir(&c.data_dir),
                tokens: volumes::TokenManager::new(client.clone()),
                watches: volumes::SourceWatches::new(client),
                allocatable,
            },
            node: NodeSettings {
                host_ip: c.node_ip.clone(),
                cgroup_root: c.cgroup_root.clone(),
                log_dir: c.agent_dir().join("pod-logs"),
                cluster_dns: c.cluster_dns.clone(),
                cluster_domain: c.cluster_domain.clone(),
                host_dns,
            },
        });
        pod_manager::run(shared).await
    }

    /// `containerd://1.6.20`, for nodeInfo.containerRuntimeVersion.
    pub async fn runtime_version(&self) -> Result<String, RuntimeError> {
        Ok(self.inner.cri.version().await?)
    }

    /// The node's images, for node status.images.
    pub async fn images(&self) -> Result<Vec<ContainerImage>, RuntimeError> {
        let list = self.inner.cri.images.clone().list_images(k8s_cri::v1::ListImagesRequest { filter: None }).await?;
        Ok(list
            .into_inner()
            .images
            .into_iter()
            .map(|i| ContainerImage {
                names: Some(i.repo_digests.into_iter().chain(i.repo_tags).collect()),
                size_bytes: Some(i.size as i64),
            })
            .collect())
    }

    /// The CRI client (for streaming, logs and stats on the agent's server).
    pub fn cri(&self) -> &Cri {
        &self.inner.cri
    }

    /// The pid of the containerd the agent supervises (None with an external runtime,
    /// or while it is being restarted).
    pub fn containerd_pid(&self) -> Option<u32> {
        let pid = self.inner.containerd.as_ref()?.pid.load(std::sync::atomic::Ordering::Relaxed);
        (pid != 0).then_some(pid)
    }

    /// The CRI socket in use.
    pub fn endpoint(&self) -> &Path {
        &self.inner.cri.socket
    }

    /// Rewrites the CNI config for the node's pod CIDR (once the node has one);
    /// containerd picks it up for the next sandbox. No-op with an external runtime.
    pub async fn set_pod_cidr(&self, cidr: &str) -> Result<(), RuntimeError> {
        if let Some(layout) = &self.inner.layout {
            cni::write(&layout.cni_conf_dir, &self.inner.config.bridge, cidr, &layout.ipam_dir)
                .await
                .map_err(io("writing the CNI config"))?;
        }
        Ok(())
    }

    /// Stops and removes every pod sandbox in the runtime and their cgroups: for a
    /// node being torn down (and tests cleaning up).
    pub async fn remove_all_pods(&self) -> Result<(), RuntimeError> {
        remove_all_pods(&self.inner.cri, &self.inner.config.cgroup_root).await
    }
}

/// Stops and removes every pod sandbox behind `cri`, and the cgroups under `cgroup_root`.
pub async fn remove_all_pods(cri: &Cri, cgroup_root: &str) -> Result<(), RuntimeError> {
    let mut runtime = cri.runtime.clone();
    let items = runtime.list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest { filter: None }).await?.into_inner().items;
    for s in items {
        let _ = runtime.stop_pod_sandbox(k8s_cri::v1::StopPodSandboxRequest { pod_sandbox_id: s.id.clone() }).await;
        runtime.remove_pod_sandbox(k8s_cri::v1::RemovePodSandboxRequest { pod_sandbox_id: s.id }).await?;
    }
    cgroups::remove_tree(cgroup_root.to_string()).await;
    Ok(())
}

/// What `krate images import` did with the files.
#[derive(Debug, PartialEq, Eq)]
pub enum ImportOutcome {
    /// Imported into the running agent's containerd.
    Imported,
    /// No agent runs for the data dir: copied to DATA_DIR/agent/images for its next start.
    Staged(PathBuf),
}

/// `krate images import`: into the agent's running containerd, or staged in
/// DATA_DIR/agent/images when it is not running.
pub async fn import_images(data_dir: &Path, files: &[PathBuf]) -> Result<ImportOutcome, RuntimeError> {
    let socket = own_socket(data_dir);
    let running = tokio::fs::try_exists(&socket).await.unwrap_or(false)
        && tokio::time::timeout(Duration::from_secs(2), Cri::new(&socket).version()).await.is_ok_and(|r| r.is_ok());
    if running {
        for file in files {
            images::import(&socket, file).await?;
        }
        return Ok(ImportOutcome::Imported);
    }
    let dir = data_dir.join("agent/images");
    tokio::fs::create_dir_all(&dir).await.map_err(io(format!("creating {}", dir.display())))?;
    for file in files {
        let name = file.file_name().ok_or_else(|| RuntimeError::Io {
            what: format!("{} is not a file", file.display()),
            source: std::io::ErrorKind::InvalidInput.into(),
        })?;
        let mut target = dir.join(name);
        if target.extension().is_none_or(|e| e != "tar") {
            target.set_extension("tar");
        }
        tokio::fs::copy(file, &target).await.map_err(io(format!("copying {}", file.display())))?;
    }
    Ok(ImportOutcome::Staged(dir))
}
