//! The sockets: UDP and TCP (length-prefixed, RFC 1035 4.2.2) on one address, each
//! request answered from the index inline or, for names outside the cluster, by a
//! task that forwards it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};
use parking_lot::RwLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::answer::{EDNS_PAYLOAD, Outcome, answer, reply};
use super::forward::Forwarder;
use super::index::Index;
use super::{DnsConfig, DnsError, metrics, watch};

/// How long a TCP connection may sit idle between queries (CoreDNS's default).
const TCP_IDLE: Duration = Duration::from_secs(10);

/// What the sockets share: the index, whether it holds the first lists yet, and the
/// forwarder with its bound on queries in flight upstream.
pub(crate) struct Shared {
    pub index: RwLock<Index>,
    pub synced: tokio::sync::watch::Sender<bool>,
    pub forwarder: Forwarder,
    forward_slots: Arc<Semaphore>,
    tcp_slots: Arc<Semaphore>,
}

/// A running DNS server. Dropping it (or `stop`) closes its sockets and ends its
/// watches.
pub struct DnsServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl DnsServer {
    /// Binds `config.listen` (UDP and TCP on the same port, also when it asks for port
    /// 0), starts watching Services and EndpointSlices through `client`, and serves.
    /// Names in the zone get SERVFAIL until the first lists are in (see `synced`).
    pub async fn start(client: kube::Client, config: DnsConfig) -> Result<DnsServer, DnsError> {
        let index = Index::new(&config.zone, config.ttl)?;
        let mut server = DnsServer::serve(config, index, false).await?;
        let shared = server.shared.clone();
        server.tasks.push(tokio::spawn(watch::run(client, shared)));
        Ok(server)
    }

    /// Serves `index` as it is, with no watches (unit tests of the sockets).
    pub(crate) async fn serve(config: DnsConfig, index: Index, synced: bool) -> Result<DnsServer, DnsError> {
        let (udp, tcp) = bind(config.listen).await?;
        let local_addr = udp.local_addr().map_err(|source| DnsError::Bind { addr: config.listen, source })?;
        let forwarder = Forwarder::from_resolv_conf(
            &config.resolv_conf,
            config.fallback_resolv_conf.as_deref(),
            config.upstream_port,
            local_addr,
            config.forward_timeout,
        )
        .await;
        let shared = Arc::new(Shared {
            index: RwLock::new(index),
            synced: tokio::sync::watch::Sender::new(synced),
            forwarder,
            forward_slots: Arc::new(Semaphore::new(config.max_forwards)),
            tcp_slots: Arc::new(Semaphore::new(config.max_tcp_connections)),
        });
        let tasks =
            vec![tokio::spawn(serve_udp(shared.clone(), Arc::new(udp))), tokio::spawn(serve_tcp(shared.clone(), tcp))];
        tracing::info!(addr = %local_addr, zone = %shared.index.read().zone().name(), "cluster DNS serving");
        Ok(DnsServer { local_addr, shared, tasks })
    }

    /// The address served, UDP and TCP.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The upstream nameservers names outside the zone go to.
    pub fn upstreams(&self) -> &[SocketAddr] {
        self.shared.forwarder.upstreams()
    }

    /// Waits until the first list of Services and of EndpointSlices is in the index.
    pub async fn synced(&self) {
        // The sender lives in `shared`, which this holds: waiting cannot fail.
        let _ = self.shared.synced.subscribe().wait_for(|synced| *synced).await;
    }

    /// Stops serving and watching; the sockets are closed when this returns.
    pub async fn stop(mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn bind(listen: SocketAddr) -> Result<(UdpSocket, TcpListener), DnsError> {
    let failed = |addr, source| DnsError::Bind { addr, source };
    if listen.port() != 0 {
        let udp = UdpSocket::bind(listen).await.map_err(|e| failed(listen, e))?;
        let tcp = TcpListener::bind(listen).await.map_err(|e| failed(listen, e))?;
        return Ok((udp, tcp));
    }
    // Any port, the same for both: take UDP's and try it for TCP, a few times over.
    let mut last = None;
    for _ in 0..16 {
        let udp = UdpSocket::bind(listen).await.map_err(|e| failed(listen, e))?;
        let addr = udp.local_addr().map_err(|e| failed(listen, e))?;
        match TcpListener::bind(addr).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => last = Some(error),
            Err(error) => return Err(failed(addr, error)),
        }
    }
    Err(failed(listen, last.unwrap_or_else(|| std::io::ErrorKind::AddrInUse.into())))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// A request whose answer needs an upstream.
struct Pending {
    request: Message,
    raw: Vec<u8>,
    chase: Option<(Message, Name, RecordType)>,
    transport: Transport,
    started: Instant,
    _slot: OwnedSemaphorePermit,
}

enum Step {
    /// Reply with these bytes (None: no reply at all).
    Done(Option<Vec<u8>>),
    Later(Box<Pending>),
}

/// Everything that can be decided without waiting: the answer from the index, or the
/// forward to make.
fn decide(shared: &Shared, packet: &[u8], transport: Transport) -> Step {
    let started = Instant::now();
    let Ok(request) = Message::from_vec(packet) else {
        return Step::Done(format_error(packet, transport, started));
    };
    let in_zone = |index: &Index| request.queries.first().is_some_and(|q| index.zone().relative(&q.name).is_some());
    let outcome = {
        let index = shared.index.read();
        // An index without the first lists would call every Service missing, and
        // resolvers cache NXDOMAIN: better they retry.
        if !*shared.synced.borrow() && in_zone(&index) {
            Outcome::Answer(reply(&request, ResponseCode::ServFail))
        } else {
            answer(&index, &request)
        }
    };
    let chase = match outcome {
        Outcome::Drop => return Step::Done(None),
        Outcome::Answer(response) => {
            return Step::Done(Some(finish(&request, &response, transport, "cluster", started)));
        }
        Outcome::Forward => None,
        Outcome::Chase { response, target, qtype } => Some((response, target, qtype)),
    };
    let Ok(slot) = shared.forward_slots.clone().try_acquire_owned() else {
        tracing::debug!("too many queries in flight upstream; answering SERVFAIL");
        let response = reply(&request, ResponseCode::ServFail);
        return Step::Done(Some(finish(&request, &response, transport, "forward", started)));
    };
    Step::Later(Box::new(Pending { request, raw: packet.to_vec(), chase, transport, started, _slot: slot }))
}

/// The answer to a pending request, from upstream.
async fn complete(shared: &Shared, pending: Pending) -> Vec<u8> {
    let Pending { request, raw, chase, transport, started, .. } = pending;
    let tcp = transport == Transport::Tcp;
    if let Some((mut response, target, qtype)) = chase {
        // The ExternalName's target, asked for afresh (the client's query names the
        // Service, which upstream knows nothing of).
        let mut query = Message::query();
        query.metadata.recursion_desired = true;
        query.add_query(Query::query(target, qtype));
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        query.edns = Some(edns);
        if let Ok(bytes) = query.to_vec()
            && let Ok(reply) = shared.forwarder.forward(&bytes, tcp).await
            && let Ok(found) = Message::from_vec(&reply)
        {
            response.answers.extend(found.answers);
        }
        return finish(&request, &response, transport, "forward", started);
    }
    match shared.forwarder.forward(&raw, tcp).await {
        Ok(reply) => {
            let limit = usize::from(udp_limit(&request, transport));
            if reply.len() <= limit {
                record(&request, reply[3] & 0x0f, transport, "forward", started);
                return reply;
            }
            // Bigger than the client takes over UDP: truncated, so it retries on TCP.
            let response = Message::from_vec(&reply).unwrap_or_else(|_| reply_servfail(&request));
            finish(&request, &response, transport, "forward", started)
        }
        Err(error) => {
            tracing::debug!(%error, "forwarding failed; answering SERVFAIL");
            finish(&request, &reply_servfail(&request), transport, "forward", started)
        }
    }
}

fn reply_servfail(request: &Message) -> Message {
    reply(request, ResponseCode::ServFail)
}

/// The largest response the client takes: its EDNS payload size (at least 512) over
/// UDP, the 16-bit length over TCP.
fn udp_limit(request: &Message, transport: Transport) -> u16 {
    match transport {
        Transport::Udp => request.max_payload(),
        Transport::Tcp => u16::MAX,
    }
}

/// Encodes `response` within the client's size limit (hickory-proto drops the records
/// that do not fit and sets TC) and counts it.
fn finish(request: &Message, response: &Message, transport: Transport, source: &str, started: Instant) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(512);
    let mut encoder = BinEncoder::new(&mut bytes);
    encoder.set_max_size(udp_limit(request, transport));
    let encoded = response.emit(&mut encoder).is_ok();
    if !encoded {
        // Not even the header and question fit, or a name failed to encode.
        bytes = reply_servfail(request).to_vec().unwrap_or_default();
    }
    record(request, bytes.get(3).map_or(2, |b| b & 0x0f), transport, source, started);
    bytes
}

fn record(request: &Message, rcode: u8, transport: Transport, source: &str, started: Instant) {
    let qtype = request.queries.first().map(|q| q.query_type);
    metrics::REQUESTS
        .with_label_values(&[transport.label(), metrics::type_label(qtype), metrics::rcode_label(rcode)])
        .inc();
    metrics::DURATION.with_label_values(&[source]).observe(started.elapsed().as_secs_f64());
}

/// FORMERR for a packet that does not parse, when its header says it is a query;
/// nothing for anything shorter than a header or not a query.
fn format_error(packet: &[u8], transport: Transport, started: Instant) -> Option<Vec<u8>> {
    if packet.len() < 12 || packet[2] & 0x80 != 0 {
        return None;
    }
    let id = u16::from_be_bytes([packet[0], packet[1]]);
    let response = Message::error_msg(id, OpCode::from_u8((packet[2] >> 3) & 0x0f), ResponseCode::FormErr);
    let bytes = response.to_vec().ok()?;
    metrics::REQUESTS.with_label_values(&[transport.label(), "none", "FORMERR"]).inc();
    metrics::DURATION.with_label_values(&["cluster"]).observe(started.elapsed().as_secs_f64());
    Some(bytes)
}

async fn serve_udp(shared: Arc<Shared>, socket: Arc<UdpSocket>) {
    let mut buf = vec![0u8; 65535];
    // Forwards in flight: aborted with this task, so stopping leaves nothing behind.
    let mut forwards = JoinSet::new();
    loop {
        while forwards.try_join_next().is_some() {}
        let (len, peer) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(error) => {
                tracing::debug!(%error, "DNS UDP receive failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        match decide(&shared, &buf[..len], Transport::Udp) {
            Step::Done(Some(reply)) => {
                if let Err(error) = socket.send_to(&reply, peer).await {
                    tracing::debug!(%peer, %error, "DNS UDP send failed");
                }
            }
            Step::Done(None) => {}
            Step::Later(pending) => {
                let (shared, socket) = (shared.clone(), socket.clone());
                forwards.spawn(async move {
                    let reply = complete(&shared, *pending).await;
                    if let Err(error) = socket.send_to(&reply, peer).await {
                        tracing::debug!(%peer, %error, "DNS UDP send failed");
                    }
                });
            }
        }
    }
}

async fn serve_tcp(shared: Arc<Shared>, listener: TcpListener) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "DNS TCP accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = shared.tcp_slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many DNS TCP connections; closing");
            continue;
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let _slot = slot;
            if let Err(error) = serve_connection(&shared, stream).await {
                tracing::debug!(%peer, %error, "DNS TCP connection ended");
            }
        });
    }
}

/// Queries on one TCP connection, one after another, until the client closes it or
/// idles.
async fn serve_connection(shared: &Shared, mut stream: TcpStream) -> std::io::Result<()> {
    loop {
        let len = match tokio::time::timeout(TCP_IDLE, stream.read_u16()).await {
            Ok(Ok(len)) => len,
            // Closed or idle: both a normal end.
            Ok(Err(_)) | Err(_) => return Ok(()),
        };
        let mut packet = vec![0u8; usize::from(len)];
        tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut packet))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        let reply = match decide(shared, &packet, Transport::Tcp) {
            Step::Done(reply) => reply,
            Step::Later(pending) => Some(complete(shared, *pending).await),
        };
        let Some(reply) = reply else { continue };
        let Ok(len) = u16::try_from(reply.len()) else { continue };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&reply);
        stream.write_all(&framed).await?;
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::rr::RData;
    use serde_json::json;

    use super::super::index::DEFAULT_TTL;
    use super::super::index::tests::{service, slice};
    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    /// default/web at 10.96.0.10 and default/big, headless with 100 endpoints (more
    /// than a 512-byte UDP answer holds).
    fn index() -> Index {
        let mut index = Index::new("cluster.local", DEFAULT_TTL).unwrap();
        let web = service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}
        }));
        index.update("default", "web", Some(&web), []);
        let big = service(json!({"metadata": {"name": "big", "namespace": "default"}, "spec": {"clusterIP": "None"}}));
        let endpoints: Vec<serde_json::Value> =
            (0..100).map(|i| json!({"addresses": [format!("10.1.{}.{}", i / 250, i % 250 + 1)]})).collect();
        let big_slice = slice(json!({
            "metadata": {"name": "big-x", "namespace": "default", "labels": {"kubernetes.io/service-name": "big"}},
            "addressType": "IPv4",
            "endpoints": endpoints
        }));
        index.update("default", "big", Some(&big), [&big_slice]);
        index
    }

    /// A server on a free loopback port with no upstreams.
    async fn server(synced: bool) -> (DnsServer, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = DnsConfig {
            listen: (Ipv4Addr::LOCALHOST, 0).into(),
            resolv_conf: dir.path().join("missing-resolv.conf"),
            fallback_resolv_conf: None,
            ..Default::default()
        };
        (DnsServer::serve(config, index(), synced).await.unwrap(), dir)
    }

    fn query(name: &str, qtype: RecordType) -> Message {
        let mut message = Message::query();
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        message
    }

    async fn udp_exchange(addr: SocketAddr, packet: &[u8]) -> Option<Vec<u8>> {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.send_to(packet, addr).await.unwrap();
        let mut buf = vec![0u8; 65535];
        match tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf)).await {
            Ok(Ok(len)) => Some(buf[..len].to_vec()),
            _ => None,
        }
    }

    async fn udp(addr: SocketAddr, message: &Message) -> Message {
        let reply = udp_exchange(addr, &message.to_vec().unwrap()).await.expect("a UDP reply");
        Message::from_vec(&reply).unwrap()
    }

    async fn tcp(addr: SocketAddr, message: &Message) -> Message {
        let work = async {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let bytes = message.to_vec().unwrap();
            stream.write_all(&u16::try_from(bytes.len()).unwrap().to_be_bytes()).await.unwrap();
            stream.write_all(&bytes).await.unwrap();
            let len = stream.read_u16().await.unwrap();
            let mut reply = vec![0u8; usize::from(len)];
            stream.read_exact(&mut reply).await.unwrap();
            Message::from_vec(&reply).unwrap()
        };
        tokio::time::timeout(WAIT, work).await.expect("a TCP reply in time")
    }

    #[tokio::test]
    async fn answers_over_udp_and_tcp() {
        let (server, _dir) = server(true).await;
        let counted = || {
            let udp = metrics::REQUESTS.with_label_values(&["udp", "A", "NOERROR"]).get();
            let tcp = metrics::REQUESTS.with_label_values(&["tcp", "A", "NOERROR"]).get();
            (udp, tcp)
        };
        let before = counted();
        let request = query("web.default.svc.cluster.local.", RecordType::A);
        for response in [udp(server.local_addr(), &request).await, tcp(server.local_addr(), &request).await] {
            assert_eq!(response.metadata.id, request.metadata.id);
            assert_eq!(response.answers.len(), 1);
            assert_eq!(response.answers[0].data, RData::A(hickory_proto::rr::rdata::A::new(10, 96, 0, 10)));
        }
        // Other tests count into the same metrics, so only growth is certain.
        let after = counted();
        assert!(after.0 > before.0 && after.1 > before.1, "{before:?} -> {after:?}");
        server.stop().await;
    }

    #[tokio::test]
    async fn big_answers_are_truncated_over_udp_only() {
        let (server, _dir) = server(true).await;
        let request = query("big.default.svc.cluster.local.", RecordType::A);
        let over_udp = udp(server.local_addr(), &request).await;
        assert!(over_udp.metadata.truncation);
        assert!(over_udp.answers.len() < 100);
        let mut raw_len = over_udp.to_vec().unwrap().len();
        assert!(raw_len <= 512, "{raw_len} bytes");
        let over_tcp = tcp(server.local_addr(), &request).await;
        assert!(!over_tcp.metadata.truncation);
        assert_eq!(over_tcp.answers.len(), 100);
        // A larger EDNS buffer takes more of them.
        let mut with_edns = request.clone();
        let mut edns = Edns::new();
        edns.set_max_payload(4096);
        with_edns.edns = Some(edns);
        let over_udp = udp(server.local_addr(), &with_edns).await;
        assert!(
            !over_udp.metadata.truncation,
            "{} answers, {} bytes",
            over_udp.answers.len(),
            over_udp.to_vec().unwrap().len()
        );
        assert_eq!(over_udp.answers.len(), 100);
        raw_len = over_udp.to_vec().unwrap().len();
        assert!(raw_len > 512);
        server.stop().await;
    }

    #[tokio::test]
    async fn malformed_packets_are_dropped_or_formerr() {
        let (server, _dir) = server(true).await;
        let addr = server.local_addr();
        // Too short for a header: nothing back.
        assert_eq!(udp_exchange(addr, &[1, 2, 3]).await, None);
        // A query header claiming a question that is not there: FORMERR, same ID.
        let garbage = [0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        let reply = udp_exchange(addr, &garbage).await.expect("FORMERR");
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.metadata.id, 0xabcd);
        assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
        // A response (QR set) is never answered, so two servers cannot loop.
        let mut response = query("web.default.svc.cluster.local.", RecordType::A);
        response.metadata.message_type = hickory_proto::op::MessageType::Response;
        assert_eq!(udp_exchange(addr, &response.to_vec().unwrap()).await, None);
        // Garbage over TCP too, and the server still answers afterwards.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&[0, 3, 1, 2, 3]).await.unwrap();
        let ok = udp(addr, &query("web.default.svc.cluster.local.", RecordType::A)).await;
        assert_eq!(ok.answers.len(), 1);
        server.stop().await;
    }

    #[tokio::test]
    async fn no_upstream_is_servfail() {
        let (server, _dir) = server(true).await;
        assert!(server.upstreams().is_empty());
        let response = udp(server.local_addr(), &query("example.com.", RecordType::A)).await;
        assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
        server.stop().await;
    }

    #[tokio::test]
    async fn unsynced_index_is_servfail_in_the_zone() {
        let (server, _dir) = server(false).await;
        let response = udp(server.local_addr(), &query("web.default.svc.cluster.local.", RecordType::A)).await;
        assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
        server.shared.synced.send_replace(true);
        tokio::time::timeout(WAIT, server.synced()).await.expect("synced");
        let response = udp(server.local_addr(), &query("web.default.svc.cluster.local.", RecordType::A)).await;
        assert_eq!(response.metadata.response_code, ResponseCode::NoError);
        server.stop().await;
    }

    #[tokio::test]
    async fn stop_closes_the_port() {
        let (server, _dir) = server(true).await;
        let addr = server.local_addr();
        server.stop().await;
        // The port is free again for both transports.
        let udp = UdpSocket::bind(addr).await;
        let tcp = TcpListener::bind(addr).await;
        assert!(udp.is_ok() && tcp.is_ok(), "{udp:?} {tcp:?}");
    }

    #[tokio::test]
    async fn answers_in_well_under_a_millisecond() {
        let index = index();
        let request = query("web.default.svc.cluster.local.", RecordType::A).to_vec().unwrap();
        let shared = Shared {
            index: RwLock::new(index),
            synced: tokio::sync::watch::Sender::new(true),
            forwarder: Forwarder::new(Vec::new(), Duration::from_millis(10)),
            forward_slots: Arc::new(Semaphore::new(1)),
            tcp_slots: Arc::new(Semaphore::new(1)),
        };
        let started = Instant::now();
        for _ in 0..1000 {
            let Step::Done(Some(reply)) = decide(&shared, &request, Transport::Udp) else { panic!("answered inline") };
            assert!(reply.len() > 12);
        }
        let each = started.elapsed() / 1000;
        // Generous for a loaded debug build; typically a few microseconds.
        assert!(each < Duration::from_millis(1), "{each:?} per answer");
    }
}
