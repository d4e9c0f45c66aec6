//! Real etcd-server processes for the etcd backend's integration tests.
//!
//! Each [`EtcdCluster`] runs its members on 127.0.0.1 with free ports and data in a
//! temporary directory, logs to files there (printed when a test fails) and kills its
//! processes when dropped.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep, timeout};

/// Where etcd-server is installed; `KRATE_ETCD_BIN` overrides it.
const DEFAULT_ETCD_BIN: &str = "/usr/bin/etcd";

/// How long a member may take to answer after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How often a whole cluster start is attempted (a free port can be taken by someone
/// else between finding it and etcd binding it).
const START_ATTEMPTS: usize = 3;

pub struct EtcdCluster {
    members: Vec<Member>,
    // Last: the data directories must outlive the processes.
    dir: TempDir,
}

struct Member {
    name: String,
    client_port: u16,
    args: Vec<String>,
    log: PathBuf,
    output: PathBuf,
    child: Option<Child>,
}

impl EtcdCluster {
    /// Starts `members` etcd members forming one cluster and waits until each of them
    /// answers a linearizable read. Panics if etcd-server is not installed or the cluster
    /// does not come up in time.
    pub async fn start(members: usize) -> EtcdCluster {
        Self::start_in(members, &std::env::temp_dir()).await
    }

    /// Like [`EtcdCluster::start`], with the data directories under `parent` (a
    /// benchmark puts them on the same disk as the store it compares with).
    pub async fn start_in(members: usize, parent: &Path) -> EtcdCluster {
        assert!(members > 0, "an etcd cluster needs at least one member");
        let bin = etcd_binary();
        let mut last_error = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let mut cluster = EtcdCluster::spawn(&bin, members, parent);
            match cluster.wait_all_ready().await {
                Ok(()) => return cluster,
                Err(e) => {
                    last_error = format!("{e}\n{}", cluster.logs());
                    eprintln!("etcd cluster start attempt {attempt} failed: {e}");
                }
            }
        }
        panic!("etcd cluster of {members} did not start after {START_ATTEMPTS} attempts: {last_error}");
    }

    fn spawn(bin: &Path, members: usize, parent: &Path) -> EtcdCluster {
        let dir =
            tempfile::Builder::new().prefix("krate-etcd-").tempdir_in(parent).expect("create a temporary directory");
        let ports = free_ports(2 * members);
        let names: Vec<String> = (0..members).map(|i| format!("m{i}")).collect();
        let peer_url = |i: usize| format!("http://127.0.0.1:{}", ports[2 * i + 1]);
        let initial_cluster =
            names.iter().enumerate().map(|(i, name)| format!("{name}={}", peer_url(i))).collect::<Vec<_>>().join(",");
        let token = format!("krate-test-{}-{}", std::process::id(), ports[0]);
        let mut cluster = EtcdCluster { members: Vec::new(), dir };
        for (i, name) in names.iter().enumerate() {
            let client_url = format!("http://127.0.0.1:{}", ports[2 * i]);
            let data_dir = cluster.dir.path().join(name);
            let log = cluster.dir.path().join(format!("{name}.log"));
            let args = vec![
                format!("--name={name}"),
                format!("--data-dir={}", data_dir.display()),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={}", peer_url(i)),
                format!("--initial-advertise-peer-urls={}", peer_url(i)),
                format!("--initial-cluster={initial_cluster}"),
                "--initial-cluster-state=new".to_string(),
                format!("--initial-cluster-token={token}"),
                // Fast elections for tests.
                "--heartbeat-interval=50".to_string(),
                "--election-timeout=500".to_string(),
                "--logger=zap".to_string(),
                format!("--log-outputs={}", log.display()),
            ];
            let output = cluster.dir.path().join(format!("{name}.out"));
            let mut member = Member { name: name.clone(), client_port: ports[2 * i], args, log, output, child: None };
            member.spawn(bin);
            cluster.members.push(member);
        }
        cluster
    }

    /// Client URLs of all members, running or not.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Kills member `i` with SIGKILL and reaps it.
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again on the same ports and data, and waits until it answers.
    pub async fn restart(&mut self, i: usize) {
        self.members[i].kill();
        self.members[i].spawn(&etcd_binary());
        if let Err(e) = self.wait_ready(i).await {
            panic!("etcd member {i} did not come back: {e}\n{}", self.logs());
        }
    }

    /// Waits until member `i` answers a linearizable read (which needs a leader).
    pub async fn wait_ready(&mut self, i: usize) -> Result<(), String> {
        let endpoint = self.endpoint(i);
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last_error = String::from("no attempt made");
        while Instant::now() < deadline {
            if let Some(status) = self.members[i].exited() {
                return Err(format!("member {i} exited with {status}"));
            }
            match probe(&endpoint).await {
                Ok(()) => return Ok(()),
                Err(e) => last_error = e,
            }
            sleep(Duration::from_millis(100)).await;
        }
        Err(format!("member {i} at {endpoint} did not answer within {READY_TIMEOUT:?}: {last_error}"))
    }

    async fn wait_all_ready(&mut self) -> Result<(), String> {
        for i in 0..self.members.len() {
            self.wait_ready(i).await?;
        }
        Ok(())
    }

    /// The value of an unlabelled metric that member `i` exports on /metrics.
    pub async fn metric(&self, i: usize, name: &str) -> Option<f64> {
        let fetch = async {
            let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", self.members[i].client_port)).await.ok()?;
            conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.ok()?;
            let mut body = String::new();
            conn.read_to_string(&mut body).await.ok()?;
            body.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        timeout(Duration::from_secs(5), fetch).await.ok().flatten()
    }

    /// The last lines of every member's logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for member in &self.members {
            for path in [&member.output, &member.log] {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(20)..];
                out.push_str(&format!("--- {} ({}) ---\n{}\n", member.name, path.display(), tail.join("\n")));
            }
        }
        out
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("etcd logs of the failed test:\n{}", self.logs());
        }
        for member in &mut self.members {
            member.kill();
        }
    }
}

impl Member {
    fn spawn(&mut self, bin: &Path) {
        let output = File::create(&self.output).expect("create the etcd output file");
        let stderr = output.try_clone().expect("clone the etcd output file");
        let mut command = Command::new(bin);
        command.args(&self.args).stdin(Stdio::null()).stdout(output).stderr(stderr);
        // SAFETY: prctl is async-signal-safe. It makes the kernel kill etcd if the test
        // process dies without running Drop (e.g. killed by a timeout).
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Child::kill sends SIGKILL; an error means it has already exited.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The exit status if the process has ended on its own.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|child| child.try_wait().ok().flatten())
    }
}

fn etcd_binary() -> PathBuf {
    let bin = std::env::var_os("KRATE_ETCD_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_ETCD_BIN));
    if !bin.is_file() {
        panic!(
            "etcd-server is not installed at {}: the etcd backend tests need it. Install it \
             (Debian/Ubuntu: `apt-get install etcd-server`) or point KRATE_ETCD_BIN at an etcd binary.",
            bin.display()
        );
    }
    bin
}

/// `n` distinct free TCP ports: bound together (so they differ), then released for etcd.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("local address").port()).collect()
}

/// One linearizable read against a single endpoint.
async fn probe(endpoint: &str) -> Result<(), String> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2));
    let mut client = etcd_client::Client::connect([endpoint], Some(options)).await.map_err(|e| e.to_string())?;
    client.get("krate-ready-probe", None).await.map(|_| ()).map_err(|e| e.to_string())
}
