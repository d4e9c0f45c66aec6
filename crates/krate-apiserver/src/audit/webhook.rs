//! The webhook backend: events are batched into audit.k8s.io/v1 EventLists and POSTed
//! to the server a kubeconfig names (`--audit-webhook-config-file`). Batches leave when
//! full or when the oldest event has waited long enough; a failed POST (connection
//! error, 429, 5xx) is retried with exponential backoff; events beyond the buffer are
//! dropped and counted, as upstream's batch mode.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_yaml_ng::Value as Yaml;
use tokio::sync::mpsc;

use super::metrics;

pub const PLUGIN: &str = "webhook";

#[derive(Clone, Debug)]
pub struct WebhookOptions {
    pub config_file: std::path::PathBuf,
    /// Upstream's --audit-webhook-batch-buffer-size, -batch-max-size, -batch-max-wait,
    /// --audit-webhook-initial-backoff.
    pub buffer_size: usize,
    pub batch_max_size: usize,
    pub batch_max_wait: Duration,
    pub initial_backoff: Duration,
}

impl WebhookOptions {
    pub fn new(config_file: std::path::PathBuf) -> Self {
        WebhookOptions {
            config_file,
            buffer_size: 10_000,
            batch_max_size: 400,
            batch_max_wait: Duration::from_secs(30),
            initial_backoff: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("audit webhook config {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("audit webhook: {0}")]
    Send(String),
    #[error("audit webhook answered {0}")]
    Status(u16),
}

/// Where batches go, from the kubeconfig.
struct Target {
    uri: http::Uri,
    host: String,
    port: u16,
    tls: Option<tokio_rustls::TlsConnector>,
    token: Option<String>,
}

pub struct WebhookBackend {
    tx: mpsc::Sender<Bytes>,
}

impl WebhookBackend {
    /// Reads the kubeconfig and starts the sending task (on the current runtime).
    pub fn start(opts: WebhookOptions) -> Result<WebhookBackend, WebhookError> {
        let target = Arc::new(load_target(&opts.config_file)?);
        let (tx, rx) = mpsc::channel(opts.buffer_size.max(1));
        tokio::spawn(send_loop(rx, target, opts));
        Ok(WebhookBackend { tx })
    }

    pub fn process(&self, event: Bytes) {
        if self.tx.try_send(event).is_err() {
            metrics::ERRORS.with_label_values(&[PLUGIN]).inc();
            tracing::warn!("the audit webhook buffer is full: an audit event was dropped");
        }
    }
}

async fn send_loop(mut rx: mpsc::Receiver<Bytes>, target: Arc<Target>, opts: WebhookOptions) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + opts.batch_max_wait;
        while batch.len() < opts.batch_max_size {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(ev)) => batch.push(ev),
                Ok(None) | Err(_) => break,
            }
        }
        let body = event_list(&batch);
        let mut delay = opts.initial_backoff;
        // Upstream's backoff: 5 steps, each 1.5 times the last.
        for attempt in 1..=5 {
            match post(&target, body.clone()).await {
                Ok(()) => break,
                Err(e) if attempt < 5 && retriable(&e) => {
                    tracing::debug!(error = %e, attempt, "audit webhook failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = delay.mul_f64(1.5);
                }
                Err(e) => {
                    metrics::ERRORS.with_label_values(&[PLUGIN]).inc_by(batch.len() as u64);
                    tracing::error!(error = %e, events = batch.len(), "sending audit events to the webhook failed");
                    break;
                }
            }
        }
    }
}

fn retriable(e: &WebhookError) -> bool {
    match e {
        WebhookError::Status(code) => *code == 429 || *code >= 500,
        _ => true,
    }
}

fn event_list(events: &[Bytes]) -> Bytes {
    let mut out = BytesMut::from(&br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#[..]);
    for (i, ev) in events.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        out.extend_from_slice(ev);
    }
    out.extend_from_slice(b"]}");
    out.freeze()
}

async fn post(target: &Target, body: Bytes) -> Result<(), WebhookError> {
    let send = |e: &dyn std::fmt::Display| WebhookError::Send(e.to_string());
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await.map_err(|e| send(&e))?;
    let path = target.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = http::Request::post(path)
        .header(http::header::HOST, target.host.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, "krate-apiserver/audit-webhook");
    if let Some(t) = &target.token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.body(Full::new(body)).map_err(|e| send(&e))?;
    let status = match &target.tls {
        Some(tls) => {
            let name = ServerName::try_from(target.host.clone()).map_err(|e| send(&e))?;
            let stream = tls.connect(name, tcp).await.map_err(|e| send(&e))?;
            exchange(TokioIo::new(stream), req).await?
        }
        None => exchange(TokioIo::new(tcp), req).await?,
    };
    if (200..300).contains(&status) { Ok(()) } else { Err(WebhookError::Status(status)) }
}

async fn exchange<T>(io: T, req: http::Request<Full<Bytes>>) -> Result<u16, WebhookError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let send = |e: &dyn std::fmt::Display| WebhookError::Send(e.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|e| send(&e))?;
    tokio::spawn(conn);
    let resp = tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
        .await
        .map_err(|_| WebhookError::Send("timed out".into()))?
        .map_err(|e| send(&e))?;
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    Ok(status)
}

/// The first cluster and user of a kubeconfig (upstream reads the current context's;
/// webhook kubeconfigs name one of each).
fn load_target(path: &std::path::Path) -> Result<Target, WebhookError> {
    let err = |reason: String| WebhookError::Config { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let doc: Yaml = serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string()))?;
    let cluster = doc.get("clusters").and_then(|c| c.get(0)).and_then(|c| c.get("cluster"));
    let user = doc.get("users").and_then(|u| u.get(0)).and_then(|u| u.get("user"));
    let server =
        cluster.and_then(|c| c.get("server")).and_then(Yaml::as_str).ok_or_else(|| err("no cluster server".into()))?;
    let uri: http::Uri = server.parse().map_err(|e: http::uri::InvalidUri| err(e.to_string()))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(err(format!("{server}: the server must be an http or https URL"))),
    };
    let host = uri.host().ok_or_else(|| err(format!("{server}: no host")))?.trim_matches(['[', ']']).to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let base = path.parent().unwrap_or(std::path::Path::new("."));
    // A field given inline (`X-data`, base64) or as a file path (`X`).
    let material = |node: Option<&Yaml>, key: &str| -> Result<Option<Vec<u8>>, WebhookError> {
        let Some(node) = node else { return Ok(None) };
        if let Some(data) = node.get(format!("{key}-data")).and_then(Yaml::as_str) {
            return base64::engine::general_purpose::STANDARD.decode(data).map(Some).map_err(|e| err(e.to_string()));
        }
        match node.get(key).and_then(Yaml::as_str) {
            Some(file) => std::fs::read(base.join(file)).map(Some).map_err(|e| err(format!("{file}: {e}"))),
            None => Ok(None),
        }
    };
    let token = user.and_then(|u| u.get("token")).and_then(Yaml::as_str).map(String::from);
    let tls = if https {
        let ca = material(cluster, "certificate-authority")?
            .ok_or_else(|| err("an https webhook needs certificate-authority(-data)".into()))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            roots.add(cert.map_err(|e| err(e.to_string()))?).map_err(|e| err(e.to_string()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| err(e.to_string()))?
            .with_root_certificates(roots);
        let config = match (material(user, "client-certificate")?, material(user, "client-key")?) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_slice_iter(&cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| err(e.to_string()))?;
                let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| err(e.to_string()))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| err(e.to_string()))?
            }
            _ => builder.with_no_client_auth(),
        };
        Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
    } else {
        None
    };
    Ok(Target { uri, host, port, tls, token })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_event_lists() {
        let list = event_list(&[Bytes::from_static(br#"{"a":1}"#), Bytes::from_static(br#"{"b":2}"#)]);
        let v: serde_json::Value = serde_json::from_slice(&list).unwrap();
        assert_eq!(v["kind"], "EventList");
        assert_eq!(v["items"].as_array().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_full_buffer_drops_and_counts() {
        // Nothing listens on the port: the first batch is stuck in its retries.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("hook.yaml");
        std::fs::write(&p, format!("clusters:\n- cluster:\n    server: http://127.0.0.1:{port}/\n")).unwrap();
        let opts = WebhookOptions {
            buffer_size: 2,
            batch_max_size: 1,
            batch_max_wait: Duration::from_millis(1),
            initial_backoff: Duration::from_secs(60),
            ..WebhookOptions::new(p)
        };
        let errors = || metrics::ERRORS.with_label_values(&[PLUGIN]).get();
        let before = errors();
        let backend = WebhookBackend::start(opts).unwrap();
        backend.process(Bytes::from_static(b"{}"));
        // Let the sender take the first event and start failing.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for _ in 0..10 {
            backend.process(Bytes::from_static(b"{}"));
        }
        assert_eq!(errors() - before, 8, "two fit in the buffer, the rest are dropped");
    }

    #[test]
    fn kubeconfig_names_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("hook.yaml");
        std::fs::write(&p, "apiVersion: v1\nkind: Config\nclusters:\n- name: hook\n  cluster:\n    server: http://127.0.0.1:9999/audit\nusers:\n- name: api\n  user:\n    token: abc\n").unwrap();
        let t = load_target(&p).unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.token.as_deref(), t.tls.is_none()),
            ("127.0.0.1", 9999, Some("abc"), true)
        );
        std::fs::write(&p, "clusters:\n- cluster:\n    server: https://h:1\n").unwrap();
        assert!(matches!(load_target(&p), Err(WebhookError::Config { .. })));
    }
}
