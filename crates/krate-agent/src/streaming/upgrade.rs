//! Upgraded connections: dialing the runtime's streaming server (the URL CRI Exec,
//! Attach and PortForward return, plain HTTP on loopback) with an `Upgrade:` request,
//! and passing a client's upgrade through to it unchanged, as the kubelet's proxy does.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;

use crate::kubelet_api::Body;

const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("invalid streaming URL {0:?}")]
    Url(String),
    #[error("cannot reach the runtime's streaming server: {0}")]
    Dial(String),
    /// The streaming server answered without switching protocols.
    #[error("the runtime's streaming server refused the upgrade ({status}): {}", String::from_utf8_lossy(.body))]
    Refused { status: StatusCode, headers: HeaderMap, body: Bytes },
}

/// Asks the streaming server at `url` (plus `query` when the URL has none) to upgrade
/// with `headers`; its 101 answer and the upgraded connection.
pub async fn dial(
    url: &str,
    method: Method,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(Response<()>, Upgraded), UpgradeError> {
    let uri: http::Uri = url.parse().map_err(|_| UpgradeError::Url(url.into()))?;
    let authority = uri.authority().ok_or_else(|| UpgradeError::Url(url.into()))?.clone();
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
    let port = authority.port_u16().unwrap_or(80);
    let mut target = uri.path().to_string();
    match (uri.query(), query) {
        (Some(q), _) => target = format!("{target}?{q}"),
        (None, Some(q)) if !q.is_empty() => target = format!("{target}?{q}"),
        _ => {}
    }
    let dial = |e: &dyn std::fmt::Display| UpgradeError::Dial(e.to_string());
    let tcp = tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect((host.as_str(), port)))
        .await
        .map_err(|_| dial(&"timed out"))?
        .map_err(|e| dial(&e))?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| dial(&e))?;
    tokio::spawn(async move {
        if let Err(error) = conn.with_upgrades().await {
            tracing::debug!(%error, "streaming server connection ended with an error");
        }
    });
    let mut req = Request::builder().method(method).uri(target);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    req = req.header(header::HOST, authority.as_str());
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| UpgradeError::Url(e.to_string()))?;
    let mut resp = sender.send_request(req).await.map_err(|e| dial(&e))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = tokio::time::timeout(DIAL_TIMEOUT, resp.into_body().collect())
            .await
            .ok()
            .and_then(|r| r.ok())
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Err(UpgradeError::Refused { status, headers, body });
    }
    let upgraded = hyper::upgrade::on(&mut resp).await.map_err(|e| dial(&e))?;
    let (parts, _) = resp.into_parts();
    Ok((Response::from_parts(parts, ()), upgraded))
}

/// Headers of a client's request that go on to the streaming server: not its
/// credentials nor the proxy's own.
fn passed_on(name: &header::HeaderName) -> bool {
    !matches!(name.as_str(), "host" | "authorization" | "content-length" | "transfer-encoding")
        && !name.as_str().starts_with("impersonate-")
        && !name.as_str().starts_with("x-forwarded-")
}

pub fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(http_body_util::Full::new(body.into()).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

/// Passes the client's upgrade request through to `url` and, once switched, the
/// connection both ways (SPDY, or websocket protocols the runtime speaks itself).
/// The client's connection once hyper has handed it over after the 101; None (logged)
/// if the client went away first.
pub async fn upgraded(upgrade: hyper::upgrade::OnUpgrade) -> Option<hyper::upgrade::Upgraded> {
    upgrade.await.inspect_err(|error| tracing::debug!(%error, "client upgrade failed")).ok()
}

pub async fn proxy(mut req: Request<Incoming>, url: &str) -> Response<Body> {
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut headers = HeaderMap::new();
    for (k, v) in req.headers() {
        if passed_on(k) {
            headers.append(k, v.clone());
        }
    }
    let query = req.uri().query().map(String::from);
    match dial(url, req.method().clone(), &headers, query.as_deref()).await {
        Ok((answer, backend)) => {
            tokio::spawn(async move {
                let Some(client) = upgraded(client_upgrade).await else { return };
                let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
                let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
            });
            let mut out = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
            for (k, v) in answer.headers() {
                out = out.header(k, v);
            }
            out.body(http_body_util::Empty::new().map_err(|never| match never {}).boxed()).expect("valid response")
        }
        Err(UpgradeError::Refused { status, headers, body }) => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("text/plain; charset=utf-8")
                .to_string();
            full(status, &content_type, body)
        }
        Err(error) => {
            tracing::warn!(%error, "streaming proxy failed");
            super::status_response(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string())
        }
    }
}
