//! The DNS server against a real API server: Services and EndpointSlices made through
//! kube-rs, the server queried over UDP and TCP, and names outside the cluster
//! forwarded to a small responder this test runs on 127.0.0.1 (nothing leaves the
//! machine).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use krate_net::dns::{DnsConfig, DnsServer};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(20);

/// A nameserver for `*.example.test` on 127.0.0.1, UDP and TCP on one port:
/// `example.test` and `target.example.test` have A records, `big.example.test`
/// answers truncated over UDP and whole over TCP, anything else is NXDOMAIN.
struct Upstream {
    addr: SocketAddr,
    tcp_queries: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn upstream_answer(request: &Message, tcp: bool) -> Message {
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.recursion_available = true;
    response.queries = request.queries.clone();
    let Some(query) = request.queries.first() else { return response };
    let name = query.name.to_ascii().to_ascii_lowercase();
    let address = match name.as_str() {
        "example.test." => Some(A::new(192, 0, 2, 1)),
        "target.example.test." => Some(A::new(192, 0, 2, 3)),
        "big.example.test." if tcp => Some(A::new(192, 0, 2, 2)),
        "big.example.test." => {
            response.metadata.truncation = true;
            return response;
        }
        _ => None,
    };
    match address {
        Some(a) if query.query_type == RecordType::A => {
            response.answers.push(Record::from_rdata(query.name.clone(), 60, RData::A(a)));
        }
        Some(_) => {}
        None => response.metadata.response_code = ResponseCode::NXDomain,
    }
    response
}

async fn upstream() -> Upstream {
    let (udp, tcp) = loop {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if let Ok(tcp) = TcpListener::bind(udp.local_addr().unwrap()).await {
            break (udp, tcp);
        }
    };
    let addr = udp.local_addr().unwrap();
    let tcp_queries = Arc::new(AtomicUsize::new(0));
    let udp_task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65535];
        while let Ok((len, peer)) = udp.recv_from(&mut buf).await {
            if let Ok(request) = Message::from_vec(&buf[..len]) {
                let reply = upstream_answer(&request, false).to_vec().unwrap();
                let _ = udp.send_to(&reply, peer).await;
            }
        }
    });
    let counter = tcp_queries.clone();
    let tcp_task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = tcp.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(len) = stream.read_u16().await else { return };
                let mut packet = vec![0u8; usize::from(len)];
                if stream.read_exact(&mut packet).await.is_err() {
                    return;
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let Ok(request) = Message::from_vec(&packet) else { return };
                let reply = upstream_answer(&request, true).to_vec().unwrap();
                let _ = stream.write_all(&u16::try_from(reply.len()).unwrap().to_be_bytes()).await;
                let _ = stream.write_all(&reply).await;
            });
        }
    });
    Upstream { addr, tcp_queries, tasks: vec![udp_task, tcp_task] }
}

/// A DNS server for the cluster on a free loopback port, forwarding to `upstream_port`
/// on 127.0.0.1 through a resolv.conf in `dir`.
async fn dns_server(client: kube::Client, dir: &std::path::Path, upstream_port: u16) -> DnsServer {
    let resolv_conf = dir.join("resolv.conf");
    std::fs::write(&resolv_conf, "search example.test\nnameserver 127.0.0.1\noptions ndots:1\n").unwrap();
    let config = DnsConfig {
        listen: (Ipv4Addr::LOCALHOST, 0).into(),
        resolv_conf,
        // Never the machine's own resolver, even though 127.0.0.1 is loopback.
        fallback_resolv_conf: None,
        upstream_port,
        forward_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let server = DnsServer::start(client, config).await.expect("DNS server starts");
    tokio::time::timeout(WAIT, server.synced()).await.expect("DNS index synced");
    server
}

/// One query to `server`, over TCP or UDP, bounded in time.
async fn ask(server: SocketAddr, name: &str, qtype: RecordType, tcp: bool) -> Message {
    let mut request = Message::query();
    request.metadata.recursion_desired = true;
    request.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    let bytes = request.to_vec().unwrap();
    let exchange = async {
        if tcp {
            let mut stream = TcpStream::connect(server).await.unwrap();
            stream.write_all(&u16::try_from(bytes.len()).unwrap().to_be_bytes()).await.unwrap();
            stream.write_all(&bytes).await.unwrap();
            let len = stream.read_u16().await.unwrap();
            let mut reply = vec![0u8; usize::from(len)];
            stream.read_exact(&mut reply).await.unwrap();
            reply
        } else {
            let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            socket.send_to(&bytes, server).await.unwrap();
            let mut reply = vec![0u8; 65535];
            let len = socket.recv(&mut reply).await.unwrap();
            reply.truncate(len);
            reply
        }
    };
    let reply = tokio::time::timeout(Duration::from_secs(5), exchange).await.expect("DNS reply in time");
    let response = Message::from_vec(&reply).unwrap();
    assert_eq!(response.metadata.id, request.metadata.id);
    assert_eq!(response.metadata.message_type, MessageType::Response);
    response
}

fn addresses(message: &Message) -> Vec<String> {
    let mut found: Vec<String> = message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    found.sort();
    found
}

fn targets(records: &[Record]) -> Vec<String> {
    let mut found: Vec<String> = records
        .iter()
        .filter_map(|r| match &r.data {
            RData::CNAME(n) => Some(n.0.to_ascii()),
            RData::PTR(n) => Some(n.0.to_ascii()),
            RData::SRV(srv) => Some(format!("{} {} {} {}", srv.priority, srv.weight, srv.port, srv.target)),
            _ => None,
        })
        .collect();
    found.sort();
    found
}

/// Polls `name` over UDP until its addresses are `want` (sorted).
async fn addresses_become(server: SocketAddr, name: &str, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    eventually(&format!("{name} to resolve to {want:?}"), WAIT, || {
        let want = want.clone();
        async move { (addresses(&ask(server, name, RecordType::A, false).await) == want).then_some(()) }
    })
    .await;
}

async fn rcode_becomes(server: SocketAddr, name: &str, want: ResponseCode) {
    eventually(&format!("{name} to answer {want}"), WAIT, || async move {
        (ask(server, name, RecordType::A, false).await.metadata.response_code == want).then_some(())
    })
    .await;
}

fn slice(name: &str, service: &str, endpoints: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        "endpoints": endpoints
    }))
    .unwrap()
}

#[tokio::test]
async fn cluster_names_follow_the_api() {
    let cluster = TestCluster::start().await;
    let client = cluster.admin().await;
    let upstream = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = dns_server(client.clone(), dir.path(), upstream.addr.port()).await;
    let dns = server.local_addr();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let post = PostParams::default();

    // A ClusterIP Service: its address, SRV and PTR, over both transports.
    let web: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": "web"}}
    }))
    .unwrap();
    let web = services.create(&post, &web).await.unwrap();
    let ip = web.spec.unwrap().cluster_ip.expect("a cluster IP allocated");
    addresses_become(dns, "web.default.svc.cluster.local.", &[&ip]).await;
    let over_tcp = ask(dns, "Web.Default.Svc.Cluster.Local.", RecordType::A, true).await;
    assert_eq!(addresses(&over_tcp), vec![ip.clone()]);
    assert!(over_tcp.metadata.authoritative);
    let srv = ask(dns, "_http._tcp.web.default.svc.cluster.local.", RecordType::SRV, false).await;
    assert_eq!(targets(&srv.answers), vec!["0 100 80 web.default.svc.cluster.local."]);
    let reverse: Vec<&str> = ip.split('.').rev().collect();
    let ptr = ask(dns, &format!("{}.in-addr.arpa.", reverse.join(".")), RecordType::PTR, false).await;
    assert_eq!(targets(&ptr.answers), vec!["web.default.svc.cluster.local."]);
    // A name in the zone that does not exist, and one that has no such records.
    let missing = ask(dns, "nope.default.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
    assert!(matches!(missing.authorities.first().map(|r| &r.data), Some(RData::SOA(_))));
    let nodata = ask(dns, "web.default.svc.cluster.local.", RecordType::AAAA, false).await;
    assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    assert!(matches!(nodata.authorities.first().map(|r| &r.data), Some(RData::SOA(_))));

    // A headless Service with a hand-made EndpointSlice: ready endpoints only.
    let db: Service = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}
    }))
    .unwrap();
    services.create(&post, &db).await.unwrap();
    let endpoints = json!([
        {"addresses": ["10.0.0.2"], "hostname": "db-0", "conditions": {"ready": true}},
        {"addresses": ["10.0.0.3"], "conditions": {"ready": false}}
    ]);
    slices.create(&post, &slice("db-abc", "db", endpoints)).await.unwrap();
    addresses_become(dns, "db.default.svc.cluster.local.", &["10.0.0.2"]).await;
    let named = ask(dns, "db-0.db.default.svc.cluster.local.", RecordType::A, true).await;
    assert_eq!(addresses(&named), vec!["10.0.0.2"]);
    let srv = ask(dns, "_pg._tcp.db.default.svc.cluster.local.", RecordType::SRV, false).await;
    assert_eq!(targets(&srv.answers), vec!["0 100 5432 db-0.db.default.svc.cluster.local."]);
    assert_eq!(srv.additionals.len(), 1);
    assert_eq!(srv.additionals[0].name.to_ascii(), "db-0.db.default.svc.cluster.local.");
    let ptr = ask(dns, "2.0.0.10.in-addr.arpa.", RecordType::PTR, false).await;
    assert_eq!(targets(&ptr.answers), vec!["db-0.db.default.svc.cluster.local."]);

    // publishNotReadyAddresses brings in the not-ready one; the endpoint turning
    // ready keeps it; a second slice adds to the set.
    let publish = json!({"spec": {"publishNotReadyAddresses": true}});
    services.patch("db", &PatchParams::default(), &Patch::Merge(&publish)).await.unwrap();
    addresses_become(dns, "db.default.svc.cluster.local.", &["10.0.0.2", "10.0.0.3"]).await;
    addresses_become(dns, "10-0-0-3.db.default.svc.cluster.local.", &["10.0.0.3"]).await;
    let unpublish = json!({"spec": {"publishNotReadyAddresses": false}});
    services.patch("db", &PatchParams::default(), &Patch::Merge(&unpublish)).await.unwrap();
    addresses_become(dns, "db.default.svc.cluster.local.", &["10.0.0.2"]).await;
    slices.create(&post, &slice("db-def", "db", json!([{"addresses": ["10.0.0.4"]}]))).await.unwrap();
    addresses_become(dns, "db.default.svc.cluster.local.", &["10.0.0.2", "10.0.0.4"]).await;
    slices.delete("db-abc", &DeleteParams::default()).await.unwrap();
    addresses_become(dns, "db.default.svc.cluster.local.", &["10.0.0.4"]).await;

    // An ExternalName Service: a CNAME, its target resolved upstream; retargeting it
    // at a cluster name is followed in the zone.
    let ext: Service = serde_json::from_value(json!({
        "metadata": {"name": "ext"},
        "spec": {"type": "ExternalName", "externalName": "target.example.test"}
    }))
    .unwrap();
    services.create(&post, &ext).await.unwrap();
    addresses_become(dns, "ext.default.svc.cluster.local.", &["192.0.2.3"]).await;
    let cname = ask(dns, "ext.default.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(targets(&cname.answers), vec!["target.example.test."]);
    let retarget = json!({"spec": {"externalName": "web.default.svc.cluster.local"}});
    services.patch("ext", &PatchParams::default(), &Patch::Merge(&retarget)).await.unwrap();
    addresses_become(dns, "ext.default.svc.cluster.local.", &[&ip]).await;

    // Deleting the Service takes its names away.
    services.delete("web", &DeleteParams::default()).await.unwrap();
    rcode_becomes(dns, "web.default.svc.cluster.local.", ResponseCode::NXDomain).await;
    services.delete("db", &DeleteParams::default()).await.unwrap();
    rcode_becomes(dns, "db-0.db.default.svc.cluster.local.", ResponseCode::NXDomain).await;

    // Pod names need no objects at all.
    let pod = ask(dns, "10-244-0-7.default.pod.cluster.local.", RecordType::A, false).await;
    assert_eq!(addresses(&pod), vec!["10.244.0.7"]);
    server.stop().await;
}

#[tokio::test]
async fn outside_names_are_forwarded_upstream() {
    let cluster = TestCluster::start().await;
    let client = cluster.admin().await;
    let upstream = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = dns_server(client.clone(), dir.path(), upstream.addr.port()).await;
    assert_eq!(server.upstreams(), &[upstream.addr]);
    let dns = server.local_addr();

    for tcp in [false, true] {
        let found = ask(dns, "example.test.", RecordType::A, tcp).await;
        assert_eq!(found.metadata.response_code, ResponseCode::NoError);
        assert_eq!(addresses(&found), vec!["192.0.2.1"]);
        // Upstream's NXDOMAIN is passed on as it is.
        let missing = ask(dns, "nope.example.test.", RecordType::A, tcp).await;
        assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
    }

    // Truncated over UDP upstream: asked again over TCP, answered whole over UDP.
    let before = upstream.tcp_queries.load(Ordering::SeqCst);
    let big = ask(dns, "big.example.test.", RecordType::A, false).await;
    assert!(!big.metadata.truncation);
    assert_eq!(addresses(&big), vec!["192.0.2.2"]);
    assert!(upstream.tcp_queries.load(Ordering::SeqCst) > before);

    // With the upstream gone, SERVFAIL (after the forward timeout, not never).
    drop(upstream);
    eventually("SERVFAIL without an upstream", WAIT, || async move {
        let failed = ask(dns, "example.test.", RecordType::A, false).await;
        (failed.metadata.response_code == ResponseCode::ServFail).then_some(())
    })
    .await;
    // Cluster names do not depend on it.
    let zone = ask(dns, "kubernetes.default.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(zone.metadata.response_code, ResponseCode::NoError);
    assert_eq!(zone.answers.len(), 1);
    server.stop().await;
}
