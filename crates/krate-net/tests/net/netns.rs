//! Network namespaces for the tests with real traffic (proxy, podnet, netpol): each
//! test makes its own, links them with veths and runs TCP servers in them. Nothing
//! touches the host's own network or nftables; every namespace is deleted when its
//! guard drops, also when a test fails.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use krate_net::proxy::Nft;

/// Runs `args`, asserting it succeeds; gives its standard output.
fn run(args: &[&str]) -> String {
    let out = std::process::Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace of this test's own, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("knet{}-{}-{tag}", std::process::id(), COUNT.fetch_add(1, Ordering::Relaxed));
        let out = std::process::Command::new("ip").args(["netns", "add", &name]).output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "the network tests need root and network namespaces, but `ip netns add {name}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => panic!("the network tests need iproute2's `ip`: {e}"),
        }
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS`.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "-n", &self.name];
        all.extend_from_slice(args);
        run(&all)
    }

    /// Runs a command inside this namespace.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", &self.name];
        all.extend_from_slice(args);
        run(&all)
    }

    pub fn nft_command(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name, "nft"].map(String::from).to_vec()
    }

    pub fn nft(&self) -> Nft {
        Nft::new(self.nft_command(), Duration::from_secs(30))
    }

    /// `nft list tables` here.
    pub fn tables(&self) -> String {
        self.exec(&["nft", "list", "tables"])
    }

    /// A veth from here (`name`, `addr`) to `peer` (`peer_name`, `peer_addr`).
    pub fn link(&self, name: &str, addr: &str, peer: &Netns, peer_name: &str, peer_addr: &str) {
        self.ip(&["link", "add", name, "type", "veth", "peer", "name", peer_name, "netns", &peer.name]);
        self.ip(&["addr", "add", addr, "dev", name]);
        peer.ip(&["addr", "add", peer_addr, "dev", peer_name]);
        self.ip(&["link", "set", name, "up"]);
        peer.ip(&["link", "set", peer_name, "up"]);
    }

    /// Runs `f` on a thread inside this namespace (sockets it makes stay there).
    pub fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
        let file = File::open(format!("/run/netns/{}", self.name)).expect("netns file");
        std::thread::spawn(move || {
            // SAFETY: setns on this thread only, with a valid namespace descriptor.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }

    /// Connects from here to `addr` and reads the answer until the server closes, on a
    /// thread of its own.
    pub fn dial(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        read_timeout: Duration,
    ) -> std::thread::JoinHandle<std::io::Result<String>> {
        self.enter(move || {
            let mut conn = TcpStream::connect_timeout(&addr, connect_timeout)?;
            conn.set_read_timeout(Some(read_timeout))?;
            let mut answer = String::new();
            conn.read_to_string(&mut answer)?;
            Ok(answer)
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// TCP servers in one namespace answering `NAME PEER` (the client address they saw)
/// and closing, until dropped.
pub struct Servers {
    stop: Arc<AtomicBool>,
}

impl Servers {
    pub fn start(ns: &Netns, addr: &str, ports: &[u16], name: &str) -> Servers {
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, name, addr, ports) = (stop.clone(), name.to_string(), addr.to_string(), ports.to_vec());
        let (bound_tx, bound) = std::sync::mpsc::channel();
        ns.enter(move || {
            let listeners: Vec<TcpListener> = ports
                .iter()
                .map(|port| {
                    let listener = TcpListener::bind((addr.as_str(), *port)).expect("bind in netns");
                    listener.set_nonblocking(true).expect("nonblocking");
                    listener
                })
                .collect();
            bound_tx.send(()).expect("test waits");
            while !stop2.load(Ordering::Relaxed) {
                let mut idle = true;
                for listener in &listeners {
                    if let Ok((mut conn, peer)) = listener.accept() {
                        idle = false;
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.write_all(format!("{name} {}\n", peer.ip()).as_bytes());
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        });
        bound.recv_timeout(Duration::from_secs(5)).expect("servers listening");
        Servers { stop }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A `NAME PEER` answer's words.
pub fn server_and_peer(answer: &str) -> (String, String) {
    let mut words = answer.split_whitespace().map(str::to_string);
    (words.next().unwrap_or_default(), words.next().unwrap_or_default())
}
