//! The agent's own containerd: a generated config under DATA_DIR/agent/containerd and
//! a supervisor that restarts the process when it dies. Containers survive a
//! containerd restart (the shims keep them), so a restart loses no pods.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use super::host_check::CNI_BIN_DIR;

/// The paths of one containerd instance.
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub cni_conf_dir: PathBuf,
    pub ipam_dir: PathBuf,
    pub log: PathBuf,
}

impl Layout {
    pub fn under(agent_dir: &Path) -> Layout {
        let dir = agent_dir.join("containerd");
        Layout {
            config: dir.join("config.toml"),
            socket: dir.join("containerd.sock"),
            cni_conf_dir: agent_dir.join("cni/net.d"),
            ipam_dir: agent_dir.join("cni/ipam"),
            log: dir.join("containerd.log"),
            dir,
        }
    }
}

/// containerd 1.6's config (version 2) with the CRI settings these hosts need (see
/// the node-stack notes: without restrict_oom_score_adj no sandbox starts without
/// CAP_SYS_RESOURCE). Top-level keys come before the first table (TOML).
pub fn config(layout: &Layout, sandbox_image: &str) -> String {
    let q = |p: &Path| toml_string(&p.to_string_lossy());
    format!(
        r#"version = 2
root = {root}
state = {state}

[grpc]
  address = {socket}

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {sandbox}
  restrict_oom_score_adj = true
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {cni_bin}
    conf_dir = {cni_conf}
"#,
        root = q(&layout.dir.join("root")),
        state = q(&layout.dir.join("state")),
        socket = q(&layout.socket),
        opt = q(&layout.dir.join("opt")),
        sandbox = toml_string(sandbox_image),
        cni_bin = toml_string(CNI_BIN_DIR),
        cni_conf = q(&layout.cni_conf_dir),
    )
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Runs containerd and restarts it when it exits, until dropped (which kills it).
pub struct Supervisor {
    /// The running containerd's pid (0 between a death and its restart).
    pub pid: Arc<AtomicU32>,
    stop: Option<oneshot::Sender<()>>,
}

impl Supervisor {
    /// Writes the config and starts containerd; the caller waits for its socket.
    pub async fn start(layout: Layout, sandbox_image: &str) -> std::io::Result<Supervisor> {
        tokio::fs::create_dir_all(&layout.dir).await?;
        tokio::fs::write(&layout.config, config(&layout, sandbox_image)).await?;
        let mut child = spawn(&layout).await?;
        let pid = Arc::new(AtomicU32::new(child.id().unwrap_or(0)));
        let current = pid.clone();
        let (stop, mut stopped) = oneshot::channel();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(200);
            loop {
                tokio::select! {
                    _ = &mut stopped => {
                        let _ = child.kill().await;
                        return;
                    }
                    status = child.wait() => {
                        current.store(0, Ordering::Relaxed);
                        tracing::error!(?status, log = %layout.log.display(), "containerd exited; restarting it");
                        tokio::time::sleep(delay).await;
                        // Back off a crash loop, but not beyond a few seconds: pods need it.
                        delay = (delay * 2).min(Duration::from_secs(5));
                        match spawn(&layout).await {
                            Ok(c) => {
                                current.store(c.id().unwrap_or(0), Ordering::Relaxed);
                                child = c;
                            }
                            Err(error) => {
                                tracing::error!(%error, "cannot restart containerd; retrying");
                                // Keep the dead child: wait() on it returns at once.
                            }
                        }
                    }
                }
            }
        });
        Ok(Supervisor { pid, stop: Some(stop) })
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The task kills the child; if the async runtime is already gone, the task
        // is dropped with it and kill_on_drop does.
    }
}

async fn spawn(layout: &Layout) -> std::io::Result<Child> {
    let log = tokio::fs::OpenOptions::new().create(true).append(true).open(&layout.log).await?.into_std().await;
    let child = Command::new("containerd")
        .arg("--config")
        .arg(&layout.config)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    tracing::info!(pid = child.id(), socket = %layout.socket.display(), "containerd started");
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keeps_top_level_keys_before_tables_and_sets_cri_needs() {
        let layout = Layout::under(Path::new("/data/agent"));
        let text = config(&layout, "krate.local/pause:1");
        let first_table = text.find('[').unwrap();
        assert!(text.find("root = \"/data/agent/containerd/root\"").unwrap() < first_table);
        assert!(text.contains("address = \"/data/agent/containerd/containerd.sock\""));
        for needed in ["restrict_oom_score_adj = true", "SystemdCgroup = false", "conf_dir = \"/data/agent/cni/net.d\""]
        {
            assert!(text.contains(needed), "{needed}");
        }
        assert!(text.contains("sandbox_image = \"krate.local/pause:1\""));
    }
}
