//! Websocket clients bridged to the runtime's SPDY streaming server:
//!
//! - exec and attach over `v5.channel.k8s.io` (kubectl ≥ 1.30): each binary message
//!   starts with a channel byte (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize, 255
//!   close-a-stream). The runtime's server has no v5 (containerd 1.6 stops at v4, which
//!   cannot close stdin on its own), so the agent opens a SPDY `v4.channel.k8s.io`
//!   connection to it and maps channels to SPDY streams: what upstream's API server
//!   does when it translates a client's websocket for the kubelet.
//! - port-forward over `SPDY/3.1+portforward.k8s.io` (kubectl ≥ 1.31): the client
//!   speaks SPDY inside the websocket's binary messages, so after a SPDY upgrade to the
//!   runtime the bytes are copied both ways as they are (upstream's tunneling handler).

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Message, handshake::derive_accept_key};

use super::spdy::{self, Frame};
use super::upgrade::{self, UpgradeError};
use crate::kubelet_api::Body;

pub const V5_CHANNEL: &str = "v5.channel.k8s.io";
pub const V4_CHANNEL: &str = "v4.channel.k8s.io";
/// Prefix of the websocket subprotocols that carry SPDY (port-forward tunneling).
pub const SPDY_TUNNEL_PREFIX: &str = "SPDY/3.1+";
const PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// The streams an exec or attach asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Whether `req` asks to upgrade to a websocket.
pub fn is_websocket(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::UPGRADE)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case("websocket"))))
}

/// The websocket subprotocols the client offers, in its order.
pub fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn switching(key: &HeaderValue, protocol: &str) -> Response<Body> {
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, derive_accept_key(key.as_bytes()))
        .header(header::SEC_WEBSOCKET_PROTOCOL, protocol)
        .body(http_body_util::Empty::new().map_err(|never| match never {}).boxed())
        .expect("valid response")
}

/// The runtime refused or could not be reached: the client hears it before any upgrade.
fn refused(error: UpgradeError) -> Response<Body> {
    match error {
        UpgradeError::Refused { status, body, .. } => {
            super::status_response(status, String::from_utf8_lossy(&body).trim())
        }
        other => {
            tracing::warn!(error = %other, "streaming server not reachable");
            super::status_response(StatusCode::INTERNAL_SERVER_ERROR, &other.to_string())
        }
    }
}

/// SPDY upgrade headers towards the runtime, offering `protocols`.
fn spdy_headers(protocols: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(spdy::UPGRADE));
    for p in protocols {
        if let Ok(v) = HeaderValue::from_str(p) {
            h.append(PROTOCOL_HEADER, v);
        }
    }
    h
}

/// Waits (bounded) for the client's answer to our close, so the last messages are
/// not cut by a reset.
async fn finish<S>(mut ws: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let close = CloseFrame { code: CloseCode::Normal, reason: "".into() };
    if ws.close(Some(close)).await.is_err() {
        return;
    }
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(2), async { while let Some(Ok(_)) = ws.next().await {} })
            .await;
}

/// exec/attach for a `v5.channel.k8s.io` websocket client, through SPDY v4 to `url`.
pub async fn remote_command_v5(mut req: Request<Incoming>, url: &str, streams: Streams) -> Response<Body> {
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return super::status_response(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    let client_upgrade = hyper::upgrade::on(&mut req);
    let (answer, conn) = match upgrade::dial(url, Method::POST, &spdy_headers(&[V4_CHANNEL]), None).await {
        Ok(c) => c,
        Err(e) => return refused(e),
    };
    let negotiated = answer.headers().get(PROTOCOL_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if negotiated != V4_CHANNEL {
        let message = format!("the runtime's streaming server chose protocol {negotiated:?}, not {V4_CHANNEL}");
        return super::status_response(StatusCode::INTERNAL_SERVER_ERROR, &message);
    }
    let (mut rd, mut wr) = tokio::io::split(TokioIo::new(conn));

    // Streams in the order upstream's client opens them; odd ids from 1.
    let mut headers = spdy::HeaderWriter::default();
    let mut next = 1u32;
    let mut open = |kind: &str, wire: &mut Vec<u8>| {
        let id = next;
        next += 2;
        wire.extend(spdy::syn_stream(&mut headers, id, &[("streamtype", kind)], false));
        id
    };
    let mut wire = Vec::new();
    let error_id = open("error", &mut wire);
    let stdin_id = streams.stdin.then(|| open("stdin", &mut wire));
    let stdout_id = streams.stdout.then(|| open("stdout", &mut wire));
    let stderr_id = (streams.stderr && !streams.tty).then(|| open("stderr", &mut wire));
    let resize_id = streams.tty.then(|| open("resize", &mut wire));
    let last_id = next - 2;
    if let Err(e) = wr.write_all(&wire).await {
        return super::status_response(StatusCode::INTERNAL_SERVER_ERROR, &format!("opening streams: {e}"));
    }

    tokio::spawn(async move {
        let Some(client) = super::upgrade::upgraded(client_upgrade).await else { return };
        let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
        let (frames_tx, mut frames) = mpsc::channel::<Frame>(64);
        let reader = tokio::spawn(async move {
            while let Ok(Some(frame)) = spdy::read_frame(&mut rd).await {
                if frames_tx.send(frame).await.is_err() {
                    break;
                }
            }
        });
        let channel_of = |id: u32| match Some(id) {
            i if i == stdout_id => Some(1u8),
            i if i == stderr_id => Some(2u8),
            i if i == Some(error_id) => Some(3u8),
            _ => None,
        };
        let mut stdin_open = stdin_id.is_some();
        let runtime_ended = loop {
            tokio::select! {
                msg = ws.next() => {
                    let data = match msg {
                        Some(Ok(Message::Binary(data))) => data,
                        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break false,
                        Some(Ok(_)) => continue,
                    };
                    let out = match (data.first(), stdin_id, resize_id) {
                        (Some(0), Some(id), _) if stdin_open => spdy::data(id, &data[1..], false),
                        (Some(4), _, Some(id)) => spdy::data(id, &data[1..], false),
                        // v5's close signal: [255, channel]; only stdin can be closed.
                        (Some(255), Some(id), _) if data.get(1) == Some(&0) && stdin_open => {
                            stdin_open = false;
                            spdy::data(id, &[], true)
                        }
                        _ => continue,
                    };
                    if wr.write_all(&out).await.is_err() {
                        break true;
                    }
                }
                frame = frames.recv() => match frame {
                    Some(Frame::Data { stream, data, .. }) => {
                        let Some(channel) = channel_of(stream) else { continue };
                        if data.is_empty() {
                            continue;
                        }
                        let mut message = Vec::with_capacity(data.len() + 1);
                        message.push(channel);
                        message.extend_from_slice(&data);
                        if ws.send(Message::Binary(Bytes::from(message))).await.is_err() {
                            break false;
                        }
                    }
                    Some(Frame::Ping(id)) => {
                        let _ = wr.write_all(&spdy::ping(id)).await;
                    }
                    Some(_) => {}
                    None => break true,
                },
            }
        };
        reader.abort();
        let _ = wr.write_all(&spdy::goaway(last_id)).await;
        let _ = wr.shutdown().await;
        if runtime_ended {
            finish(ws).await;
        }
    });
    switching(&key, V5_CHANNEL)
}

/// port-forward for a websocket client tunneling SPDY (`SPDY/3.1+<protocol>`).
pub async fn spdy_tunnel(mut req: Request<Incoming>, url: &str, offered: &[String]) -> Response<Body> {
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return super::status_response(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    let inner: Vec<&str> = offered.iter().filter_map(|p| p.strip_prefix(SPDY_TUNNEL_PREFIX)).collect();
    let client_upgrade = hyper::upgrade::on(&mut req);
    let (answer, conn) = match upgrade::dial(url, Method::POST, &spdy_headers(&inner), None).await {
        Ok(c) => c,
        Err(e) => return refused(e),
    };
    let negotiated = answer.headers().get(PROTOCOL_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let Some(inner) = inner.iter().find(|p| **p == negotiated) else {
        let message = format!("the runtime's streaming server chose protocol {negotiated:?}, not one of {inner:?}");
        return super::status_response(StatusCode::INTERNAL_SERVER_ERROR, &message);
    };
    let protocol = format!("{SPDY_TUNNEL_PREFIX}{inner}");
    tokio::spawn(async move {
        let Some(client) = super::upgrade::upgraded(client_upgrade).await else { return };
        let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
        let (mut rd, mut wr) = tokio::io::split(TokioIo::new(conn));
        let (bytes_tx, mut bytes) = mpsc::channel::<Bytes>(16);
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            while let Ok(n) = rd.read(&mut buf).await {
                if n == 0 || bytes_tx.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                    break;
                }
            }
        });
        let runtime_ended = loop {
            tokio::select! {
                msg = ws.next() => match msg {
                    Some(Ok(Message::Binary(data))) => {
                        if wr.write_all(&data).await.is_err() {
                            break true;
                        }
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break false,
                    Some(Ok(_)) => {}
                },
                chunk = bytes.recv() => match chunk {
                    Some(data) => {
                        if ws.send(Message::Binary(data)).await.is_err() {
                            break false;
                        }
                    }
                    None => break true,
                },
            }
        };
        reader.abort();
        let _ = wr.shutdown().await;
        if runtime_ended {
            finish(ws).await;
        }
    });
    switching(&key, &protocol)
}
