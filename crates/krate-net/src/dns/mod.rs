//! Cluster DNS: the records of CoreDNS's kubernetes plugin, served over UDP and TCP.
//!
//! Services, their EndpointSlices and the pod names of `pods insecure` resolve from an
//! in-memory index kept by watches; every other name is forwarded to the nameservers of
//! the node's resolv.conf.
//!
//! ```ignore
//! let server = DnsServer::start(client, DnsConfig { listen, ..Default::default() }).await?;
//! server.synced().await;
//! // ...
//! server.stop().await;
//! ```

mod answer;
mod forward;
mod index;
mod metrics;
mod names;
mod server;
mod watch;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

pub use answer::{Outcome, answer};
pub use index::{DEFAULT_TTL, Endpoint, Entry, Index, Kind, Port, ServiceKey};
pub use server::DnsServer;

/// How the DNS server runs.
#[derive(Clone, Debug)]
pub struct DnsConfig {
    /// Where to serve, UDP and TCP (port 0: any free port, the same for both).
    pub listen: SocketAddr,
    /// The cluster domain.
    pub zone: String,
    /// Where the upstream nameservers are listed.
    pub resolv_conf: PathBuf,
    /// Read instead when `resolv_conf` lists only loopback nameservers (a local stub
    /// such as systemd-resolved's), as k3s does; None never looks elsewhere.
    pub fallback_resolv_conf: Option<PathBuf>,
    /// The port upstream nameservers listen on (resolv.conf cannot say).
    pub upstream_port: u16,
    /// The TTL of every record made from the cluster.
    pub ttl: u32,
    /// How long one upstream gets to answer one query.
    pub forward_timeout: Duration,
    /// Queries waiting on upstreams at once; more get SERVFAIL.
    pub max_forwards: usize,
    /// TCP connections served at once; more are closed.
    pub max_tcp_connections: usize,
}

impl Default for DnsConfig {
    fn default() -> DnsConfig {
        DnsConfig {
            listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 53)),
            zone: "cluster.local".to_string(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            fallback_resolv_conf: Some(forward::systemd_resolv_conf()),
            upstream_port: 53,
            ttl: DEFAULT_TTL,
            forward_timeout: Duration::from_secs(2),
            max_forwards: 1024,
            max_tcp_connections: 256,
        }
    }
}

/// Why the DNS server could not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("invalid cluster DNS zone {0:?}")]
    InvalidZone(String),
    #[error("cannot serve DNS on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Serves cluster DNS until the future is dropped.
pub async fn run(client: kube::Client, config: DnsConfig) -> Result<(), DnsError> {
    let _server = DnsServer::start(client, config).await?;
    std::future::pending::<()>().await;
    Ok(())
}
