//! Forwarding names outside the cluster to the node's nameservers, read from a
//! resolv.conf: the raw query over UDP, again over TCP when the UDP answer comes back
//! truncated.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::metrics;

/// Why no upstream answered.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("no upstream nameservers configured")]
    NoUpstreams,
    #[error("no upstream answered (last: {0})")]
    AllFailed(String),
}

/// How one exchange with one upstream failed.
#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("reply does not match the query")]
    Mismatch,
    #[error("query too long for TCP framing")]
    TooLong,
}

/// The nameservers of a resolv.conf, in order (`nameserver` lines whose address parses;
/// zone-scoped IPv6 addresses such as `fe80::1%eth0` are skipped).
pub fn parse_resolv_conf(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next()).flatten()
        })
        .filter_map(|address| address.parse().ok())
        .collect()
}

/// The nameservers to forward to. Loopback ones are of no use when other ones exist
/// (they usually are a local stub such as systemd-resolved's 127.0.0.53, and
/// unreachable from pods' network namespaces); when there are only loopback ones,
/// `fallback` (systemd's own upstream list, as k3s reads it) is used if it has any.
pub fn choose_nameservers(primary: &[IpAddr], fallback: Option<&[IpAddr]>) -> Vec<IpAddr> {
    let non_loopback = |list: &[IpAddr]| list.iter().copied().filter(|ip| !ip.is_loopback()).collect::<Vec<_>>();
    let chosen = non_loopback(primary);
    if !chosen.is_empty() {
        return chosen;
    }
    if let Some(fallback) = fallback {
        let chosen = non_loopback(fallback);
        if !chosen.is_empty() {
            return chosen;
        }
    }
    primary.to_vec()
}

/// The upstream nameservers and how to ask them.
#[derive(Debug)]
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
    /// The upstream that answered last, tried first next time, so that a dead first
    /// nameserver costs one timeout rather than one per query.
    preferred: AtomicUsize,
}

impl Forwarder {
    pub fn new(upstreams: Vec<SocketAddr>, timeout: Duration) -> Forwarder {
        Forwarder { upstreams, timeout, preferred: AtomicUsize::new(0) }
    }

    /// The upstreams from `resolv_conf` (or `fallback`, see `choose_nameservers`) on
    /// `port`, without `own` (forwarding to ourselves would loop). An unreadable file
    /// leaves no upstreams: out-of-cluster names then get SERVFAIL.
    pub async fn from_resolv_conf(
        resolv_conf: &Path,
        fallback: Option<&Path>,
        port: u16,
        own: SocketAddr,
        timeout: Duration,
    ) -> Forwarder {
        let primary = read_nameservers(resolv_conf).await;
        let fallback = match fallback {
            Some(path) if primary.iter().all(IpAddr::is_loopback) => Some(read_nameservers(path).await),
            _ => None,
        };
        let upstreams: Vec<SocketAddr> = choose_nameservers(&primary, fallback.as_deref())
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .filter(|addr| !is_same_socket(*addr, own))
            .collect();
        if upstreams.is_empty() {
            tracing::warn!(path = %resolv_conf.display(), "no upstream nameservers; names outside the cluster will fail");
        } else {
            tracing::info!(?upstreams, "DNS forwarding upstreams");
        }
        Forwarder::new(upstreams, timeout)
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// Sends `query` (a whole DNS message) to the upstreams in turn until one answers,
    /// over TCP straight away when `tcp`, else over UDP with a TCP retry on truncation.
    pub async fn forward(&self, query: &[u8], tcp: bool) -> Result<Vec<u8>, ForwardError> {
        if self.upstreams.is_empty() {
            return Err(ForwardError::NoUpstreams);
        }
        let first = self.preferred.load(Ordering::Relaxed) % self.upstreams.len();
        let mut last_error = String::new();
        for i in 0..self.upstreams.len() {
            let index = (first + i) % self.upstreams.len();
            let upstream = self.upstreams[index];
            let to = upstream.to_string();
            let result =
                if tcp { self.exchange_tcp(upstream, query).await } else { self.exchange(upstream, query).await };
            match result {
                Ok(reply) => {
                    metrics::FORWARDS.with_label_values(&[to.as_str(), "success"]).inc();
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(reply);
                }
                Err(error) => {
                    let result = if matches!(error, ExchangeError::Timeout) { "timeout" } else { "error" };
                    metrics::FORWARDS.with_label_values(&[to.as_str(), result]).inc();
                    tracing::debug!(%upstream, %error, "upstream nameserver failed");
                    last_error = format!("{upstream}: {error}");
                }
            }
        }
        Err(ForwardError::AllFailed(last_error))
    }

    async fn exchange(&self, upstream: SocketAddr, query: &[u8]) -> Result<Vec<u8>, ExchangeError> {
        let reply = self.exchange_udp(upstream, query).await?;
        if truncated(&reply) { self.exchange_tcp(upstream, query).await } else { Ok(reply) }
    }

    async fn exchange_udp(&self, upstream: SocketAddr, query: &[u8]) -> Result<Vec<u8>, ExchangeError> {
        // A socket per query: a fresh random source port, and only the upstream's
        // replies reach it (connect filters the rest).
        let local: SocketAddr = match upstream {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local).await?;
        socket.connect(upstream).await?;
        socket.send(query).await?;
        let mut buf = vec![0u8; 65535];
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let len = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
                .await
                .map_err(|_| ExchangeError::Timeout)??;
            // Late replies to someone else's query cannot arrive here, but spoofed or
            // garbled ones can: wait on for the one that matches.
            if matches_query(query, &buf[..len]) {
                buf.truncate(len);
                return Ok(buf);
            }
        }
    }

    async fn exchange_tcp(&self, upstream: SocketAddr, query: &[u8]) -> Result<Vec<u8>, ExchangeError> {
        tokio::time::timeout(self.timeout, exchange_tcp(upstream, query)).await.map_err(|_| ExchangeError::Timeout)?
    }
}

/// One length-prefixed query and its reply on a fresh TCP connection.
async fn exchange_tcp(upstream: SocketAddr, query: &[u8]) -> Result<Vec<u8>, ExchangeError> {
    let len = u16::try_from(query.len()).map_err(|_| ExchangeError::TooLong)?;
    let mut stream = TcpStream::connect(upstream).await?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed).await?;
    let len = stream.read_u16().await?;
    let mut reply = vec![0u8; usize::from(len)];
    stream.read_exact(&mut reply).await?;
    if matches_query(query, &reply) { Ok(reply) } else { Err(ExchangeError::Mismatch) }
}

async fn read_nameservers(path: &Path) -> Vec<IpAddr> {
    match tokio::fs::read_to_string(path).await {
        Ok(text) => parse_resolv_conf(&text),
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "cannot read resolv.conf");
            Vec::new()
        }
    }
}

/// Whether `a` is `b`, counting a wildcard bind address as every local address.
fn is_same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || (b.ip().is_unspecified() && a.ip().is_loopback()))
}

/// Whether `reply` is a response with the query's ID.
fn matches_query(query: &[u8], reply: &[u8]) -> bool {
    reply.len() >= 12 && query.len() >= 2 && reply[..2] == query[..2] && reply[2] & 0x80 != 0
}

/// Whether a reply has the TC bit set.
pub fn truncated(reply: &[u8]) -> bool {
    reply.len() >= 3 && reply[2] & 0x02 != 0
}

/// The default path for the resolv.conf with systemd-resolved's real upstreams.
pub fn systemd_resolv_conf() -> PathBuf {
    PathBuf::from("/run/systemd/resolve/resolv.conf")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn resolv_conf_nameservers_in_order() {
        let text = "# generated\nsearch example.com\nnameserver 10.0.0.1\nnameserver   fd00::53\n\
                    nameserver fe80::1%eth0\nnameserver bogus\noptions ndots:5\n nameserver 10.0.0.2\n";
        assert_eq!(parse_resolv_conf(text), ips(&["10.0.0.1", "fd00::53", "10.0.0.2"]));
    }

    #[test]
    fn loopback_nameservers_give_way() {
        // Other nameservers exist: the loopback one is skipped.
        assert_eq!(choose_nameservers(&ips(&["127.0.0.53", "10.0.0.1"]), None), ips(&["10.0.0.1"]));
        // Only a stub: systemd's list if it has real ones...
        let fallback = ips(&["192.168.1.1", "127.0.0.1"]);
        assert_eq!(choose_nameservers(&ips(&["127.0.0.53"]), Some(&fallback)), ips(&["192.168.1.1"]));
        // ...else the stub after all.
        assert_eq!(choose_nameservers(&ips(&["127.0.0.53"]), Some(&[])), ips(&["127.0.0.53"]));
        assert_eq!(choose_nameservers(&ips(&["::1"]), None), ips(&["::1"]));
        assert_eq!(choose_nameservers(&[], None), Vec::<IpAddr>::new());
    }

    #[test]
    fn own_address_is_not_an_upstream() {
        let own: SocketAddr = "0.0.0.0:53".parse().unwrap();
        assert!(is_same_socket("127.0.0.1:53".parse().unwrap(), own));
        assert!(!is_same_socket("127.0.0.1:5353".parse().unwrap(), own));
        assert!(!is_same_socket("10.0.0.1:53".parse().unwrap(), "127.0.0.1:53".parse().unwrap()));
    }

    #[tokio::test]
    async fn no_upstreams_fail_at_once() {
        let forwarder = Forwarder::new(Vec::new(), Duration::from_millis(100));
        assert!(matches!(forwarder.forward(&[0; 12], false).await, Err(ForwardError::NoUpstreams)));
    }

    #[tokio::test]
    async fn silent_upstream_times_out() {
        // Bound but never answering.
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let forwarder = Forwarder::new(vec![silent.local_addr().unwrap()], Duration::from_millis(200));
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(5), forwarder.forward(&[0; 12], false)).await;
        assert!(matches!(result, Ok(Err(ForwardError::AllFailed(_)))), "{result:?}");
        assert!(started.elapsed() >= Duration::from_millis(200));
    }
}
