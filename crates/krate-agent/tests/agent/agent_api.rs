//! The agent's HTTPS API against a real API server: callers are authorized by
//! SubjectAccessReview on nodes/<subresource> as upstream's kubelet does, and the API
//! server's nodes/proxy passes plain requests and upgraded connections through to it.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use krate_agent::agent::{self, AgentConfig, Seams, Serving};
use krate_agent::bootstrap::CertKey;
use krate_agent::kubelet_api::{RouteFuture, Routes, auth::User};
use krate_api::user::UserInfo;
use krate_testkit::{TestCluster, eventually};

const NODE: &str = "api-node";

/// An endpoint standing in for the runtime's streaming ones: /echo upgrades the
/// connection and echoes what it reads.
struct Echo;

impl Routes for Echo {
    fn handles(&self, path: &str) -> bool {
        path == "/echo"
    }

    fn route(&self, mut req: Request<Incoming>, _user: &User) -> RouteFuture {
        let upgrade = hyper::upgrade::on(&mut req);
        Box::pin(async move {
            tokio::spawn(async move {
                let Ok(upgraded) = upgrade.await else { return };
                let mut io = TokioIo::new(upgraded);
                let mut buf = [0u8; 64];
                while let Ok(n) = io.read(&mut buf).await {
                    if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header("connection", "Upgrade")
                .header("upgrade", "test-echo")
                .body(Full::new(bytes::Bytes::new()).map_err(|never| match never {}).boxed())
                .unwrap()
        })
    }
}

async fn start_agent(cluster: &TestCluster) -> agent::Agent {
    let pki = &cluster.running.pki;
    let user = UserInfo {
        name: format!("system:node:{NODE}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        ..Default::default()
    };
    let serving = pki.issue_serving(&format!("system:node:{NODE}"), &["system:nodes"], &["127.0.0.1".into()]).unwrap();
    let config = AgentConfig {
        node_name: NODE.into(),
        hostname: NODE.into(),
        node_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        kubelet_port: 0,
        data_dir: cluster.dir.path().join("agent"),
        kubelet_version: "v1.36.0".into(),
        ca_pem: pki.ca.cert_pem.clone(),
    };
    let serving = Serving::Given(CertKey { cert_pem: serving.cert_pem, key_pem: serving.key_pem });
    let seams = Seams { routes: Some(Arc::new(Echo)), ..Default::default() };
    agent::start(cluster.client_as(user), config, serving, seams).await.expect("agent starts")
}

/// A TLS connection to `port` trusting the cluster CA, with `client` as certificate.
async fn connect(
    cluster: &TestCluster,
    port: u16,
    client: Option<&krate_apiserver::pki::CertKey>,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(cluster.running.pki.ca.cert_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some(ck) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(ck.cert_pem.as_bytes()).collect::<Result<_, _>>().unwrap();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(ck.key_pem.as_bytes()).unwrap()).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
}

/// GET `path` on the agent as `client`: (status, body).
async fn get(
    cluster: &TestCluster,
    port: u16,
    client: Option<&krate_apiserver::pki::CertKey>,
    path: &str,
) -> (u16, String) {
    let mut tls = connect(cluster, port, client).await;
    tls.write_all(format!("GET {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_string(&mut out)).await.unwrap().unwrap_or_default();
    let status = out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn the_agent_authorizes_callers_per_subresource() {
    let cluster = TestCluster::start().await;
    let agent = start_agent(&cluster).await;
    let port = agent.kubelet_addr.port();
    let pki = &cluster.running.pki;

    // No credentials: 401. A user without rights: 403 with the kubelet's message.
    assert_eq!(get(&cluster, port, None, "/healthz").await.0, 401);
    let jane = pki.issue_client("jane", &[]).unwrap();
    let (status, body) = get(&cluster, port, Some(&jane), "/healthz").await;
    assert_eq!((status, body.as_str()), (403, "Forbidden (user=jane, verb=get, resource=nodes, subresource=proxy)"));

    // nodes/healthz alone opens /healthz, not /pods (fine-grained, else nodes/proxy).
    let admin = cluster.admin().await;
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "healthz-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/healthz"], "verbs": ["get"]}]}))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": "healthz-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "healthz-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "joe"}]}))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await.unwrap();
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    eventually("RBAC sees the binding", Duration::from_secs(10), || {
        let reviews = reviews.clone();
        async move {
            let sar: SubjectAccessReview = serde_json::from_value(json!({"spec": {"user": "joe",
                "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": "healthz", "name": NODE}}}))
            .unwrap();
            let answer = reviews.create(&PostParams::default(), &sar).await.ok()?;
            answer.status.filter(|s| s.allowed).map(|_| ())
        }
    })
    .await;
    let joe = pki.issue_client("joe", &[]).unwrap();
    assert_eq!(get(&cluster, port, Some(&joe), "/healthz").await, (200, "ok".to_string()));
    assert_eq!(get(&cluster, port, Some(&joe), "/pods").await.0, 403);
    // The admin (system:masters) may do anything, /pods lists the node's pods.
    let (status, body) = get(&cluster, port, Some(&pki.admin), "/pods").await;
    assert_eq!(status, 200);
    assert!(body.contains("\"kind\":\"PodList\""), "{body}");
    assert_eq!(get(&cluster, port, Some(&pki.admin), "/nothing-here").await.0, 404);
}

#[tokio::test]
async fn nodes_proxy_passes_requests_and_upgraded_connections_through() {
    let cluster = TestCluster::start().await;
    let _agent = start_agent(&cluster).await;
    let admin = cluster.admin().await;

    let req = Request::get(format!("/api/v1/nodes/{NODE}/proxy/healthz")).body(vec![]).unwrap();
    assert_eq!(admin.request_text(req).await.unwrap(), "ok");

    // An upgraded connection through the API server to the agent's /echo, and back.
    let mut tls = connect(&cluster, cluster.running.port, Some(&cluster.running.pki.admin)).await;
    let head = format!(
        "GET /api/v1/nodes/{NODE}/proxy/echo HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: test-echo\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let mut byte = [0u8; 1];
    while !response.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut byte)).await.unwrap().unwrap();
        assert_eq!(n, 1, "connection closed after {:?}", String::from_utf8_lossy(&response));
        response.push(byte[0]);
    }
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 101"), "{response}");
    tls.write_all(b"hello through the proxy").await.unwrap();
    let mut echoed = vec![0u8; "hello through the proxy".len()];
    tokio::time::timeout(Duration::from_secs(10), tls.read_exact(&mut echoed)).await.unwrap().unwrap();
    assert_eq!(echoed, b"hello through the proxy");

    // The API server authorizes nodes/proxy first.
    let nobody = cluster.running.pki.issue_client("nobody", &[]).unwrap();
    let mut tls = connect(&cluster, cluster.running.port, Some(&nobody)).await;
    tls.write_all(
        format!("GET /api/v1/nodes/{NODE}/proxy/healthz HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_string(&mut out)).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
}
