//! HTTPS serving: rustls (client certificates optional; any is taken in the handshake
//! and verified against the cluster CA by the x509 authenticator, see `client_auth`),
//! HTTP/1.1 and HTTP/2, each request handed to the [`ApiServer`] with the certificate
//! chain its client presented.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::pki::Pki;
use crate::server::{ApiServer, Caller};

/// Concurrent HTTP/2 streams (requests, watches) per connection.
pub const HTTP2_MAX_STREAMS: u32 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

fn tls_config(pki: &Pki) -> Result<rustls::ServerConfig, ServeError> {
    let tls = |e: &dyn std::fmt::Display| ServeError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca.cert_pem.as_bytes()) {
        roots.add(cert.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    let verifier = Arc::new(crate::client_auth::AnyClientCert::new(provider.clone(), &roots));
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pki.serving.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| tls(&e))?;
    let key = PrivateKeyDer::from_pem_slice(pki.serving.key_pem.as_bytes()).map_err(|e| tls(&e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A bound listener; `run` serves until the task is dropped.
pub struct Listener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    server: Arc<ApiServer>,
}

impl Listener {
    pub async fn bind(addr: SocketAddr, pki: &Pki, server: Arc<ApiServer>) -> Result<Listener, ServeError> {
        let acceptor = TlsAcceptor::from(Arc::new(tls_config(pki)?));
        let listener = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })?;
        Ok(Listener { listener, acceptor, server })
    }

    /// Serves on an already bound socket.
    pub fn from_std(
        listener: std::net::TcpListener,
        pki: &Pki,
        server: Arc<ApiServer>,
    ) -> Result<Listener, ServeError> {
        let acceptor = TlsAcceptor::from(Arc::new(tls_config(pki)?));
        let addr = listener.local_addr().map_err(|e| ServeError::Tls(e.to_string()))?;
        let bind_err = |source| ServeError::Bind { addr, source };
        listener.set_nonblocking(true).map_err(bind_err)?;
        let listener = TcpListener::from_std(listener).map_err(bind_err)?;
        Ok(Listener { listener, acceptor, server })
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
            let _ = tcp.set_nodelay(true);
            let (acceptor, server) = (self.acceptor.clone(), self.server.clone());
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                };
                let certs = tls.get_ref().1.peer_certificates().unwrap_or_default();
                let caller =
                    Caller::Remote { client_certs: Arc::new(certs.iter().map(|c| c.to_vec()).collect()), peer };
                let service = service_fn(move |req| {
                    let (server, caller) = (server.clone(), caller.clone());
                    async move { Ok::<_, std::convert::Infallible>(server.handle(req, caller).await) }
                });
                let mut builder = auto::Builder::new(TokioExecutor::new());
                // Upstream's --http2-max-streams-per-connection: many watches share a connection.
                builder.http2().max_concurrent_streams(HTTP2_MAX_STREAMS);
                // Upgrades (exec, attach, port-forward through the node proxy) need the raw connection.
                if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), service).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
    }
}
