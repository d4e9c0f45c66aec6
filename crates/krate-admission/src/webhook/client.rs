//! POSTing an AdmissionReview to a webhook over HTTPS: TLS trusting the webhook's
//! caBundle (the system roots without one), the server name checked against the URL's
//! host or, for a Service, `NAME.NAMESPACE.svc` (as upstream's client does), and the
//! whole exchange bounded by the webhook's timeout. Errors read as Go's HTTP client
//! words them (`Post "URL": ...`), since upstream's messages embed them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Largest webhook answer read (upstream's webhook clients share the request limit).
const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// Where one call goes.
#[derive(Clone, Debug)]
pub struct Destination {
    /// Host name or IP address to connect to, and its port.
    pub host: String,
    pub port: u16,
    /// The name the server's certificate must carry.
    pub server_name: String,
    /// Path (and no query: webhook URLs may not have one).
    pub path: String,
    /// The URL as upstream prints it in errors (the configured URL, or the Service's
    /// `https://NAME.NAMESPACE.svc:PORT/PATH`).
    pub display: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("Post \"{url}\": {reason}")]
    Transport { url: String, reason: String },
    /// The webhook answered with a non-2xx status.
    #[error("{message}")]
    Status { code: u16, message: String },
    #[error("{0}")]
    Config(String),
}

/// TLS client configurations, one per caBundle, built once.
#[derive(Default)]
pub struct Caller {
    configs: Mutex<HashMap<Vec<u8>, Arc<rustls::ClientConfig>>>,
}

/// A TLS client configuration trusting `ca_bundle` (PEM), or the system's roots when it
/// is empty (upstream's client does the same).
fn build_tls(ca_bundle: &[u8]) -> Result<Arc<rustls::ClientConfig>, CallError> {
    let bad = |e: &dyn std::fmt::Display| CallError::Config(format!("unable to load root certificates: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    if ca_bundle.is_empty() {
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    } else {
        for cert in CertificateDer::pem_slice_iter(ca_bundle) {
            roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
        }
        if roots.is_empty() {
            return Err(bad(&"no certificates found"));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

impl Caller {
    async fn tls(&self, ca_bundle: &[u8]) -> Result<Arc<rustls::ClientConfig>, CallError> {
        if let Some(c) = self.configs.lock().get(ca_bundle) {
            return Ok(c.clone());
        }
        let config = if ca_bundle.is_empty() {
            // The system roots are files: read them off the runtime's threads.
            tokio::task::spawn_blocking(|| build_tls(&[])).await.map_err(|e| CallError::Config(e.to_string()))??
        } else {
            build_tls(ca_bundle)?
        };
        let mut configs = self.configs.lock();
        // Bounded: configurations come and go; a dropped entry costs one rebuild.
        if configs.len() > 256 {
            configs.clear();
        }
        configs.insert(ca_bundle.to_vec(), config.clone());
        Ok(config)
    }

    /// POSTs `body` and returns the answer's body, within `timeout`.
    pub async fn post(
        &self,
        dest: &Destination,
        ca_bundle: &[u8],
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        // Upstream tells the webhook how long it has, in whole seconds.
        let query = format!("timeout={}s", timeout.as_secs_f64().ceil() as u64);
        let url = format!("{}?{query}", dest.display);
        let path = format!("{}?{query}", if dest.path.is_empty() { "/" } else { &dest.path });
        let tls = self.tls(ca_bundle).await?;
        let transport = |reason: String| CallError::Transport { url: url.clone(), reason };
        let exchange = async {
            let addr = format!("{}:{}", bracket(&dest.host), dest.port);
            let tcp = tokio::net::TcpStream::connect((dest.host.as_str(), dest.port))
                .await
                .map_err(|e| transport(format!("dial tcp {addr}: connect: {}", go_io_error(&e))))?;
            let name = ServerName::try_from(dest.server_name.clone())
                .map_err(|e| transport(format!("invalid server name {:?}: {e}", dest.server_name)))?;
            let stream = tokio_rustls::TlsConnector::from(tls)
                .connect(name, tcp)
                .await
                .map_err(|e| transport(format!("tls: failed to verify certificate: {e}")))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| transport(e.to_string()))?;
            tokio::spawn(conn);
            let authority = if dest.port == 443 {
                dest.server_name.clone()
            } else {
                format!("{}:{}", bracket(&dest.server_name), dest.port)
            };
            let req = http::Request::post(path.as_str())
                .header(http::header::HOST, authority)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::ACCEPT, "application/json, */*")
                .header(http::header::USER_AGENT, "krate-apiserver/admission-webhook")
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| transport(e.to_string()))?;
            let resp = sender.send_request(req).await.map_err(|e| transport(e.to_string()))?;
            let code = resp.status().as_u16();
            let bytes = Limited::new(resp.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| transport(e.to_string()))?
                .to_bytes();
            if !(200..300).contains(&code) {
                return Err(status_error(code, &bytes));
            }
            Ok(bytes.to_vec())
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(transport("context deadline exceeded".into())),
        }
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') { format!("[{host}]") } else { host.to_string() }
}

/// The words Go's net package uses for the common connection failures.
fn go_io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset by peer".into(),
        _ => e.to_string(),
    }
}

/// A non-2xx answer: its metav1.Status message when it sent one, else client-go's words.
fn status_error(code: u16, body: &[u8]) -> CallError {
    let status: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let message = status
        .as_ref()
        .filter(|s| s.get("kind").and_then(|k| k.as_str()) == Some("Status"))
        .and_then(|s| s.get("message").and_then(|m| m.as_str()))
        .filter(|m| !m.is_empty())
        .map(String::from)
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                format!("the server responded with the status code {code} but did not return more information")
            } else {
                format!("an error on the server ({text:?}) has prevented the request from succeeding")
            }
        });
    CallError::Status { code, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_reads_like_gos_client() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dest = Destination {
            host: "127.0.0.1".into(),
            port,
            server_name: "127.0.0.1".into(),
            path: "/v".into(),
            display: format!("https://127.0.0.1:{port}/v"),
        };
        let err = Caller::default().post(&dest, b"", b"{}".to_vec(), Duration::from_secs(3)).await;
        let msg = err.unwrap_err().to_string();
        assert_eq!(
            msg,
            format!(
                "Post \"https://127.0.0.1:{port}/v?timeout=3s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            )
        );
    }

    #[test]
    fn a_bundle_without_certificates_is_a_configuration_error() {
        let err = build_tls(b"not a pem").unwrap_err();
        assert!(err.to_string().contains("unable to load root certificates"), "{err}");
    }

    #[test]
    fn status_answers_keep_their_message() {
        let e = status_error(503, br#"{"kind":"Status","message":"busy"}"#);
        assert!(matches!(e, CallError::Status { code: 503, ref message } if message == "busy"));
        let e = status_error(500, b"");
        assert!(e.to_string().contains("status code 500"));
    }
}
