//! What the host must have for the agent to run pods, checked once at start so a
//! missing piece is named up front instead of surfacing as a failed sandbox later.

use std::path::{Path, PathBuf};

/// Where the Debian package containernetworking-plugins installs CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// The CNI plugins the generated network config uses.
pub const CNI_PLUGINS: &[&str] = &["bridge", "host-local", "portmap", "loopback"];

/// One missing host requirement and how to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub what: String,
    pub fix: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.what, self.fix)
    }
}

/// Finds `name` in PATH or the usual sbin directories (runc lands in /usr/sbin).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Checks the host. `own_containerd` is false when an existing CRI endpoint is used,
/// in which case that runtime brings its own binaries and network.
pub fn check(own_containerd: bool) -> Vec<Missing> {
    let mut missing = Vec::new();
    let mut need = |ok: bool, what: &str, fix: &str| {
        if !ok {
            missing.push(Missing { what: what.into(), fix: fix.into() });
        }
    };
    if own_containerd {
        for (bin, package) in [
            ("containerd", "containerd"),
            ("containerd-shim-runc-v2", "containerd"),
            ("ctr", "containerd"),
            ("runc", "runc"),
        ] {
            need(find_binary(bin).is_some(), &format!("the `{bin}` binary"), &format!("apt-get install {package}"));
        }
        for plugin in CNI_PLUGINS {
            need(
                Path::new(CNI_BIN_DIR).join(plugin).is_file(),
                &format!("the CNI plugin {CNI_BIN_DIR}/{plugin}"),
                "apt-get install containernetworking-plugins",
            );
        }
    }
    need(
        Path::new(super::pause_image::BUSYBOX).is_file(),
        &format!("a static busybox at {} for the sandbox (pause) image", super::pause_image::BUSYBOX),
        "apt-get install busybox-static",
    );
    need(cgroups_usable(), "cgroups with the cpu and memory controllers under /sys/fs/cgroup", "mount cgroup v1 or v2");
    missing
}

/// cgroup v2 lists its controllers in one file; v1 has a directory per controller.
fn cgroups_usable() -> bool {
    let root = Path::new("/sys/fs/cgroup");
    if let Ok(controllers) = std::fs::read_to_string(root.join("cgroup.controllers")) {
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        return has("cpu") && has("memory");
    }
    root.join("memory").is_dir() && (root.join("cpu").is_dir() || root.join("cpu,cpuacct").is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_reads_as_what_and_fix() {
        let m = Missing { what: "the `runc` binary".into(), fix: "apt-get install runc".into() };
        assert_eq!(m.to_string(), "the `runc` binary (apt-get install runc)");
    }

    #[test]
    fn finds_sh() {
        assert!(find_binary("sh").is_some());
        assert!(find_binary("no-such-binary-krate").is_none());
    }
}
