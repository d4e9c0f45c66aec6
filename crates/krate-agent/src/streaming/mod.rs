//! The runtime's endpoints on the agent's HTTPS API, as upstream's kubelet serves them:
//!
//! - `/containerLogs/{namespace}/{pod}/{container}`: the container's CRI log file read
//!   with the PodLogOptions of the query (`logs`), the container found through the
//!   pod's status as the kubelet does (so `previous` is the last terminated instance).
//! - `/exec/{namespace}/{pod}/{container}?command=…&input=1&output=1&error=1&tty=1`
//!   and `/attach/…`: CRI Exec/Attach give a URL on the runtime's streaming server.
//!   A websocket client speaking `v5.channel.k8s.io` is bridged to it over SPDY
//!   (`bridge`); any other upgrade (SPDY, older websocket protocols) is passed through
//!   unchanged (`upgrade::proxy`), as the kubelet's own proxy does.
//! - `/portForward/{namespace}/{pod}`: CRI PortForward, then a websocket tunneling SPDY
//!   is bridged, anything else passed through.
//!
//! Errors are upstream's messages: plain text for logs (the API server turns them into
//! a Status), a metav1.Status for the streaming endpoints.

pub mod bridge;
pub mod logs;
pub mod spdy;
pub mod upgrade;

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::Api;

use crate::kubelet_api::{Body, RouteFuture, Routes, auth::User};
use crate::runtime::Cri;
use crate::runtime::cri_config::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE};
use bridge::Streams;
use logs::{LogOptions, OptionsError};

/// A metav1.Status answer.
pub fn status_response(code: StatusCode, message: &str) -> Response<Body> {
    let reason = match code.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    upgrade::full(code, "application/json", status.to_string())
}

fn text(code: StatusCode, message: impl Into<Bytes>) -> Response<Body> {
    upgrade::full(code, "text/plain; charset=utf-8", message)
}

/// The runtime's endpoints; cheap to clone.
#[derive(Clone)]
pub struct StreamingRoutes {
    inner: Arc<Inner>,
}

struct Inner {
    cri: Cri,
    /// The node's client, to read the pods (and statuses) bound to it.
    client: kube::Client,
    node: String,
}

impl StreamingRoutes {
    pub fn new(cri: Cri, client: kube::Client, node: &str) -> StreamingRoutes {
        StreamingRoutes { inner: Arc::new(Inner { cri, client, node: node.to_string() }) }
    }
}

/// A request path split into the endpoint and its names.
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    Logs { namespace: &'a str, pod: &'a str, container: &'a str },
    Exec { namespace: &'a str, pod: &'a str, container: &'a str },
    Attach { namespace: &'a str, pod: &'a str, container: &'a str },
    PortForward { namespace: &'a str, pod: &'a str },
}

/// Upstream's routes, with the optional pod uid segment of exec, attach and portForward.
fn target(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ok = |s: &&&str| !s.is_empty();
    match parts.as_slice() {
        ["containerLogs", ns, pod, c] if [ns, pod, c].iter().all(ok) => {
            Some(Target::Logs { namespace: ns, pod, container: c })
        }
        ["exec", ns, pod, c] | ["exec", ns, pod, _, c] if [ns, pod, c].iter().all(ok) => {
            Some(Target::Exec { namespace: ns, pod, container: c })
        }
        ["attach", ns, pod, c] | ["attach", ns, pod, _, c] if [ns, pod, c].iter().all(ok) => {
            Some(Target::Attach { namespace: ns, pod, container: c })
        }
        ["portForward", ns, pod] | ["portForward", ns, pod, _] if [ns, pod].iter().all(ok) => {
            Some(Target::PortForward { namespace: ns, pod })
        }
        _ => None,
    }
}

impl Routes for StreamingRoutes {
    fn handles(&self, path: &str) -> bool {
        ["/containerLogs/", "/exec/", "/attach/", "/portForward/"].iter().any(|p| path.starts_with(p))
    }

    fn route(&self, req: Request<Incoming>, user: &User) -> RouteFuture {
        let this = self.clone();
        tracing::debug!(user = %user.name, path = %req.uri().path(), "streaming request");
        Box::pin(async move { this.serve(req).await })
    }
}

fn query_pairs(req: &Request<Incoming>) -> Vec<(String, String)> {
    form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()).into_owned().collect()
}

/// The id part of a status containerID (`containerd://ID`).
fn runtime_id(container_id: &str) -> &str {
    container_id.split_once("://").map_or(container_id, |(_, id)| id)
}

/// upstream's validateContainerLogStatus: the runtime container whose log is asked for,
/// or why there is none.
pub fn log_container_id(pod: &Pod, container: &str, previous: bool) -> Result<String, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let all: Vec<ContainerStatus> =
        [status.container_statuses, status.init_container_statuses, status.ephemeral_container_statuses]
            .into_iter()
            .flatten()
            .flatten()
            .collect();
    let Some(s) = all.iter().find(|s| s.name == container) else {
        return Err(format!("container {container:?} in pod {pod_name:?} is not available"));
    };
    let last = s.last_state.as_ref().and_then(|l| l.terminated.as_ref());
    let state = s.state.clone().unwrap_or_default();
    let id = |id: Option<&String>| id.filter(|i| !i.is_empty()).cloned();
    let terminated_message = format!("container {container:?} in pod {pod_name:?} is terminated");
    let found = if previous {
        id(last.and_then(|t| t.container_id.as_ref()))
            .ok_or_else(|| format!("previous terminated container {container:?} in pod {pod_name:?} not found"))?
    } else if state.running.is_some() {
        id(s.container_id.as_ref()).ok_or_else(|| terminated_message.clone())?
    } else if let Some(t) = &state.terminated {
        id(t.container_id.as_ref())
            .or_else(|| id(last.and_then(|l| l.container_id.as_ref())))
            .ok_or_else(|| terminated_message.clone())?
    } else if let Some(l) = last {
        id(l.container_id.as_ref()).ok_or(terminated_message)?
    } else if let Some(w) = &state.waiting {
        let reason = w.reason.clone().unwrap_or_default();
        let why = match reason.as_str() {
            "ErrImagePull" => "image can't be pulled".to_string(),
            "ImagePullBackOff" => "trying and failing to pull image".to_string(),
            _ => reason,
        };
        return Err(format!("container {container:?} in pod {pod_name:?} is waiting to start: {why}"));
    } else {
        return Err(format!("container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"));
    };
    Ok(runtime_id(&found).to_string())
}

fn has_container(pod: &Pod, name: &str) -> bool {
    let spec = pod.spec.clone().unwrap_or_default();
    spec.containers.iter().any(|c| c.name == name)
        || spec.init_containers.iter().flatten().any(|c| c.name == name)
        || spec.ephemeral_containers.iter().flatten().any(|c| c.name == name)
}

/// Exec and attach options from the query: the kubelet's names (input, output, error,
/// tty = 1) and PodExecOptions' (stdin, stdout, stderr, tty = true) alike.
fn streams_of(pairs: &[(String, String)]) -> Streams {
    let on = |names: &[&str]| {
        pairs.iter().any(|(k, v)| names.contains(&k.as_str()) && matches!(v.as_str(), "1" | "true" | "True" | "TRUE"))
    };
    let tty = on(&["tty"]);
    Streams {
        stdin: on(&["input", "stdin"]),
        stdout: on(&["output", "stdout"]),
        // upstream drops stderr with a tty (it is merged into stdout there).
        stderr: on(&["error", "stderr"]) && !tty,
        tty,
    }
}

/// Whether a runtime container is still running (for log followers).
struct Running {
    cri: Cri,
    id: String,
}

impl logs::Liveness for Running {
    fn running(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            let request = cri::ContainerStatusRequest { container_id: self.id.clone(), verbose: false };
            match self.cri.runtime.clone().container_status(request).await {
                Ok(r) => r.into_inner().status.is_some_and(|s| s.state == cri::ContainerState::ContainerRunning as i32),
                Err(_) => false,
            }
        })
    }
}

impl StreamingRoutes {
    async fn serve(&self, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let Some(target) = target(&path) else {
            return text(StatusCode::NOT_FOUND, "404 page not found\n");
        };
        let method = req.method().clone();
        match target {
            Target::Logs { namespace, pod, container } => {
                if method != Method::GET && method != Method::HEAD {
                    return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
                }
                let pairs = query_pairs(&req);
                self.container_logs(namespace, pod, container, &pairs).await
            }
            Target::Exec { namespace, pod, container } => self.exec(req, namespace, pod, container, false).await,
            Target::Attach { namespace, pod, container } => self.exec(req, namespace, pod, container, true).await,
            Target::PortForward { namespace, pod } => self.port_forward(req, namespace, pod).await,
        }
    }

    /// The pod if it is bound to this node.
    async fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.inner.client.clone(), namespace);
        let pod = pods.get_opt(name).await?;
        Ok(pod.filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.inner.node.as_str())))
    }

    async fn container_logs(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
        pairs: &[(String, String)],
    ) -> Response<Body> {
        let options = match LogOptions::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            Ok(o) => o,
            Err(OptionsError::Decode) => {
                return text(StatusCode::BAD_REQUEST, r#"{"message": "Unable to decode query."}"#);
            }
            Err(OptionsError::Invalid) => {
                return text(StatusCode::UNPROCESSABLE_ENTITY, r#"{"message": "Invalid request."}"#);
            }
        };
        let pod = match self.pod(namespace, name).await {
            Ok(Some(p)) => p,
            Ok(None) => return text(StatusCode::NOT_FOUND, format!("pod {name:?} does not exist")),
            Err(error) => {
                return text(StatusCode::INTERNAL_SERVER_ERROR, format!("reading pod {namespace}/{name}: {error}"));
            }
        };
        if !has_container(&pod, container) {
            return text(StatusCode::NOT_FOUND, format!("container {container:?} not found in pod {name:?}"));
        }
        let id = match log_container_id(&pod, container, options.previous) {
            Ok(id) => id,
            Err(message) => return text(StatusCode::BAD_REQUEST, message),
        };
        let request = cri::ContainerStatusRequest { container_id: id.clone(), verbose: false };
        let status =
            self.inner.cri.runtime.clone().container_status(request).await.ok().and_then(|r| r.into_inner().status);
        let Some(status) = status else {
            return text(StatusCode::BAD_REQUEST, format!("unable to retrieve container logs for containerd://{id}"));
        };
        let file = match tokio::fs::File::open(&status.log_path).await {
            Ok(f) => f,
            Err(error) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("failed to open log file {:?}: {error}", status.log_path),
                );
            }
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let live = Box::new(Running { cri: self.inner.cri.clone(), id });
        let path = status.log_path.clone();
        tokio::spawn(async move {
            match logs::stream_log(file, options, live, tx).await {
                Ok(()) => tracing::debug!(path, "container log stream ended"),
                Err(error) => tracing::warn!(%error, path, "reading a container log failed"),
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let body = http_body_util::StreamBody::new(futures::StreamExt::map(stream, |b| Ok(Frame::data(b))));
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(BodyExt::boxed(body))
            .expect("valid response")
    }

    /// The running runtime container of `container` in the pod.
    async fn running_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<Option<String>, tonic::Status> {
        let filter = cri::ContainerFilter {
            state: Some(cri::ContainerStateValue { state: cri::ContainerState::ContainerRunning as i32 }),
            label_selector: [
                (LABEL_POD_NAMESPACE.to_string(), namespace.to_string()),
                (LABEL_POD_NAME.to_string(), pod.to_string()),
                (LABEL_CONTAINER_NAME.to_string(), container.to_string()),
            ]
            .into(),
            ..Default::default()
        };
        let list =
            self.inner.cri.runtime.clone().list_containers(cri::ListContainersRequest { filter: Some(filter) }).await?;
        Ok(list.into_inner().containers.into_iter().max_by_key(|c| c.created_at).map(|c| c.id))
    }

    async fn exec(
        &self,
        req: Request<Incoming>,
        namespace: &str,
        pod: &str,
        container: &str,
        attach: bool,
    ) -> Response<Body> {
        if req.method() != Method::GET && req.method() != Method::POST {
            return status_response(StatusCode::METHOD_NOT_ALLOWED, "only GET and POST are allowed");
        }
        let pairs = query_pairs(&req);
        let streams = streams_of(&pairs);
        if !streams.stdin && !streams.stdout && !streams.stderr {
            return status_response(StatusCode::BAD_REQUEST, "you must specify at least 1 of stdin, stdout, stderr");
        }
        let command: Vec<String> = pairs.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
        if !attach && command.is_empty() {
            return status_response(StatusCode::BAD_REQUEST, "you must specify at least one command for the container");
        }
        let id = match self.running_container(namespace, pod, container).await {
            Ok(Some(id)) => id,
            Ok(None) => return status_response(StatusCode::NOT_FOUND, &format!("container not found ({container:?})")),
            Err(e) => return status_response(StatusCode::INTERNAL_SERVER_ERROR, e.message()),
        };
        let mut runtime = self.inner.cri.runtime.clone();
        let url = if attach {
            let request = cri::AttachRequest {
                container_id: id,
                stdin: streams.stdin,
                tty: streams.tty,
                stdout: streams.stdout,
                stderr: streams.stderr,
            };
            runtime.attach(request).await.map(|r| r.into_inner().url)
        } else {
            let request = cri::ExecRequest {
                container_id: id,
                cmd: command,
                tty: streams.tty,
                stdin: streams.stdin,
                stdout: streams.stdout,
                stderr: streams.stderr,
            };
            runtime.exec(request).await.map(|r| r.into_inner().url)
        };
        let url = match url {
            Ok(u) => u,
            Err(e) => return cri_error(&e),
        };
        let offered = bridge::offered_protocols(req.headers());
        if bridge::is_websocket(req.headers()) && offered.iter().any(|p| p == bridge::V5_CHANNEL) {
            return bridge::remote_command_v5(req, &url, streams).await;
        }
        upgrade::proxy(req, &url).await
    }

    async fn port_forward(&self, req: Request<Incoming>, namespace: &str, name: &str) -> Response<Body> {
        if req.method() != Method::GET && req.method() != Method::POST {
            return status_response(StatusCode::METHOD_NOT_ALLOWED, "only GET and POST are allowed");
        }
        // The pod's sandbox, found by its labels.
        let filter = cri::PodSandboxFilter {
            state: Some(cri::PodSandboxStateValue { state: cri::PodSandboxState::SandboxReady as i32 }),
            label_selector: [
                (LABEL_POD_NAMESPACE.to_string(), namespace.to_string()),
                (LABEL_POD_NAME.to_string(), name.to_string()),
            ]
            .into(),
            ..Default::default()
        };
        let mut runtime = self.inner.cri.runtime.clone();
        let sandbox = match runtime.list_pod_sandbox(cri::ListPodSandboxRequest { filter: Some(filter) }).await {
            Ok(r) => r.into_inner().items.into_iter().max_by_key(|s| s.created_at),
            Err(e) => return cri_error(&e),
        };
        let Some(sandbox) = sandbox else {
            return status_response(StatusCode::NOT_FOUND, "pod does not exist");
        };
        // A websocket client names its ports in the query (SPDY clients per stream),
        // and the runtime's server takes them from the CRI request.
        let mut ports = Vec::new();
        for (k, v) in query_pairs(&req) {
            if k == "port" || k == "ports" {
                for p in v.split(',') {
                    match p.trim().parse::<u16>() {
                        Ok(port) if port > 0 => ports.push(i32::from(port)),
                        _ => {
                            let message = format!("invalid port value {p:?}");
                            return status_response(StatusCode::BAD_REQUEST, &message);
                        }
                    }
                }
            }
        }
        let request = cri::PortForwardRequest { pod_sandbox_id: sandbox.id, port: ports };
        let url = match runtime.port_forward(request).await {
            Ok(r) => r.into_inner().url,
            Err(e) => return cri_error(&e),
        };
        let offered = bridge::offered_protocols(req.headers());
        if bridge::is_websocket(req.headers()) && offered.iter().any(|p| p.starts_with(bridge::SPDY_TUNNEL_PREFIX)) {
            return bridge::spdy_tunnel(req, &url, &offered).await;
        }
        upgrade::proxy(req, &url).await
    }
}

/// A failed CRI call as the kubelet's streaming.WriteError reports it.
fn cri_error(e: &tonic::Status) -> Response<Body> {
    let code = match e.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    status_response(code, e.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_endpoint_pod_and_container() {
        assert_eq!(target("/containerLogs/ns/p/c"), Some(Target::Logs { namespace: "ns", pod: "p", container: "c" }));
        assert_eq!(target("/exec/ns/p/c"), Some(Target::Exec { namespace: "ns", pod: "p", container: "c" }));
        assert_eq!(target("/exec/ns/p/uid/c"), Some(Target::Exec { namespace: "ns", pod: "p", container: "c" }));
        assert_eq!(target("/attach/ns/p/c"), Some(Target::Attach { namespace: "ns", pod: "p", container: "c" }));
        assert_eq!(target("/portForward/ns/p"), Some(Target::PortForward { namespace: "ns", pod: "p" }));
        assert_eq!(target("/containerLogs/ns/p"), None);
        assert_eq!(target("/exec/ns//c"), None);
    }

    #[test]
    fn exec_streams_take_both_spellings_and_drop_stderr_with_a_tty() {
        let q = |s: &str| form_urlencoded::parse(s.as_bytes()).into_owned().collect::<Vec<_>>();
        let s = streams_of(&q("input=1&output=1&error=1&command=ls"));
        assert_eq!(s, Streams { stdin: true, stdout: true, stderr: true, tty: false });
        let s = streams_of(&q("stdout=true&stderr=true&tty=true"));
        assert_eq!(s, Streams { stdin: false, stdout: true, stderr: false, tty: true });
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
            "status": status}))
        .unwrap()
    }

    #[test]
    fn log_containers_follow_the_status_with_upstreams_messages() {
        let waiting = pod(serde_json::json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
        assert_eq!(
            log_container_id(&waiting, "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start: ContainerCreating"#
        );
        assert_eq!(
            log_container_id(&waiting, "c", true).unwrap_err(),
            r#"previous terminated container "c" in pod "p" not found"#
        );
        assert_eq!(log_container_id(&waiting, "x", false).unwrap_err(), r#"container "x" in pod "p" is not available"#);
        let restarted = pod(serde_json::json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "",
            "ready": true, "restartCount": 1, "containerID": "containerd://new",
            "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}}}]}));
        assert_eq!(log_container_id(&restarted, "c", false).unwrap(), "new");
        assert_eq!(log_container_id(&restarted, "c", true).unwrap(), "old");
        let pulling = pod(serde_json::json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull"}}}]}));
        assert_eq!(
            log_container_id(&pulling, "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start: image can't be pulled"#
        );
    }
}
