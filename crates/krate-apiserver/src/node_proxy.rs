//! Connect subresources that go to a node's kubelet: nodes/proxy, and pods/log, exec,
//! attach and portforward. The API server opens TLS to the node's kubelet endpoint (the
//! Node's address and status.daemonEndpoints.kubeletEndpoint.Port), trusting the
//! cluster CA (kubelet serving certificates are signed by it) and presenting its kubelet
//! client certificate, then passes the request through — and, for `Upgrade:` requests
//! (websocket, SPDY), the raw connection both ways after the 101, as upstream's
//! UpgradeAwareHandler does.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;

use krate_api::registry::Scope;
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};
use krate_auth::authz::{self, Authorizer, Decision};

use crate::body::Body;
use crate::pki::Pki;
use crate::request::RequestInfo;

/// Pod subresources served by the node's kubelet.
const POD_SUBRESOURCES: &[&str] = &["log", "exec", "attach", "portforward"];
/// Which Node address the API server dials, in order (k3s's and kubeadm's common choice
/// of upstream's --kubelet-preferred-address-types).
const ADDRESS_TYPES: &[&str] = &["InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS"];
const DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether the request is one this module serves.
pub fn is_connect(info: &RequestInfo) -> bool {
    info.is_resource
        && info.group.is_empty()
        && info.version == "v1"
        && match (info.resource.as_str(), info.subresource.as_deref()) {
            ("nodes", Some("proxy")) => true,
            ("pods", Some(sub)) => POD_SUBRESOURCES.contains(&sub),
            _ => false,
        }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("kubelet client TLS configuration: {0}")]
    Tls(String),
}

pub struct NodeProxy {
    registry: Arc<Registry>,
    tls: tokio_rustls::TlsConnector,
}

impl NodeProxy {
    pub fn new(registry: Arc<Registry>, pki: &Pki) -> Result<NodeProxy, ProxyError> {
        let tls = |e: &dyn std::fmt::Display| ProxyError::Tls(e.to_string());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pki.ca.cert_pem.as_bytes()) {
            roots.add(cert.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pki.kubelet_client.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| tls(&e))?;
        let key = PrivateKeyDer::from_pem_slice(pki.kubelet_client.key_pem.as_bytes()).map_err(|e| tls(&e))?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls(&e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| tls(&e))?;
        // HTTP/1.1 only: upgrades (exec, port-forward) need it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(NodeProxy { registry, tls: tokio_rustls::TlsConnector::from(Arc::new(config)) })
    }

    /// Upstream's AuthorizePodWebsocketUpgradeCreatePermission: a websocket GET of
    /// exec, attach or portforward also needs `create`, which a POST (SPDY) needs.
    pub async fn authorize_upgrade(
        info: &RequestInfo,
        user: &UserInfo,
        authorizer: &dyn Authorizer,
    ) -> Result<(), ApiError> {
        let sub = info.subresource.as_deref().unwrap_or("");
        if info.resource != "pods" || info.verb != "get" || !matches!(sub, "exec" | "attach" | "portforward") {
            return Ok(());
        }
        let mut attrs = info.attributes(user);
        attrs.verb = "create";
        match authorizer.authorize(&attrs).await {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) | Decision::NoOpinion(reason) => {
                Err(ApiError::forbidden(authz::forbidden_message(&attrs, &reason)))
            }
        }
    }

    /// Serves a connect request: finds the kubelet and passes the request to it.
    pub async fn serve<B>(
        &self,
        parts: http::request::Parts,
        body: B,
        info: &RequestInfo,
        query: &HashMap<String, String>,
    ) -> Result<Response<Body>, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let name = info.name.as_deref().unwrap_or_default();
        let (node, path) = match info.resource.as_str() {
            "nodes" => (name.to_string(), node_proxy_path(&info.path, name)),
            _ => {
                let namespace = info.namespace.as_deref().unwrap_or_default();
                let pod = self.get("pods", Some(namespace), name).await?;
                let sub = info.subresource.as_deref().unwrap_or_default();
                if sub == "log" && pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
                    // Upstream's LogLocation: a pod not yet on a node has an empty log.
                    container_of(&pod, name, query.get("container").map(String::as_str))?;
                    return Response::builder()
                        .header(header::CONTENT_TYPE, "text/plain")
                        .body(crate::body::full(Bytes::new()))
                        .map_err(|e| ApiError::internal(e.to_string()));
                }
                pod_target(&pod, sub, namespace, name, query)?
            }
        };
        let sub = info.subresource.as_deref().unwrap_or_default();
        if info.resource == "pods" && sub == "log" {
            validate_log_options(name, query)?;
        }
        let (host, port) = kubelet_endpoint(&self.get("nodes", None, &node).await?)?;
        let target_query = match info.resource.as_str() {
            "pods" => kubelet_query(sub, parts.uri.query()),
            _ => parts.uri.query().map(String::from),
        };
        let uri = match target_query {
            Some(q) if !q.is_empty() => format!("{path}?{q}"),
            _ => path,
        };
        let response = self.forward(parts, body, &host, port, &uri).await?;
        if info.resource == "pods" && sub == "log" && !response.status().is_success() {
            return Err(log_error(response).await);
        }
        Ok(response)
    }

    async fn get(&self, plural: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let resource = self.registry.table.lookup("", "v1", plural).expect("built-in resource");
        self.registry.get(&Scope { resource, namespace: namespace.map(String::from) }, name).await
    }

    async fn forward<B>(
        &self,
        mut parts: http::request::Parts,
        body: B,
        host: &str,
        port: u16,
        uri: &str,
    ) -> Result<Response<Body>, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let unreachable =
            |e: &dyn std::fmt::Display| ApiError::service_unavailable(format!("error trying to reach service: {e}"));
        let upgrade = is_upgrade(&parts.headers);
        let client_upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
        let server_name = match host.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => ServerName::try_from(host.to_string()).map_err(|e| unreachable(&e))?,
        };
        let connect = async {
            let tcp = tokio::net::TcpStream::connect((host, port)).await?;
            let _ = tcp.set_nodelay(true);
            self.tls.connect(server_name, tcp).await
        };
        let tls = tokio::time::timeout(DIAL_TIMEOUT, connect)
            .await
            .map_err(|_| unreachable(&format!("dial tcp {host}:{port}: i/o timeout")))?
            .map_err(|e| unreachable(&format!("dial tcp {host}:{port}: {e}")))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "kubelet connection ended with an error");
            }
        });

        let mut req = Request::builder().method(parts.method.clone()).uri(uri);
        for (k, v) in parts.headers.iter() {
            if forwarded(k, upgrade) {
                req = req.header(k, v);
            }
        }
        req = req.header(header::HOST, format!("{host}:{port}"));
        let body: UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>> =
            body.map_err(Into::into).boxed_unsync();
        let req = req.body(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut resp = sender.send_request(req).await.map_err(|e| unreachable(&e))?;

        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(client_upgrade) = client_upgrade else {
                return Err(ApiError::bad_request("this connection cannot be upgraded"));
            };
            let backend_upgrade = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                let (client, backend) = match tokio::try_join!(client_upgrade, backend_upgrade) {
                    Ok(both) => both,
                    Err(e) => {
                        tracing::debug!(error = %e, "upgrade failed");
                        return;
                    }
                };
                let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
                let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
            });
            let mut out = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
            for (k, v) in resp.headers() {
                out = out.header(k, v);
            }
            return out.body(crate::body::full(Bytes::new())).map_err(|e| ApiError::internal(e.to_string()));
        }
        let (rparts, rbody) = resp.into_parts();
        let body = rbody.map_err(std::io::Error::other).boxed_unsync();
        let body = http_body_util::StreamBody::new(http_body_util::BodyStream::new(body));
        let mut out = Response::from_parts(rparts, BodyExt::boxed(SyncBody(std::sync::Mutex::new(body))));
        for h in HOP_BY_HOP {
            out.headers_mut().remove(*h);
        }
        Ok(out)
    }
}

/// Makes a Send-only body Sync (the API server's Body is a Sync box), polling through a
/// mutex that only the one polling task ever takes.
struct SyncBody<T>(std::sync::Mutex<T>);

impl<T> http_body::Body for SyncBody<T>
where
    T: http_body::Body + Unpin,
{
    type Data = T::Data;
    type Error = T::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let inner = self.get_mut().0.get_mut().unwrap_or_else(|e| e.into_inner());
        std::pin::Pin::new(inner).poll_frame(cx)
    }
}

const HOP_BY_HOP: &[&str] =
    &["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"];

fn is_upgrade(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade"))))
        && headers.contains_key(header::UPGRADE)
}

/// Whether a client header goes on to the kubelet: not its credentials (the API server
/// authenticates as itself), not impersonation, and hop-by-hop ones only for an upgrade.
fn forwarded(name: &http::HeaderName, upgrade: bool) -> bool {
    let n = name.as_str();
    if n == "authorization" || n.starts_with("impersonate-") || n == "host" {
        return false;
    }
    if n == "connection" || n == "upgrade" {
        return upgrade;
    }
    !HOP_BY_HOP.contains(&n)
}

/// The kubelet path of a nodes/NAME/proxy/REST request: /REST.
fn node_proxy_path(path: &str, name: &str) -> String {
    let marker = format!("/nodes/{name}/proxy");
    match path.find(&marker) {
        Some(i) => {
            let rest = &path[i + marker.len()..];
            if rest.is_empty() { "/".into() } else { rest.to_string() }
        }
        None => "/".into(),
    }
}

/// The node and kubelet path of a pod's log, exec, attach or portforward.
fn pod_target(
    pod: &Value,
    sub: &str,
    namespace: &str,
    name: &str,
    query: &HashMap<String, String>,
) -> Result<(String, String), ApiError> {
    let node = pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))?;
    if sub == "portforward" {
        return Ok((node.into(), format!("/portForward/{namespace}/{name}")));
    }
    let container = container_of(pod, name, query.get("container").map(String::as_str))?;
    let kubelet = match sub {
        "log" => "containerLogs",
        "exec" => "exec",
        _ => "attach",
    };
    Ok((node.into(), format!("/{kubelet}/{namespace}/{name}/{container}")))
}

/// The container asked for, or the pod's only one; upstream's messages otherwise.
fn container_of(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let names = |key: &str| -> Vec<String> {
        pod["spec"][key]
            .as_array()
            .map(|cs| cs.iter().filter_map(|c| c["name"].as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let (containers, init, ephemeral) = (names("containers"), names("initContainers"), names("ephemeralContainers"));
    match asked {
        Some(c) if !c.is_empty() => {
            if containers.iter().chain(&init).chain(&ephemeral).any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}")))
            }
        }
        _ if containers.len() == 1 => Ok(containers[0].clone()),
        _ => {
            let mut message =
                format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "));
            if !init.is_empty() {
                message.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
            }
            Err(ApiError::bad_request(message))
        }
    }
}

/// Host and port of a Node's kubelet.
fn kubelet_endpoint(node: &Value) -> Result<(String, u16), ApiError> {
    let name = node["metadata"]["name"].as_str().unwrap_or_default();
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().unwrap_or(0);
    if port == 0 || port > u16::MAX as u64 {
        return Err(ApiError::service_unavailable(format!("node {name} has no kubelet endpoint")));
    }
    let addresses = node["status"]["addresses"].as_array().cloned().unwrap_or_default();
    for kind in ADDRESS_TYPES {
        if let Some(a) = addresses.iter().find(|a| a["type"] == *kind).and_then(|a| a["address"].as_str()) {
            return Ok((a.to_string(), port as u16));
        }
    }
    Err(ApiError::service_unavailable(format!("no preferred addresses found; known addresses: {addresses:?}")))
}

/// The kubelet's query for a pod subresource, as upstream's streamLocation builds it:
/// exec and attach flags as input/output/error/tty=1 with each command word repeated,
/// port-forward ports as one comma-joined `port`, log options as they are; the
/// container went into the path.
fn kubelet_query(sub: &str, raw: Option<&str>) -> Option<String> {
    let pairs: Vec<(String, String)> = raw
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (crate::request::percent_decode(k), crate::request::percent_decode(v))
        })
        .collect();
    let on = |key: &str| pairs.iter().any(|(k, v)| k == key && matches!(v.as_str(), "true" | "1" | "True" | "TRUE"));
    let one = "1".to_string();
    let out: Vec<(String, String)> = match sub {
        "exec" | "attach" => {
            let mut out = Vec::new();
            for (flag, kubelet) in [("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty")] {
                if on(flag) {
                    out.push((kubelet.to_string(), one.clone()));
                }
            }
            out.extend(pairs.iter().filter(|(k, _)| k == "command").cloned());
            out
        }
        "portforward" => {
            let ports: Vec<&str> = pairs.iter().filter(|(k, _)| k == "ports").map(|(_, v)| v.as_str()).collect();
            if ports.is_empty() { Vec::new() } else { vec![("port".to_string(), ports.join(","))] }
        }
        _ => pairs
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "container" | "insecureSkipTLSVerifyBackend"))
            .cloned()
            .collect(),
    };
    encode_query(out.iter().map(|(k, v)| (k, v)))
}

/// Upstream's ValidatePodLogOptions, before the kubelet is asked.
fn validate_log_options(name: &str, query: &HashMap<String, String>) -> Result<(), ApiError> {
    let int = |key: &str| -> Result<Option<i64>, ApiError> {
        match query.get(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| ApiError::bad_request(format!("invalid {key}: {v:?}"))),
        }
    };
    let mut causes = Vec::new();
    if let Some(n) = int("tailLines")?.filter(|n| *n < 0) {
        causes.push(krate_api::Cause::invalid("tailLines", n, "must be greater than or equal to 0"));
    }
    if let Some(n) = int("limitBytes")?.filter(|n| *n < 1) {
        causes.push(krate_api::Cause::invalid("limitBytes", n, "must be greater than 0"));
    }
    let since_seconds = int("sinceSeconds")?;
    if since_seconds.is_some() && query.contains_key("sinceTime") {
        causes.push(krate_api::Cause::forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"));
    } else if let Some(n) = since_seconds.filter(|n| *n < 1) {
        causes.push(krate_api::Cause::invalid("sinceSeconds", n, "must be greater than 0"));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(&krate_api::Target::new("", "pods", "PodLogOptions", name), causes))
}

/// A kubelet's refusal of a log request as upstream's GenericHttpResponseChecker
/// reports it: its text becomes the Status message.
async fn log_error(response: Response<Body>) -> ApiError {
    let status = response.status();
    let body = tokio::time::timeout(std::time::Duration::from_secs(10), response.into_body().collect())
        .await
        .ok()
        .and_then(|r| r.ok())
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).trim().to_string();
    // A kubelet that already answered with a Status keeps its words.
    if let Ok(s) = serde_json::from_str::<Value>(&text)
        && s["kind"] == "Status"
        && let Some(message) = s["message"].as_str()
    {
        return status_error(status.as_u16(), message.to_string());
    }
    status_error(status.as_u16(), text)
}

fn status_error(code: u16, message: String) -> ApiError {
    match code {
        400 => ApiError::bad_request(message),
        404 => {
            let mut e = ApiError::not_found_path();
            e.message = message;
            e.details = None;
            e
        }
        403 => ApiError::forbidden(message),
        422 => {
            let mut e = ApiError::bad_request(message);
            e.code = 422;
            e.reason = "Invalid";
            e
        }
        503 => ApiError::service_unavailable(message),
        _ => ApiError::internal(message),
    }
}

fn encode_query<'a>(pairs: impl Iterator<Item = (&'a String, &'a String)>) -> Option<String> {
    let mut out = String::new();
    let pairs: Vec<_> = pairs.collect();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(&escape(k));
        out.push('=');
        out.push_str(&escape(v));
    }
    Some(out)
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn node_proxy_paths_keep_what_follows_proxy() {
        assert_eq!(node_proxy_path("/api/v1/nodes/n1/proxy/healthz", "n1"), "/healthz");
        assert_eq!(node_proxy_path("/api/v1/nodes/n1/proxy", "n1"), "/");
        assert_eq!(node_proxy_path("/api/v1/nodes/n1/proxy/stats/summary", "n1"), "/stats/summary");
    }

    #[test]
    fn pod_targets_name_the_container_as_upstream() {
        let pod = json!({"spec": {"nodeName": "n1", "containers": [{"name": "app"}]}});
        let q = HashMap::new();
        assert_eq!(pod_target(&pod, "log", "ns", "p", &q).unwrap(), ("n1".into(), "/containerLogs/ns/p/app".into()));
        assert_eq!(pod_target(&pod, "portforward", "ns", "p", &q).unwrap().1, "/portForward/ns/p");
        let two = json!({"spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}],
            "initContainers": [{"name": "i"}]}});
        let e = pod_target(&two, "exec", "ns", "p", &q).unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        let q = HashMap::from([("container".to_string(), "i".to_string())]);
        assert_eq!(pod_target(&two, "exec", "ns", "p", &q).unwrap().1, "/exec/ns/p/i");
        let unscheduled = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(pod_target(&unscheduled, "log", "ns", "p", &q).unwrap_err().code, 400);
    }

    #[test]
    fn kubelet_queries_follow_upstreams_stream_parameters() {
        let exec = kubelet_query(
            "exec",
            Some("command=sh&command=-c&command=exit%203&container=c&stdin=true&stdout=true&stderr=false&tty=false"),
        );
        assert_eq!(exec.as_deref(), Some("input=1&output=1&command=sh&command=-c&command=exit%203"));
        assert_eq!(kubelet_query("portforward", Some("ports=80&ports=8080")).as_deref(), Some("port=80%2C8080"));
        let log = kubelet_query("log", Some("container=c&follow=true&tailLines=2"));
        assert_eq!(log.as_deref(), Some("follow=true&tailLines=2"));
    }

    #[test]
    fn log_options_are_validated_as_upstream() {
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let e = validate_log_options("p", &q(&[("tailLines", "-1")])).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "PodLogOptions \"p\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
        );
        assert!(validate_log_options("p", &q(&[("sinceSeconds", "3"), ("sinceTime", "x")])).is_err());
        assert!(validate_log_options("p", &q(&[("tailLines", "2"), ("limitBytes", "10")])).is_ok());
    }

    #[test]
    fn the_kubelet_endpoint_prefers_the_internal_ip() {
        let node = json!({"metadata": {"name": "n1"}, "status": {
            "addresses": [{"type": "Hostname", "address": "h"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
        assert_eq!(kubelet_endpoint(&node).unwrap(), ("10.0.0.5".into(), 10250));
        let no_port = json!({"metadata": {"name": "n1"}, "status": {}});
        assert_eq!(kubelet_endpoint(&no_port).unwrap_err().code, 503);
    }

    #[test]
    fn credentials_and_hop_by_hop_headers_stay_behind() {
        let h = |s: &str| http::HeaderName::from_bytes(s.as_bytes()).unwrap();
        assert!(!forwarded(&h("authorization"), false));
        assert!(!forwarded(&h("impersonate-user"), false));
        assert!(!forwarded(&h("upgrade"), false));
        assert!(forwarded(&h("upgrade"), true));
        assert!(forwarded(&h("x-stream-protocol-version"), true));
        assert!(forwarded(&h("accept"), false));
    }

    #[test]
    fn connect_requests_are_recognized() {
        let info = |resource: &str, sub: &str| RequestInfo {
            is_resource: true,
            version: "v1".into(),
            resource: resource.into(),
            subresource: Some(sub.into()),
            ..Default::default()
        };
        assert!(is_connect(&info("nodes", "proxy")));
        assert!(is_connect(&info("pods", "exec")));
        assert!(!is_connect(&info("pods", "status")));
        assert!(!is_connect(&info("services", "proxy")));
    }
}
