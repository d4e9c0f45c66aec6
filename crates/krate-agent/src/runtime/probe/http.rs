//! httpGet actions as upstream's pkg/probe/http: GET to the pod IP (or the given host)
//! with scheme, path, port and headers, a `kube-probe/1.36` (hooks:
//! `kube-lifecycle/1.36`) User-Agent and `Accept: */*` unless set, TLS without
//! verification, no keep-alive, redirects followed only on the same host (at most 10),
//! the body read up to 10 KiB. Probes succeed on 200–399; a redirect to another host
//! is returned as is and counts as success with a warning.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustls::pki_types::ServerName;

use super::tcp::join_host_port;
use super::{Found, ProbeError, resolve_port};

/// The Kubernetes version in the User-Agent (major.minor).
pub const VERSION: &str = "1.36";
/// How much of a response body is kept.
pub const MAX_BODY: usize = 10 * 1024;
const MAX_REDIRECTS: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("Get \"{url}\": {message}")]
    Request { url: String, message: String },
    #[error("Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)")]
    Timeout { url: String },
    #[error("Get \"{url}\": stopped after 10 redirects")]
    TooManyRedirects { url: String },
}

/// Where and how to send the GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Headers in order, the User-Agent and Accept defaults included.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The request for an httpGet action of `container`; `agent` is `probe` or `lifecycle`.
    pub fn from_action(
        h: &HTTPGetAction,
        container: &Container,
        pod_ip: Option<&str>,
        agent: &str,
    ) -> Result<Request, ProbeError> {
        let port = match &h.port {
            IntOrString::String(s) if s.is_empty() => 80,
            port => resolve_port(port, container)?,
        };
        let host = match h.host.as_deref().filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None => pod_ip.ok_or(ProbeError::NoPodIp)?.to_string(),
        };
        let path = h.path.clone().unwrap_or_default();
        let path = if path.starts_with('/') { path } else { format!("/{path}") };
        let mut headers: Vec<(String, String)> =
            h.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect();
        let has = |headers: &[(String, String)], name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        if !has(&headers, "User-Agent") {
            headers.push(("User-Agent".into(), format!("kube-{agent}/{VERSION}")));
        }
        if !has(&headers, "Accept") {
            headers.push(("Accept".into(), "*/*".into()));
        } else {
            // An empty Accept header means none at all.
            headers.retain(|(n, v)| !(n.eq_ignore_ascii_case("Accept") && v.is_empty()));
        }
        Ok(Request { scheme: h.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(), host, port, path, headers })
    }

    pub fn url(&self) -> String {
        format!("{}://{}{}", self.scheme, join_host_port(&self.host, self.port), self.path)
    }
}

/// What came back.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub location: Option<String>,
    /// At most MAX_BODY bytes of the body.
    pub body: String,
}

/// Sends the GET (following same-host redirects) within `timeout`.
pub async fn get(request: &Request, timeout: Duration) -> Result<Response, HttpError> {
    let url = request.url();
    match tokio::time::timeout(timeout, follow(request)).await {
        Ok(r) => r,
        Err(_) => Err(HttpError::Timeout { url }),
    }
}

async fn follow(first: &Request) -> Result<Response, HttpError> {
    let mut current = first.clone();
    for _ in 0..=MAX_REDIRECTS {
        let response = send(&current).await?;
        let Some(next) = redirect_target(&current, &response) else {
            return Ok(response);
        };
        // Redirects to other hosts are not followed (upstream's followNonLocalRedirects false).
        if next.host != first.host {
            return Ok(response);
        }
        current = next;
    }
    Err(HttpError::TooManyRedirects { url: first.url() })
}

/// Where a redirect response points, as a request with the same headers.
pub fn redirect_target(from: &Request, r: &Response) -> Option<Request> {
    if ![301, 302, 303, 307, 308].contains(&r.status) {
        return None;
    }
    let location = r.location.as_deref()?;
    let mut next = from.clone();
    if let Some((scheme, rest)) = location.split_once("://") {
        let uri: http::Uri = location.parse().ok()?;
        next.scheme = scheme.to_ascii_lowercase();
        next.host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string();
        next.port = uri.port_u16().unwrap_or(if next.scheme == "https" { 443 } else { 80 });
        next.path = rest.find('/').map_or("/".into(), |i| rest[i..].to_string());
    } else if location.starts_with('/') {
        next.path = location.to_string();
    } else {
        let dir = from.path.split('?').next().unwrap_or("/");
        let dir = &dir[..dir.rfind('/').map_or(0, |i| i + 1)];
        next.path = format!("{dir}{location}");
    }
    Some(next)
}

async fn send(r: &Request) -> Result<Response, HttpError> {
    let url = r.url();
    let failed = |message: String| HttpError::Request { url: url.clone(), message };
    let address = join_host_port(&r.host, r.port);
    let tcp = tokio::net::TcpStream::connect(&address).await.map_err(|e| {
        failed(if e.kind() == std::io::ErrorKind::ConnectionRefused {
            format!("dial tcp {address}: connect: connection refused")
        } else {
            format!("dial tcp {address}: {e}")
        })
    })?;
    let mut builder = http::Request::get(&r.path);
    if !r.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("Host")) {
        builder = builder.header(http::header::HOST, &address);
    }
    for (name, value) in &r.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder = builder.header(http::header::CONNECTION, "close");
    let request = builder.body(Empty::<Bytes>::new()).map_err(|e| failed(e.to_string()))?;
    let response = if r.scheme == "https" {
        let name = ServerName::try_from(r.host.clone()).map_err(|e| failed(e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(INSECURE.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| failed(format!("tls: {e}")))?;
        exchange(TokioIo::new(tls), request).await
    } else {
        exchange(TokioIo::new(tcp), request).await
    }
    .map_err(failed)?;
    let status = response.status().as_u16();
    let location = response.headers().get(http::header::LOCATION).and_then(|v| v.to_str().ok()).map(String::from);
    let mut body = response.into_body();
    let mut kept = Vec::new();
    while kept.len() < MAX_BODY {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    kept.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Err(failed(e.to_string())),
            None => break,
        }
    }
    kept.truncate(MAX_BODY);
    Ok(Response { status, location, body: String::from_utf8_lossy(&kept).into_owned() })
}

async fn exchange<T>(
    io: T,
    request: http::Request<Empty<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        // Header names as Go sends them (User-Agent, not user-agent).
        .title_case_headers(true)
        .handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender.send_request(request).await.map_err(|e| e.to_string())
}

/// An httpGet probe's verdict on a response (upstream's DoHTTPProbe).
pub fn judge(r: &Response) -> Found {
    match r.status {
        200..=299 => Found::Success,
        300..=399 => Found::Warning(format!("Probe terminated redirects, Response body: {}", r.body)),
        code => Found::Failure(format!("HTTP probe failed with statuscode: {code}")),
    }
}

pub async fn probe(request: &Request, timeout: Duration) -> Found {
    match get(request, timeout).await {
        Ok(r) => judge(&r),
        Err(e) => Found::Failure(e.to_string()),
    }
}

/// TLS that accepts any certificate (probes do not verify, as upstream).
static INSECURE: LazyLock<Arc<rustls::ClientConfig>> = LazyLock::new(|| {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    Arc::new(config)
});

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn action(json: serde_json::Value) -> HTTPGetAction {
        serde_json::from_value(json).unwrap()
    }

    fn container() -> Container {
        serde_json::from_value(serde_json::json!({"name": "c", "ports": [{"name": "web", "containerPort": 8080}]}))
            .unwrap()
    }

    #[test]
    fn request_from_action() {
        let h = action(serde_json::json!({"path": "healthz?x=1", "port": "web", "scheme": "HTTPS",
            "httpHeaders": [{"name": "X-Probe", "value": "yes"}]}));
        let r = Request::from_action(&h, &container(), Some("10.42.0.7"), "probe").unwrap();
        assert_eq!(r.url(), "https://10.42.0.7:8080/healthz?x=1");
        assert_eq!(
            r.headers,
            vec![
                ("X-Probe".into(), "yes".into()),
                ("User-Agent".into(), "kube-probe/1.36".into()),
                ("Accept".into(), "*/*".into())
            ]
        );
        let h = action(serde_json::json!({"port": 80, "host": "example.test",
            "httpHeaders": [{"name": "user-agent", "value": "mine"}, {"name": "Accept", "value": ""}]}));
        let r = Request::from_action(&h, &container(), None, "lifecycle").unwrap();
        assert_eq!(r.url(), "http://example.test:80/");
        assert_eq!(r.headers, vec![("user-agent".into(), "mine".into())]);
        assert!(matches!(
            Request::from_action(&action(serde_json::json!({"port": 80})), &container(), None, "probe"),
            Err(ProbeError::NoPodIp)
        ));
    }

    #[test]
    fn status_codes_as_upstream() {
        let r = |status| Response { status, location: None, body: "b".into() };
        assert_eq!(judge(&r(200)), Found::Success);
        assert_eq!(judge(&r(399)), Found::Warning("Probe terminated redirects, Response body: b".into()));
        assert_eq!(judge(&r(404)), Found::Failure("HTTP probe failed with statuscode: 404".into()));
        assert_eq!(judge(&r(500)), Found::Failure("HTTP probe failed with statuscode: 500".into()));
    }

    #[test]
    fn redirect_targets() {
        let from = Request {
            scheme: "http".into(),
            host: "10.0.0.1".into(),
            port: 80,
            path: "/a/b?q".into(),
            headers: vec![],
        };
        let r = |location: &str| Response { status: 302, location: Some(location.into()), body: String::new() };
        assert_eq!(redirect_target(&from, &r("/x")).unwrap().path, "/x");
        assert_eq!(redirect_target(&from, &r("c")).unwrap().path, "/a/c");
        let other = redirect_target(&from, &r("https://other.test:8443/y")).unwrap();
        assert_eq!(
            (other.scheme.as_str(), other.host.as_str(), other.port, other.path.as_str()),
            ("https", "other.test", 8443, "/y")
        );
        assert!(
            redirect_target(&from, &Response { status: 200, location: Some("/x".into()), body: String::new() })
                .is_none()
        );
    }

    /// A one-shot HTTP server answering each connection with `reply(request text)`.
    async fn serve(reply: fn(&str) -> String) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = vec![0; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                let _ = s.write_all(reply(&text).as_bytes()).await;
            }
        });
        port
    }

    fn request(port: u16, path: &str) -> Request {
        Request {
            scheme: "http".into(),
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![("User-Agent".into(), "kube-probe/1.36".into())],
        }
    }

    #[tokio::test]
    async fn follows_same_host_redirects_and_sends_headers() {
        let port = serve(|req| {
            if req.starts_with("GET /old ") {
                "HTTP/1.1 301 Moved\r\nLocation: /new\r\nContent-Length: 0\r\n\r\n".into()
            } else if req.starts_with("GET /new ") && req.contains("User-Agent: kube-probe/1.36") {
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".into()
            } else {
                "HTTP/1.1 500 No\r\nContent-Length: 0\r\n\r\n".into()
            }
        })
        .await;
        let r = get(&request(port, "/old"), Duration::from_secs(2)).await.unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        let r = get(&request(port, "/other"), Duration::from_secs(2)).await.unwrap();
        assert_eq!(judge(&r), Found::Failure("HTTP probe failed with statuscode: 500".into()));
    }

    #[tokio::test]
    async fn other_host_redirects_are_warnings_and_loops_fail() {
        let port = serve(|req| {
            if req.starts_with("GET /away ") {
                "HTTP/1.1 302 Found\r\nLocation: http://elsewhere.invalid/\r\nContent-Length: 4\r\n\r\nbody".into()
            } else {
                "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n".into()
            }
        })
        .await;
        let r = probe(&request(port, "/away"), Duration::from_secs(2)).await;
        assert_eq!(r, Found::Warning("Probe terminated redirects, Response body: body".into()));
        match probe(&request(port, "/loop"), Duration::from_secs(2)).await {
            Found::Failure(m) => assert!(m.ends_with("stopped after 10 redirects"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn https_without_verifying_the_self_signed_certificate() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["probe.test".to_string()]).unwrap().self_signed(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(s).await else { continue };
                let mut buf = vec![0; 4096];
                let _ = tls.read(&mut buf).await;
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure").await;
                let _ = tls.shutdown().await;
            }
        });
        let request = Request { scheme: "https".into(), ..request(port, "/") };
        let r = get(&request, Duration::from_secs(2)).await.unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "secure"));
    }
}
