//! The agent's HTTPS API (the kubelet's port 10250): TLS with the node's serving
//! certificate, callers authenticated and authorized as upstream's kubelet does
//! (`auth`), then /healthz, /pods (the pods bound to this node) and /metrics
//! (Prometheus). Other paths go to the `Routes` seam: the runtime's /containerLogs,
//! /exec, /attach and /portForward (`crate::streaming`); anything else is 404.

pub mod auth;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::bootstrap::CertKey;
use crate::metrics;
use auth::{Auth, Decision};

pub type Body = BoxBody<Bytes, std::io::Error>;
pub type RouteFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// More endpoints, served after authentication and authorization: the seam where the
/// container runtime adds /containerLogs, /exec, /attach, /portForward and /stats.
pub trait Routes: Send + Sync {
    /// Whether `path` is one of these endpoints.
    fn handles(&self, path: &str) -> bool;
    fn route(&self, req: Request<Incoming>, user: &auth::User) -> RouteFuture;
}

/// The pods /pods lists (the seam for the runtime's pod manager; by default the pods
/// the API server has bound to this node).
pub trait PodSource: Send + Sync {
    fn pods(&self) -> Pin<Box<dyn Future<Output = Result<Vec<Pod>, String>> + Send + '_>>;
}

/// The pods bound to `node`, read from the API server.
pub struct BoundPods {
    pub client: kube::Client,
    pub node: String,
}

impl PodSource for BoundPods {
    fn pods(&self) -> Pin<Box<dyn Future<Output = Result<Vec<Pod>, String>> + Send + '_>> {
        Box::pin(async move {
            let pods: Api<Pod> = Api::all(self.client.clone());
            let lp = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
            pods.list(&lp).await.map(|l| l.items).map_err(|e| e.to_string())
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

struct State {
    auth: Auth,
    pods: Arc<dyn PodSource>,
    routes: parking_lot::RwLock<Option<Arc<dyn Routes>>>,
}

/// A bound listener; `run` serves until dropped.
pub struct KubeletApi {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
}

fn tls_config(serving: &CertKey, ca_pem: &str) -> Result<rustls::ServerConfig, ApiError> {
    let tls = |e: &dyn std::fmt::Display| ApiError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    // Certificates are checked against the cluster CA; callers without one may still
    // come with a bearer token.
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| tls(&e))?;
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes()).collect::<Result<_, _>>().map_err(|e| tls(&e))?;
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).map_err(|e| tls(&e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

impl KubeletApi {
    /// Serves on `listener` (bound early so the Node can report its port).
    pub fn new(
        listener: std::net::TcpListener,
        serving: &CertKey,
        ca_pem: &str,
        client: kube::Client,
        node: &str,
        pods: Arc<dyn PodSource>,
    ) -> Result<KubeletApi, ApiError> {
        let addr = listener.local_addr().map_err(|e| ApiError::Tls(e.to_string()))?;
        let bind = |source| ApiError::Bind { addr, source };
        listener.set_nonblocking(true).map_err(bind)?;
        let listener = TcpListener::from_std(listener).map_err(bind)?;
        let acceptor = TlsAcceptor::from(Arc::new(tls_config(serving, ca_pem)?));
        let state = Arc::new(State { auth: Auth::new(client, node), pods, routes: Default::default() });
        Ok(KubeletApi { listener, acceptor, state })
    }

    /// Adds the runtime's endpoints.
    pub fn set_routes(&self, routes: Arc<dyn Routes>) {
        *self.state.routes.write() = Some(routes);
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound socket has an address")
    }

    pub async fn run(self) {
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (acceptor, state) = (self.acceptor.clone(), self.state.clone());
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                };
                let leaf: Option<Arc<Vec<u8>>> =
                    tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| Arc::new(c.to_vec()));
                let service = service_fn(move |req| {
                    let (state, leaf) = (state.clone(), leaf.clone());
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            serve(&state, req, leaf.as_deref().map(|v| v.as_slice())).await,
                        )
                    }
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), service).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>, content_type: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

/// The path group a request is counted under (no names, to keep label values few).
fn path_label(path: &str) -> &'static str {
    for p in [
        "/healthz",
        "/pods",
        "/metrics",
        "/stats",
        "/containerLogs",
        "/exec",
        "/attach",
        "/portForward",
        "/run",
        "/logs",
        "/configz",
        "/checkpoint",
    ] {
        if path == p || path.starts_with(&format!("{p}/")) {
            return p;
        }
    }
    "other"
}

async fn serve(state: &State, req: Request<Incoming>, leaf: Option<&[u8]>) -> Response<Body> {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let response = route(state, req, leaf).await;
    metrics::API_REQUESTS.with_label_values(&[method.as_str(), path_label(&path), response.status().as_str()]).inc();
    response
}

async fn route(state: &State, req: Request<Incoming>, leaf: Option<&[u8]>) -> Response<Body> {
    let Some(user) = state.auth.authenticate(leaf, req.headers()).await else {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized", "text/plain; charset=utf-8");
    };
    let path = req.uri().path().to_string();
    if let Decision::Deny(message) = state.auth.authorize(&user, req.method(), &path).await {
        tracing::debug!(user = %user.name, %path, "forbidden");
        return text(StatusCode::FORBIDDEN, message, "text/plain; charset=utf-8");
    }
    let get = matches!(*req.method(), http::Method::GET | http::Method::HEAD);
    match path.as_str() {
        "/healthz" if get => text(StatusCode::OK, "ok", "text/plain; charset=utf-8"),
        "/pods" | "/pods/" if get => match state.pods.pods().await {
            Ok(items) => {
                let list = serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
                text(StatusCode::OK, list.to_string(), "application/json")
            }
            Err(e) => {
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("listing pods: {e}"), "text/plain; charset=utf-8")
            }
        },
        "/metrics" if get => text(StatusCode::OK, metrics::render(), "text/plain; version=0.0.4; charset=utf-8"),
        _ => {
            let routes = state.routes.read().clone();
            if let Some(r) = routes.filter(|r| r.handles(&path)) {
                return r.route(req, &user).await;
            }
            text(StatusCode::NOT_FOUND, "404 page not found\n", "text/plain; charset=utf-8")
        }
    }
}
