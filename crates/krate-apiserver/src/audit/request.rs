//! One request's audit record on the road: created when the request arrives, told the
//! user and the authorization decision, and completed with the response (at once, or
//! when a watch's stream ends).

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use parking_lot::Mutex;
use serde_json::Value;

use krate_api::audit::AuditAnnotations;
use krate_api::user::UserInfo;

use super::event::{self, Event, EventUser, ObjectRef};
use super::policy::{Level, RequestConfig, Stage};
use super::{Auditor, metrics};
use crate::body::{self, Body};
use crate::request::RequestInfo;

/// One request's audit record, from arrival to its last stage.
pub struct RequestAudit {
    auditor: Arc<Auditor>,
    /// Annotations from authorization and admission (admission reaches them through the
    /// registry's `Context`).
    pub annotations: AuditAnnotations,
    state: Mutex<State>,
}

struct State {
    event: Event,
    /// None until the user is known (authentication done).
    config: Option<RequestConfig>,
    /// The decoded request body, for objectRef's uid/resourceVersion and requestObject.
    request_object: Option<Value>,
    /// The kinds of credentials the request carried (for a failed authentication).
    attempted: Vec<&'static str>,
}

impl RequestAudit {
    pub fn begin(
        auditor: Arc<Auditor>,
        audit_id: &str,
        parts: &http::request::Parts,
        peer: Option<std::net::IpAddr>,
    ) -> Self {
        let ua = parts.headers.get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
        let uri = parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_string(), |p| p.to_string());
        let event = Event::new(audit_id.to_string(), uri, ua.to_string(), event::source_ips(&parts.headers, peer));
        RequestAudit {
            auditor,
            annotations: AuditAnnotations::default(),
            state: Mutex::new(State {
                event,
                config: None,
                request_object: None,
                attempted: attempted(&parts.headers),
            }),
        }
    }

    /// Authentication is done: the policy decides the level; RequestReceived is written.
    pub fn authenticated(&self, info: &RequestInfo, user: &UserInfo) {
        let config = self.auditor.policy.evaluate(&info.attributes(user));
        let mut st = self.state.lock();
        st.event.verb = info.verb.clone();
        st.event.user = EventUser::from(user);
        st.event.level = config.level;
        if info.is_resource {
            let meta = |f: &str| {
                st.request_object
                    .as_ref()
                    .and_then(|o| o.pointer(&format!("/metadata/{f}")))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            st.event.object_ref = Some(ObjectRef {
                resource: info.resource.clone(),
                namespace: info.namespace.clone().unwrap_or_else(|| meta("namespace")),
                name: info.name.clone().unwrap_or_else(|| meta("name")),
                uid: meta("uid"),
                api_group: info.group.clone(),
                api_version: info.version.clone(),
                resource_version: meta("resourceVersion"),
                subresource: info.subresource.clone().unwrap_or_default(),
            });
        }
        if config.level >= Level::Request
            && let Some(mut obj) = st.request_object.clone()
        {
            if config.omit_managed_fields {
                event::omit_managed_fields(&mut obj);
            }
            st.event.request_object = Some(obj);
        }
        if config.level > Level::None {
            metrics::LEVELS.with_label_values(&[config.level.as_str()]).inc();
        }
        st.config = Some(config);
        drop(st);
        self.emit(Stage::RequestReceived, None);
    }

    /// Impersonation: `user` (given to `authenticated`) asked to act as `as_user`.
    pub fn set_impersonated_user(&self, as_user: &UserInfo) {
        self.state.lock().event.impersonated_user = Some(EventUser::from(as_user));
    }

    /// The authorizers' decision, as upstream's authorization.k8s.io annotations.
    pub fn authorized(&self, allowed: bool, reason: &str) {
        self.annotations.add("authorization.k8s.io/decision", if allowed { "allow" } else { "forbid" });
        self.annotations.add("authorization.k8s.io/reason", reason);
    }

    fn level(&self) -> Level {
        self.state.lock().config.as_ref().map_or(Level::None, |c| c.level)
    }

    /// Writes the event at `stage` unless the policy leaves it out; `status` and
    /// `response` complete it.
    fn emit(&self, stage: Stage, finish: Option<(Value, Option<Value>)>) {
        let st = self.state.lock();
        let Some(config) = &st.config else { return };
        if config.level == Level::None || config.omit_stages.contains(&stage) {
            return;
        }
        let omit_managed = config.omit_managed_fields;
        let level = config.level;
        let mut ev = st.event.clone();
        ev.stage = stage;
        ev.stage_timestamp = event::micro_time();
        ev.annotations = self.annotations.snapshot();
        if let Some((status, response)) = finish {
            ev.response_status = Some(status);
            if level == Level::RequestResponse
                && let Some(mut obj) = response
            {
                if omit_managed {
                    event::omit_managed_fields(&mut obj);
                }
                ev.response_object = Some(obj);
            }
        }
        if level < Level::Request {
            ev.request_object = None;
        }
        drop(st);
        self.auditor.emit(&ev);
    }

    /// Whether the request got past authentication (the policy has been asked).
    fn started(&self) -> bool {
        self.state.lock().config.is_some()
    }

    /// A request refused by authentication is audited once, at ResponseStarted, with no
    /// user and the credentials it tried (upstream's failed-authentication audit).
    fn failed_authentication(&self, info: &RequestInfo, code: u16) {
        let attempted = std::mem::take(&mut self.state.lock().attempted);
        let nobody = UserInfo::default();
        let config = self.auditor.policy.evaluate(&info.attributes(&nobody));
        {
            let mut st = self.state.lock();
            st.event.verb = info.verb.clone();
            st.event.level = config.level;
            st.config = Some(config);
        }
        let message = if attempted.is_empty() {
            "Authentication failed, no credentials provided".to_string()
        } else {
            format!("Authentication failed, attempted: {}", attempted.join(", "))
        };
        let status = serde_json::json!({"metadata": {}, "code": code, "message": message});
        self.emit(Stage::ResponseStarted, Some((status, None)));
    }
}

/// The credentials a request carries besides its TLS certificate (verified by the
/// handshake, so never the cause of a failed authentication).
fn attempted(headers: &http::HeaderMap) -> Vec<&'static str> {
    let auth = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
    let scheme = auth.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
    match scheme.as_str() {
        "basic" => vec!["basic"],
        "bearer" => vec!["bearer"],
        _ => vec![],
    }
}

/// Reads the body of a write for the audit record, handing the request on with it.
pub async fn buffer_body<B>(audit: &RequestAudit, req: Request<B>) -> Result<Request<Full<Bytes>>, Response<Body>>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, b) = req.into_parts();
    let writes = matches!(parts.method, http::Method::POST | http::Method::PUT | http::Method::PATCH);
    let bytes = if writes {
        match body::read(b).await {
            Ok(bytes) => bytes,
            Err(e) => return Err(body::error(&e, body::Format::Json)),
        }
    } else {
        Bytes::new()
    };
    if !bytes.is_empty() {
        // Patches are kept as sent (JSON); objects are decoded in any of our formats.
        let obj = match body::content_type(&parts.headers).as_str() {
            ct if ct.contains("patch") => {
                serde_json::from_slice(&bytes).ok().or_else(|| serde_yaml_ng::from_slice(&bytes).ok())
            }
            _ => body::decode(&parts.headers, &bytes).ok(),
        };
        audit.state.lock().request_object = obj;
    }
    Ok(Request::from_parts(parts, Full::new(bytes)))
}

/// The request panicked: audit the Panic stage; the client gets a 500.
pub fn panicked(audit: &RequestAudit, message: &str) -> Response<Body> {
    let e = krate_api::ApiError::internal("This request caused apiserver to panic. Look in the logs for details.");
    let status = serde_json::json!({"metadata": {}, "code": 500, "status": "Failure", "reason": "InternalError", "message": format!("APIServer panic'd: {message}")});
    audit.emit(Stage::Panic, Some((status, None)));
    body::error(&e, body::Format::Json)
}

/// The answer is ready: ResponseComplete (with responseStatus and, at
/// RequestResponse, the response object), or for a watch ResponseStarted now and
/// ResponseComplete when the stream ends.
pub async fn complete(audit: RequestAudit, info: Option<&RequestInfo>, response: Response<Body>) -> Response<Body> {
    let code = response.status().as_u16();
    if !audit.started()
        && let Some(info) = info
    {
        if code == 401 {
            audit.failed_authentication(info, code);
            return response;
        }
        // Refused before authentication for another reason (too many requests): audited
        // with no user.
        audit.authenticated(info, &UserInfo::default());
    }
    let level = audit.level();
    if level == Level::None {
        return response;
    }
    let is_watch = audit.state.lock().event.verb == "watch";
    if is_watch && response.status().is_success() {
        let status = event::response_status(code, None);
        audit.emit(Stage::ResponseStarted, Some((status.clone(), None)));
        let (parts, inner) = response.into_parts();
        let guard = CompleteOnDrop(Some((audit, status)));
        return Response::from_parts(parts, BodyExt::boxed(AuditedBody { inner, _guard: guard }));
    }
    // Non-streaming answers are already in memory: reading them back costs a copy.
    let wants_body = code >= 400 || level == Level::RequestResponse;
    if !wants_body {
        audit.emit(Stage::ResponseComplete, Some((event::response_status(code, None), None)));
        return response;
    }
    let (parts, inner) = response.into_parts();
    let bytes = match inner.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            tracing::debug!(error = %e, "reading a response for the audit failed");
            Bytes::new()
        }
    };
    let decoded: Option<Value> = serde_json::from_slice(&bytes).ok();
    let status = event::response_status(code, decoded.as_ref());
    audit.emit(Stage::ResponseComplete, Some((status, decoded)));
    Response::from_parts(parts, body::full(bytes))
}

/// Writes ResponseComplete when a watch's stream ends, however it ends.
struct CompleteOnDrop(Option<(RequestAudit, Value)>);
impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        if let Some((audit, status)) = self.0.take() {
            audit.emit(Stage::ResponseComplete, Some((status, None)));
        }
    }
}

struct AuditedBody {
    inner: Body,
    _guard: CompleteOnDrop,
}

impl http_body::Body for AuditedBody {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
