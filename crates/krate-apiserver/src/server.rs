//! The request road every request takes:
//! HTTP → authentication (done by the transport, see `serve`) → authorization →
//! admission + registry (the generic store) → the store, and back out through the
//! watch cache for watches.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};

use krate_api::admission::{self, Admission};
use krate_api::computed::{ComputedRequest, ComputedResource};
use krate_api::fieldvalidation::{FieldValidation, Warnings};
use krate_api::managedfields::{self, FieldManager, Operation as ManagedOperation};
use krate_api::registry::{Context, DeleteOptions, Deleted, ListOptions, Patch, Scope, WatchOptions};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry, ResourceInfo};
use krate_auth::authn::oidc::{self, Discovery};
use krate_auth::authn::{Authenticator, Credentials};
use krate_auth::authz::{self, Authorizer, Decision};

use crate::body::{self, Body, Format};
use crate::request::{self, RequestInfo};
use crate::{discovery, health, metrics};

/// Upstream's --min-request-timeout: watches without timeoutSeconds end after a random
/// time between this and twice this, so clients spread their reconnections.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);
/// Most events a lagging watcher gets in one DATA frame.
const WATCH_BATCH: usize = 64;

/// The authentication and authorization stages of the road.
pub struct Auth {
    pub authenticator: Arc<dyn Authenticator>,
    pub authorizer: Arc<dyn Authorizer>,
}

pub struct ApiServerConfig {
    /// host:port clients should use (discovery's serverAddressByClientCIDRs).
    pub advertise_address: String,
    /// Whether requests without credentials act as system:anonymous (else 401).
    pub anonymous_auth: bool,
    /// In-flight limits for reads and writes (0: unlimited); upstream's 400 and 200.
    pub max_requests_inflight: usize,
    pub max_mutating_requests_inflight: usize,
}

/// (group, resource, subresource or "") of a computed resource.
type ComputedKey = (String, String, String);

/// Who is on the other end of a request.
#[derive(Clone)]
pub enum Caller {
    /// A component inside this process, acting as this user (no credentials to check).
    Trusted(UserInfo),
    /// A client over HTTPS: its credentials are authenticated per request.
    Remote {
        /// The certificate chain it presented in the TLS handshake (DER, leaf first).
        client_certs: Arc<Vec<Vec<u8>>>,
        /// The TCP peer (audit's sourceIPs).
        peer: std::net::SocketAddr,
    },
}

impl Caller {
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        match self {
            Caller::Trusted(_) => None,
            Caller::Remote { peer, .. } => Some(peer.ip()),
        }
    }
}

pub struct ApiServer {
    pub registry: Arc<Registry>,
    admission: Arc<dyn Admission>,
    authenticator: Arc<dyn Authenticator>,
    authorizer: Arc<dyn Authorizer>,
    /// Handlers of computed resources by (group, resource, subresource or "").
    computed: parking_lot::RwLock<HashMap<ComputedKey, Arc<dyn ComputedResource>>>,
    config: ApiServerConfig,
    ready: AtomicBool,
    inflight: crate::inflight::InflightLimits,
    openapi: Arc<crate::openapi::OpenApi>,
    audit: std::sync::OnceLock<Arc<crate::audit::Auditor>>,
    /// Checks added at start-up (KMS providers), asked on /healthz, /livez and /readyz.
    extra_checks: parking_lot::RwLock<Vec<Arc<dyn health::ExtraChecks>>>,
    /// The service-account issuer's OIDC discovery documents, once set.
    oidc: std::sync::OnceLock<Arc<Discovery>>,
    /// Connect subresources passed to the nodes' kubelets, once set.
    node_proxy: std::sync::OnceLock<Arc<crate::node_proxy::NodeProxy>>,
}

fn vary_accept(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(header::VARY, http::HeaderValue::from_static("Accept"));
    response
}

/// Requests whose handlers read Accept themselves: OpenAPI documents, and aggregated
/// discovery when asked for.
fn negotiates_itself(info: &RequestInfo, headers: &http::HeaderMap) -> bool {
    let p = info.path.trim_end_matches('/');
    let aggregated = (p == "/api" || p == "/apis") && discovery::aggregated_version(headers).is_some();
    !info.is_resource && (aggregated || p.starts_with("/openapi/") || Discovery::is_discovery_path(p))
}

impl ApiServer {
    pub fn new(registry: Arc<Registry>, admission: Arc<dyn Admission>, auth: Auth, config: ApiServerConfig) -> Self {
        let inflight =
            crate::inflight::InflightLimits::new(config.max_requests_inflight, config.max_mutating_requests_inflight);
        ApiServer {
            registry,
            admission,
            authenticator: auth.authenticator,
            authorizer: auth.authorizer,
            computed: Default::default(),
            config,
            ready: AtomicBool::new(false),
            inflight,
            openapi: Default::default(),
            audit: Default::default(),
            extra_checks: Default::default(),
            oidc: Default::default(),
            node_proxy: Default::default(),
        }
    }

    /// Serves the OIDC discovery documents of the service-account issuer.
    pub fn set_oidc_discovery(&self, discovery: Arc<Discovery>) {
        let _ = self.oidc.set(discovery);
    }

    /// Audits every request from now on (set once, at start-up).
    pub fn set_node_proxy(&self, proxy: Arc<crate::node_proxy::NodeProxy>) {
        let _ = self.node_proxy.set(proxy);
    }

    pub fn set_auditor(&self, auditor: Arc<crate::audit::Auditor>) {
        let _ = self.audit.set(auditor);
    }

    /// Serves creates of `group`/`resource` (and `subresource`, "" for none) with `handler`.
    pub fn register_computed(
        &self,
        group: &str,
        resource: &str,
        subresource: &str,
        handler: Arc<dyn ComputedResource>,
    ) {
        self.computed.write().insert((group.into(), resource.into(), subresource.into()), handler);
    }

    fn computed_handler(&self, r: &ResourceInfo, sub: Option<&str>) -> Option<Arc<dyn ComputedResource>> {
        let key = (r.group.clone(), r.plural.clone(), sub.unwrap_or("").to_string());
        self.computed.read().get(&key).cloned()
    }

    /// Adds health checks to every health endpoint.
    pub fn add_health_checks(&self, checks: Arc<dyn health::ExtraChecks>) {
        self.extra_checks.write().push(checks);
    }

    /// Marks start-up work (system namespaces…) as done: /readyz passes from now on.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// Serves one request from `caller`.
    pub async fn handle<B>(&self, req: Request<B>, caller: Caller) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        // The client's Audit-ID if it sent a usable one, else a new one, on every answer.
        let audit_id =
            req.headers().get("audit-id").filter(|v| !v.is_empty() && v.len() <= 128).cloned().unwrap_or_else(|| {
                http::HeaderValue::from_str(&krate_api::object::new_uid()).expect("a UUID is ASCII")
            });
        let query = request::parse_query(req.uri().query());
        let pretty = body::wants_pretty(query.get("pretty").map(String::as_str), req.headers());
        let mut response = body::with_pretty(pretty, self.serve_audited(req, query, caller, &audit_id)).await;
        response.headers_mut().insert("audit-id", audit_id);
        response
    }

    /// `serve` with the audit around it, and a handler's panic turned into a 500.
    async fn serve_audited<B>(
        &self,
        req: Request<B>,
        query: HashMap<String, String>,
        caller: Caller,
        audit_id: &http::HeaderValue,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        use futures::FutureExt;
        use std::panic::AssertUnwindSafe;
        let Some(auditor) = self.audit.get().cloned() else {
            return match AssertUnwindSafe(self.serve(req, query, caller, None)).catch_unwind().await {
                Ok(r) => r,
                Err(p) => {
                    tracing::error!(panic = crate::audit::panic_message(&*p), "a request handler panicked");
                    body::error(&ApiError::internal("This request caused apiserver to panic."), Format::Json)
                }
            };
        };
        let (parts, b) = req.into_parts();
        let audit =
            crate::audit::RequestAudit::begin(auditor, audit_id.to_str().unwrap_or(""), &parts, caller.peer_ip());
        let info = request::parse(&parts.method, parts.uri.path(), &query);
        let req = match crate::audit::buffer_body(&audit, Request::from_parts(parts, b)).await {
            Ok(req) => req,
            Err(resp) => return crate::audit::complete(audit, Some(&info), resp).await,
        };
        let response = match AssertUnwindSafe(self.serve(req, query, caller, Some(&audit))).catch_unwind().await {
            Ok(r) => r,
            Err(p) => {
                let msg = crate::audit::panic_message(&*p);
                tracing::error!(panic = msg, "a request handler panicked");
                return crate::audit::panicked(&audit, &msg);
            }
        };
        crate::audit::complete(audit, Some(&info), response).await
    }

    async fn serve<B>(
        &self,
        req: Request<B>,
        query: HashMap<String, String>,
        caller: Caller,
        audit: Option<&crate::audit::RequestAudit>,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let (parts, body) = req.into_parts();
        let info = request::parse(&parts.method, parts.uri.path(), &query);
        let format = body::negotiate(&parts.headers).unwrap_or(Format::Json);
        // Health checks must answer under load: only resource requests count.
        let permit =
            if info.is_resource { self.inflight.admit(&info.verb) } else { Ok(crate::inflight::Permit::unlimited()) };
        let admitted = match permit {
            Ok(p) => self.authenticate_and_authorize(caller, &parts.headers, &info, audit).await.map(|u| (u, p)),
            Err(e) => Err(e),
        };
        let response = match admitted {
            Err(e) => body::error(&e, format),
            Ok((user, _permit)) => {
                if let Err(e) = body::negotiate(&parts.headers)
                    && !negotiates_itself(&info, &parts.headers)
                {
                    body::error(&e, Format::Json)
                } else if crate::node_proxy::is_connect(&info) {
                    match self.connect(parts, body, &info, &query, &user).await {
                        Ok(r) => r,
                        Err(e) => body::error(&e, format),
                    }
                } else if info.is_resource {
                    let warnings = Warnings::default();
                    let annotations = audit.map(|a| &a.annotations);
                    let mut response =
                        match self.resource(&parts, body, &info, &query, &user, format, &warnings, annotations).await {
                            Ok(r) => r,
                            Err(e) => body::error(&e, format),
                        };
                    body::add_warnings(&mut response, warnings.take());
                    response
                } else {
                    // OpenAPI and aggregated discovery pick their own forms; the rest of
                    // discovery, version and health answer in JSON (or YAML).
                    let format = if negotiates_itself(&info, &parts.headers) {
                        Ok(format)
                    } else {
                        body::for_kind(&parts.headers, format, false)
                    };
                    match format {
                        Ok(format) => self.non_resource(&info, &query, &parts.headers, format).await,
                        Err(e) => body::error(&e, Format::Json),
                    }
                }
            }
        };
        let code = response.status().as_u16().to_string();
        let sub = info.subresource.clone().unwrap_or_default();
        let labels =
            [info.verb.as_str(), info.group.as_str(), info.version.as_str(), info.resource.as_str(), sub.as_str()];
        metrics::REQUESTS
            .with_label_values(&[labels[0], labels[1], labels[2], labels[3], labels[4], code.as_str()])
            .inc();
        metrics::LATENCY.with_label_values(&labels).observe(started.elapsed().as_secs_f64());
        tracing::debug!(verb = %info.verb, path = %info.path, code, elapsed_ms = started.elapsed().as_millis() as u64, "request");
        response
    }

    /// nodes/proxy and the pods' log, exec, attach and portforward: to the kubelet.
    async fn connect<B>(
        &self,
        parts: http::request::Parts,
        body: B,
        info: &RequestInfo,
        query: &HashMap<String, String>,
        user: &UserInfo,
    ) -> Result<Response<Body>, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        crate::node_proxy::NodeProxy::authorize_upgrade(info, user, self.authorizer.as_ref()).await?;
        let r = self
            .registry
            .table
            .lookup(&info.group, &info.version, &info.resource)
            .ok_or_else(ApiError::not_found_path)?;
        let verbs =
            r.subresource(info.subresource.as_deref().unwrap_or_default()).map(|s| s.verbs.clone()).unwrap_or_default();
        // Connect verbs are the HTTP method's (GET: get, POST: create...); nodes/proxy
        // passes every method on.
        if info.resource != "nodes" && !verbs.iter().any(|v| v == &info.verb) {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        let proxy =
            self.node_proxy.get().ok_or_else(|| ApiError::service_unavailable("node proxying is not set up"))?;
        proxy.serve(parts, body, info, query).await
    }

    /// Authentication, then authorization: the user the request acts as, or 401/403.
    async fn authenticate_and_authorize(
        &self,
        caller: Caller,
        headers: &http::HeaderMap,
        info: &RequestInfo,
        audit: Option<&crate::audit::RequestAudit>,
    ) -> Result<UserInfo, ApiError> {
        let authenticated = match caller {
            Caller::Trusted(user) => user,
            Caller::Remote { client_certs, .. } => {
                let creds = Credentials { client_certs: &client_certs, headers };
                match self.authenticator.authenticate(&creds).await {
                    Ok(Some(authenticated)) => authenticated.user,
                    Ok(None) if self.config.anonymous_auth => UserInfo::anonymous(),
                    Ok(None) => return Err(ApiError::unauthorized()),
                    Err(e) => {
                        tracing::debug!(error = %e, path = %info.path, "authentication failed");
                        return Err(ApiError::unauthorized());
                    }
                }
            }
        };
        // Audit names the authenticated user (its policy matches on them, as upstream)
        // and, when the request impersonates, whom it acts as.
        if let Some(a) = audit {
            a.authenticated(info, &authenticated);
        }
        let impersonating = krate_auth::authn::impersonate::requested(headers);
        let user =
            krate_auth::authn::impersonate::impersonate(authenticated, headers, self.authorizer.as_ref()).await?;
        if let Some(a) = audit
            && impersonating
        {
            a.set_impersonated_user(&user);
        }
        let attrs = info.attributes(&user);
        let decision = self.authorizer.authorize(&attrs).await;
        if let Some(a) = audit {
            match &decision {
                Decision::Allow => a.authorized(true, ""),
                Decision::Deny(reason) | Decision::NoOpinion(reason) => a.authorized(false, reason),
            }
        }
        match decision {
            Decision::Allow => Ok(user),
            Decision::Deny(reason) | Decision::NoOpinion(reason) => {
                Err(ApiError::forbidden(authz::forbidden_message(&attrs, &reason)))
            }
        }
    }

    async fn checks(&self, endpoint: &str) -> Vec<health::Check> {
        let store = match tokio::time::timeout(Duration::from_secs(2), self.registry.store.current_revision()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("timed out".into()),
        };
        let mut checks =
            vec![health::Check { name: "ping", result: Ok(()) }, health::Check { name: "log", result: Ok(()) }];
        checks.push(health::Check { name: "etcd", result: store });
        let extra = self.extra_checks.read().clone();
        for e in extra {
            checks.extend(e.checks().await);
        }
        if endpoint == "readyz" {
            let ready = if self.ready.load(Ordering::SeqCst) { Ok(()) } else { Err("starting".into()) };
            checks.push(health::Check { name: "poststarthook/start-system-namespaces", result: ready });
            checks.push(health::Check { name: "shutdown", result: Ok(()) });
        }
        checks
    }

    async fn non_resource(
        &self,
        info: &RequestInfo,
        query: &HashMap<String, String>,
        headers: &http::HeaderMap,
        format: Format,
    ) -> Response<Body> {
        let path = info.path.trim_end_matches('/');
        let not_found = || body::error(&ApiError::not_found_path(), format);
        if info.verb != "get" && info.verb != "head" {
            return body::error(
                &ApiError::method_not_allowed("the server does not allow this method on the requested resource"),
                format,
            );
        }
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            [ep @ ("healthz" | "livez" | "readyz")] => health::respond(ep, None, &self.checks(ep).await, query),
            [ep @ ("healthz" | "livez" | "readyz"), check] => {
                health::respond(ep, Some(check), &self.checks(ep).await, query)
            }
            ["version"] => body::respond(StatusCode::OK, format, &health::version_info()),
            [".well-known", "openid-configuration"] | ["openid", "v1", "jwks"] => match self.oidc.get() {
                Some(d) if segments[0] == "openid" => oidc_document(d.jwks(), oidc::JWKS_CONTENT_TYPE),
                Some(d) => oidc_document(d.configuration(), "application/json"),
                None => not_found(),
            },
            ["metrics"] => body::text(StatusCode::OK, metrics::render()),
            ["api" | "apis"] if let Some(v) = discovery::aggregated_version(headers) => {
                let doc = discovery::aggregated(&self.registry.table, segments[0] == "api", v);
                let bytes = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
                let etag = crate::conditional::hash(&bytes);
                let ct = discovery::aggregated_content_type(v);
                crate::conditional::respond(headers, &etag, bytes, &ct, "no-cache, private")
            }
            // The same URLs answer the aggregated form: caches must key on Accept.
            ["api"] => vary_accept(body::respond(
                StatusCode::OK,
                format,
                &discovery::api_versions(&self.config.advertise_address),
            )),
            ["apis"] => {
                vary_accept(body::respond(StatusCode::OK, format, &discovery::api_group_list(&self.registry.table)))
            }
            ["openapi", rest @ ..] => {
                // Building a document takes a while (all of /openapi/v2: hundreds of ms):
                // off the async workers.
                let (api, table) = (self.openapi.clone(), self.registry.table.clone());
                let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
                let (headers, query) = (headers.clone(), query.clone());
                let built = tokio::task::spawn_blocking(move || {
                    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
                    api.serve(&table, &rest, &headers, &query)
                });
                match built.await {
                    Ok(response) => response,
                    Err(e) => {
                        body::error(&ApiError::internal(format!("building the OpenAPI document failed: {e}")), format)
                    }
                }
            }
            ["api", version] => match discovery::api_resource_list(&self.registry.table, "", version) {
                Some(doc) => body::respond(StatusCode::OK, format, &doc),
                None => not_found(),
            },
            ["apis", group] => match discovery::api_group(&self.registry.table, group) {
                Some(doc) => body::respond(StatusCode::OK, format, &doc),
                None => not_found(),
            },
            ["apis", group, version] => match discovery::api_resource_list(&self.registry.table, group, version) {
                Some(doc) => body::respond(StatusCode::OK, format, &doc),
                None => not_found(),
            },
            _ => not_found(),
        }
    }

    #[allow(clippy::too_many_arguments)] // the parts of one request, taken apart once by `serve`
    async fn resource<B>(
        &self,
        parts: &http::request::Parts,
        body: B,
        info: &RequestInfo,
        query: &HashMap<String, String>,
        user: &UserInfo,
        format: Format,
        warnings: &Warnings,
        audit_annotations: Option<&krate_api::audit::AuditAnnotations>,
    ) -> Result<Response<Body>, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let r = self
            .registry
            .table
            .lookup(&info.group, &info.version, &info.resource)
            .ok_or_else(ApiError::not_found_path)?;
        if info.namespace.is_some() && !r.namespaced {
            return Err(ApiError::not_found_path());
        }
        if let Some(sub) = &info.subresource
            && r.subresource(sub).is_none()
        {
            return Err(ApiError::not_found_path());
        }
        let verbs: &[String] = match &info.subresource {
            Some(sub) => &r.subresource(sub).map(|s| s.verbs.clone()).unwrap_or_default(),
            None => &r.verbs,
        };
        // A namespaced object is created, read or changed within a namespace.
        let needs_namespace =
            r.namespaced && info.namespace.is_none() && !matches!(info.verb.as_str(), "list" | "watch");
        if !verbs.contains(&info.verb) || needs_namespace {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        let scope = Scope { resource: r.clone(), namespace: info.namespace.clone() };
        let protobuf = krate_api::protobuf::supports(&r.group, &r.version, &r.kind);
        let format = body::for_kind(&parts.headers, format, protobuf)?;
        let dry_run = match query.get("dryRun").map(String::as_str) {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "Unsupported value: \"{other}\": supported values: \"All\""
                )));
            }
        };
        let field_validation = FieldValidation::parse(query.get("fieldValidation").map(String::as_str))?;
        let user_agent = parts.headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok());
        let manager_name = managedfields::manager_name(query.get("fieldManager").map(String::as_str), user_agent)?;
        let update_manager = manager_name.map(|name| FieldManager { name, operation: ManagedOperation::Update });
        let ctx = Context {
            user,
            admission: self.admission.as_ref(),
            dry_run,
            field_validation,
            duplicate_fields: &[],
            warnings: Some(warnings),
            field_manager: update_manager.as_ref(),
            audit_annotations,
        };
        let force = match query.get("force").map(String::as_str) {
            None => None,
            Some("true" | "1") => Some(true),
            Some("false" | "0") => Some(false),
            Some(other) => return Err(ApiError::bad_request(format!("invalid force: {other}"))),
        };
        // Server-side apply records under the fieldManager the request names (required).
        let apply_manager = query
            .get("fieldManager")
            .map(|name| FieldManager { name: name.clone(), operation: ManagedOperation::Apply });
        let name = info.name.as_deref().unwrap_or("");
        let sub = info.subresource.as_deref();
        if info.verb == "create" {
            if let Some(handler) = self.computed_handler(&r, sub) {
                let mut obj = body::decode(&parts.headers, &body::read(body).await?)?;
                // As upstream: computed creates (token requests, evictions, reviews) pass
                // admission too; NodeRestriction limits a node's token requests here.
                let attrs = admission::Attributes {
                    operation: admission::Operation::Create,
                    resource: &r,
                    subresource: sub,
                    namespace: info.namespace.as_deref(),
                    name,
                    user,
                    dry_run,
                    warnings: Some(warnings),
                    audit_annotations,
                };
                self.admission.mutate(&attrs, &mut obj, None).await?;
                self.admission.validate(&attrs, Some(&obj), None).await?;
                let req = ComputedRequest {
                    resource: &r,
                    name,
                    subresource: sub,
                    namespace: info.namespace.as_deref(),
                    user,
                    dry_run,
                };
                let answer = handler.create(&req, obj).await?;
                return Ok(body::respond(StatusCode::CREATED, format, &answer));
            }
            if r.is_virtual() {
                return Err(ApiError::method_not_allowed(format!(
                    "{} are not available yet in this version of krate",
                    r.plural
                )));
            }
        }
        match (info.verb.as_str(), sub) {
            ("get", None) => {
                let obj = self.registry.get(&scope, name).await?;
                if format == Format::Table {
                    let rv = krate_api::object::meta_str(&obj, "resourceVersion").map(String::from);
                    let table = krate_api::table::table_of(&r, &[obj], rv.as_deref(), include_object(query));
                    return Ok(body::respond(StatusCode::OK, format, &table));
                }
                if format == Format::Metadata {
                    return Ok(body::respond(StatusCode::OK, format, &body::partial_metadata(&obj)));
                }
                Ok(body::respond(StatusCode::OK, format, &obj))
            }
            ("list", None) => {
                let opts = list_options(query)?;
                let list = self.registry.list(&scope, &opts).await?;
                if format == Format::Table {
                    let objects: Vec<Value> =
                        list.items.iter().filter_map(|i| serde_json::from_slice(i).ok()).collect();
                    let rv = list.revision.to_string();
                    let mut table = krate_api::table::table_of(&r, &objects, Some(&rv), include_object(query));
                    if let Some(c) = &list.continue_token {
                        table["metadata"]["continue"] = json!(c);
                    }
                    if let Some(n) = list.remaining_item_count {
                        table["metadata"]["remainingItemCount"] = json!(n);
                    }
                    return Ok(body::respond(StatusCode::OK, format, &table));
                }
                if format == Format::Metadata {
                    return Ok(body::respond(StatusCode::OK, format, &partial_metadata_list(&list)));
                }
                Ok(body::respond_bytes(StatusCode::OK, format, list_json(&r, &list)))
            }
            ("watch", None) => self.watch(&scope, query, format).await,
            // The legacy bindings resource binds the pod of the same name.
            ("create", None) if r.group.is_empty() && r.plural == "bindings" => {
                let binding = body::decode(&parts.headers, &body::read(body).await?)?;
                let pod = krate_api::object::name(&binding).to_string();
                let pods = self.registry.table.lookup("", "v1", "pods").ok_or_else(ApiError::not_found_path)?;
                self.bind(&Scope { resource: pods, namespace: scope.namespace.clone() }, &pod, &binding, &ctx).await
            }
            ("create", None) => {
                let bytes = body::read(body).await?;
                let obj = body::decode(&parts.headers, &bytes)?;
                let dups = body::duplicate_fields(&parts.headers, &bytes, field_validation);
                let created = self.registry.create(&scope, obj, &Context { duplicate_fields: &dups, ..ctx }).await?;
                Ok(body::respond(StatusCode::CREATED, format, &created))
            }
            ("update", None) => {
                let bytes = body::read(body).await?;
                let obj = body::decode(&parts.headers, &bytes)?;
                let dups = body::duplicate_fields(&parts.headers, &bytes, field_validation);
                let ctx = Context { duplicate_fields: &dups, ..ctx };
                let (obj, created) = self.registry.update(&scope, name, obj, sub, &ctx).await?;
                let code = if created { StatusCode::CREATED } else { StatusCode::OK };
                Ok(body::respond(code, format, &obj))
            }
            ("patch", None) => {
                let bytes = body::read(body).await?;
                let patch = decode_patch(&parts.headers, &bytes, force)?;
                self.patch(&scope, name, patch, None, ctx, apply_manager.as_ref(), format).await
            }
            ("delete", None) => {
                let bytes = body::read(body).await?;
                let (opts, body_dry_run) = delete_options(query, &parts.headers, &bytes)?;
                let ctx = Context { dry_run: ctx.dry_run || body_dry_run, ..ctx };
                match self.registry.delete(&scope, name, &opts, &ctx).await? {
                    Deleted::Now(obj) => Ok(body::respond(StatusCode::OK, format, &success_status(&r, &obj))),
                    Deleted::Pending(obj) => Ok(body::respond(StatusCode::ACCEPTED, format, &obj)),
                }
            }
            ("deletecollection", None) => {
                let bytes = body::read(body).await?;
                let (opts, body_dry_run) = delete_options(query, &parts.headers, &bytes)?;
                let ctx = Context { dry_run: ctx.dry_run || body_dry_run, ..ctx };
                let list = self.registry.delete_collection(&scope, &list_options(query)?, &opts, &ctx).await?;
                Ok(body::respond_bytes(StatusCode::OK, format, list_json(&r, &list)))
            }
            ("get", Some(sub)) if r.strategy.subresource_fields(sub).is_some() => {
                Ok(body::respond(StatusCode::OK, format, &self.registry.get(&scope, name).await?))
            }
            ("update", Some(sub)) if r.strategy.subresource_fields(sub).is_some() && sub != "binding" => {
                let obj = body::decode(&parts.headers, &body::read(body).await?)?;
                let (obj, _) = self.registry.update(&scope, name, obj, Some(sub), &ctx).await?;
                Ok(body::respond(StatusCode::OK, format, &obj))
            }
            ("patch", Some(sub)) if r.strategy.subresource_fields(sub).is_some() && sub != "binding" => {
                let bytes = body::read(body).await?;
                let patch = decode_patch(&parts.headers, &bytes, force)?;
                self.patch(&scope, name, patch, Some(sub), ctx, apply_manager.as_ref(), format).await
            }
            ("create", Some("binding")) => {
                let binding = body::decode(&parts.headers, &body::read(body).await?)?;
                self.bind(&scope, name, &binding, &ctx).await
            }
            ("get", Some("scale")) => {
                Ok(body::respond(StatusCode::OK, format, &self.registry.get_scale(&scope, name).await?))
            }
            ("update", Some("scale")) => {
                let wanted = body::decode(&parts.headers, &body::read(body).await?)?;
                check_scale_kind(&wanted)?;
                let scale = self.registry.update_scale(&scope, name, |_| Ok(wanted.clone()), &ctx).await?;
                Ok(body::respond(StatusCode::OK, format, &scale))
            }
            ("patch", Some("scale")) => {
                let bytes = body::read(body).await?;
                let patch = decode_patch(&parts.headers, &bytes, force)?;
                let scale =
                    self.registry.update_scale(&scope, name, |current| apply_patch(current, &patch), &ctx).await?;
                Ok(body::respond(StatusCode::OK, format, &scale))
            }
            (verb, Some(sub)) => Err(ApiError::method_not_allowed(format!(
                "{}/{sub} ({verb}) is not available yet in this version of krate",
                r.plural
            ))),
            (verb, None) => Err(ApiError::method_not_allowed(format!("{verb} is not supported on {}", r.plural))),
        }
    }

    /// PATCH of an object or a subresource; an apply patch returns 201 when it created.
    #[allow(clippy::too_many_arguments)] // the parts of one request
    async fn patch(
        &self,
        scope: &Scope,
        name: &str,
        patch: Patch,
        sub: Option<&str>,
        ctx: Context<'_>,
        apply_manager: Option<&FieldManager>,
        format: Format,
    ) -> Result<Response<Body>, ApiError> {
        if let Patch::Apply { config, force } = patch {
            let ctx = Context { field_manager: apply_manager, ..ctx };
            let (obj, created) = self.registry.apply(scope, name, config, force, sub, &ctx).await?;
            let code = if created { StatusCode::CREATED } else { StatusCode::OK };
            return Ok(body::respond(code, format, &obj));
        }
        let obj = self.registry.patch(scope, name, patch, sub, &ctx).await?;
        Ok(body::respond(StatusCode::OK, format, &obj))
    }

    async fn bind(
        &self,
        pods: &Scope,
        pod: &str,
        binding: &Value,
        ctx: &Context<'_>,
    ) -> Result<Response<Body>, ApiError> {
        self.registry.bind(pods, pod, binding, ctx).await?;
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
        Ok(body::respond(StatusCode::CREATED, Format::Json, &status))
    }

    async fn watch(
        &self,
        scope: &Scope,
        query: &HashMap<String, String>,
        format: Format,
    ) -> Result<Response<Body>, ApiError> {
        let (table, protobuf, metadata) =
            (format == Format::Table, format == Format::Protobuf, format == Format::Metadata);
        let opts = WatchOptions {
            label_selector: query.get("labelSelector").cloned(),
            field_selector: query.get("fieldSelector").cloned(),
            resource_version: query.get("resourceVersion").cloned(),
            allow_bookmarks: query.get("allowWatchBookmarks").is_some_and(|v| v == "true" || v == "1"),
            send_initial_events: match query.get("sendInitialEvents").map(String::as_str) {
                Some("true" | "1") => Some(true),
                Some("false" | "0") => Some(false),
                _ => None,
            },
        };
        if opts.send_initial_events.is_some()
            && query.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan")
        {
            return Err(ApiError::invalid(
                &krate_api::Target::default(),
                vec![krate_api::Cause::forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )],
            ));
        }
        let timeout = match query.get("timeoutSeconds") {
            Some(s) => Duration::from_secs(
                s.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {s}")))?,
            ),
            None => MIN_REQUEST_TIMEOUT + Duration::from_secs(rand_secs(MIN_REQUEST_TIMEOUT.as_secs())),
        };
        let events = self.registry.watch(scope, &opts).await?;
        let r = &scope.resource;
        let gauge =
            metrics::WATCHES.with_label_values(&["watch", r.group.as_str(), r.version.as_str(), r.plural.as_str()]);
        gauge.inc();
        let guard = GaugeGuard(gauge);
        let deadline = tokio::time::sleep(timeout);
        let (resource, include) = (r.clone(), include_object(query).to_string());
        // Events already waiting for a slow watcher leave as one DATA frame.
        let frames = events
            .ready_chunks(WATCH_BATCH)
            .map(move |items| {
                let mut lines = items.into_iter().map(|item| {
                    if protobuf {
                        return protobuf_frame(&item);
                    }
                    // As a Table, each object event carries a one-row table.
                    if table
                        && matches!(item.kind, "ADDED" | "MODIFIED" | "DELETED")
                        && let Ok(obj) = serde_json::from_slice::<Value>(&item.object)
                    {
                        let rv = krate_api::object::meta_str(&obj, "resourceVersion").map(String::from);
                        let t = krate_api::table::table_of(&resource, &[obj], rv.as_deref(), &include);
                        return krate_api::cache::watch_line(item.kind, t.to_string().as_bytes());
                    }
                    if metadata
                        && item.kind != "ERROR"
                        && let Ok(obj) = serde_json::from_slice::<Value>(&item.object)
                    {
                        let partial = body::partial_metadata(&obj);
                        return krate_api::cache::watch_line(item.kind, partial.to_string().as_bytes());
                    }
                    item.json_line()
                });
                let data = match lines.len() {
                    1 => lines.next().unwrap_or_default(),
                    _ => {
                        let mut buf = BytesMut::new();
                        lines.for_each(|l| buf.extend_from_slice(&l));
                        buf.freeze()
                    }
                };
                Ok::<_, std::io::Error>(Frame::data(data))
            })
            .take_until(deadline)
            .chain(futures::stream::once(async move {
                drop(guard);
                Ok(Frame::data(Bytes::new()))
            }));
        let body = BodyExt::boxed(StreamBody::new(frames));
        Ok(Response::builder()
            .status(StatusCode::OK)
            .header(
                header::CONTENT_TYPE,
                if protobuf { krate_api::protobuf::WATCH_MEDIA_TYPE } else { "application/json" },
            )
            .header("cache-control", "no-cache, private")
            .body(body)
            .expect("static headers are valid"))
    }
}

/// One event of a protobuf watch stream (length-prefixed WatchEvent).
fn protobuf_frame(item: &krate_api::registry::WatchItem) -> Bytes {
    let frame = serde_json::from_slice::<Value>(&item.object)
        .map_err(|e| e.to_string())
        .and_then(|obj| krate_api::protobuf::watch_frame(item.kind, &obj).map_err(|e| e.to_string()));
    match frame {
        Ok(f) => Bytes::from(f),
        Err(e) => {
            tracing::warn!(error = %e, "a watch event has no protobuf encoding; skipped");
            Bytes::new()
        }
    }
}

struct GaugeGuard(prometheus::IntGauge);
impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn rand_secs(max: u64) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now()) % max.max(1)
}

/// includeObject for Tables: None, Metadata (the default) or Object.
fn include_object(query: &HashMap<String, String>) -> &str {
    match query.get("includeObject").map(String::as_str) {
        Some("None") => "None",
        Some("Object") => "Object",
        _ => "Metadata",
    }
}

fn list_options(query: &HashMap<String, String>) -> Result<ListOptions, ApiError> {
    let limit = match query.get("limit").map(String::as_str) {
        None | Some("") => 0,
        Some(s) => s.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid limit: {s}")))?.max(0) as usize,
    };
    Ok(ListOptions {
        label_selector: query.get("labelSelector").cloned(),
        field_selector: query.get("fieldSelector").cloned(),
        limit,
        continue_token: query.get("continue").filter(|s| !s.is_empty()).cloned(),
        resource_version: query.get("resourceVersion").cloned(),
        resource_version_match: query.get("resourceVersionMatch").cloned(),
    })
}

/// DeleteOptions from the body and the query, and whether the body asks for a dry run
/// (clients send dryRun in either place).
fn delete_options(
    query: &HashMap<String, String>,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Result<(DeleteOptions, bool), ApiError> {
    let mut opts = DeleteOptions::default();
    let mut dry_run = false;
    if !body.is_empty() {
        let v = body::decode(headers, body)?;
        for item in v.get("dryRun").and_then(Value::as_array).into_iter().flatten() {
            match item.as_str() {
                Some("All") => dry_run = true,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "Unsupported value: \"{}\": supported values: \"All\"",
                        other.unwrap_or_default()
                    )));
                }
            }
        }
        opts.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        opts.propagation_policy = v.get("propagationPolicy").and_then(Value::as_str).map(String::from);
        if v.get("orphanDependents") == Some(&Value::Bool(true)) && opts.propagation_policy.is_none() {
            opts.propagation_policy = Some("Orphan".into());
        }
        opts.precondition_uid = v.pointer("/preconditions/uid").and_then(Value::as_str).map(String::from);
        opts.precondition_resource_version =
            v.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(String::from);
    }
    if let Some(g) = query.get("gracePeriodSeconds") {
        opts.grace_period_seconds =
            Some(g.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g}")))?);
    }
    if let Some(p) = query.get("propagationPolicy") {
        opts.propagation_policy = Some(p.clone());
    }
    if query.get("orphanDependents").is_some_and(|v| v == "true") && opts.propagation_policy.is_none() {
        opts.propagation_policy = Some("Orphan".into());
    }
    Ok((opts, dry_run))
}

fn decode_patch(headers: &http::HeaderMap, bytes: &[u8], force: Option<bool>) -> Result<Patch, ApiError> {
    let ct = body::content_type(headers);
    let parse = || -> Result<Value, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
    };
    if force.is_some() && ct != "application/apply-patch+yaml" {
        return Err(ApiError::invalid(
            &krate_api::Target::new("meta.k8s.io", "", "PatchOptions", ""),
            vec![krate_api::Cause::forbidden("force", "may not be specified for non-apply patch")],
        ));
    }
    match ct.as_str() {
        "application/json-patch+json" => {
            let v = parse()?;
            if !v.is_array() {
                return Err(ApiError::bad_request("a JSON patch must be a JSON array of operations"));
            }
            Ok(Patch::Json(v))
        }
        "application/merge-patch+json" => Ok(Patch::Merge(parse()?)),
        "application/strategic-merge-patch+json" => Ok(Patch::Strategic(parse()?)),
        "application/apply-patch+yaml" => {
            let config: Value = serde_yaml_ng::from_slice(bytes)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            Ok(Patch::Apply { config, force: force.unwrap_or(false) })
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other})"
        ))),
    }
}

fn check_scale_kind(v: &Value) -> Result<(), ApiError> {
    match (v.get("apiVersion").and_then(Value::as_str), v.get("kind").and_then(Value::as_str)) {
        (None | Some("autoscaling/v1"), None | Some("Scale")) => Ok(()),
        (a, k) => Err(ApiError::bad_request(format!(
            "the scale subresource takes an autoscaling/v1 Scale, got {} {}",
            a.unwrap_or(""),
            k.unwrap_or("")
        ))),
    }
}

fn apply_patch(current: &Value, patch: &Patch) -> Result<Value, ApiError> {
    krate_api::registry::apply_patch(current, patch, krate_api::schema::kind_definition("autoscaling", "v1", "Scale"))
}

/// The JSON of a list, assembled from the items' stored JSON without re-encoding them.
/// A list as meta.k8s.io/v1 PartialObjectMetadataList.
fn partial_metadata_list(list: &krate_api::registry::ListResult) -> Value {
    let mut meta = json!({"resourceVersion": list.revision.to_string()});
    if let Some(c) = &list.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(n) = list.remaining_item_count {
        meta["remainingItemCount"] = json!(n);
    }
    let items: Vec<Value> = list
        .items
        .iter()
        .filter_map(|i| serde_json::from_slice::<Value>(i).ok())
        .map(|obj| body::partial_metadata(&obj))
        .collect();
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items})
}

fn list_json(r: &ResourceInfo, list: &krate_api::registry::ListResult) -> Bytes {
    let mut meta = json!({"resourceVersion": list.revision.to_string()});
    if let Some(c) = &list.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(n) = list.remaining_item_count {
        meta["remainingItemCount"] = json!(n);
    }
    let head = json!({"kind": format!("{}List", r.kind), "apiVersion": r.api_version(), "metadata": meta}).to_string();
    let mut out = Vec::with_capacity(head.len() + list.items.iter().map(|i| i.len() + 1).sum::<usize>() + 16);
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in list.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}

fn success_status(r: &ResourceInfo, obj: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": krate_api::object::name(obj),
            "group": r.group,
            "kind": r.plural,
            "uid": krate_api::object::meta_str(obj, "uid").unwrap_or(""),
        },
    })
}

fn oidc_document(bytes: &[u8], content_type: &'static str) -> Response<Body> {
    let mut response = body::respond_bytes(StatusCode::OK, Format::Json, Bytes::copy_from_slice(bytes));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, http::HeaderValue::from_static(oidc::CACHE_CONTROL));
    response
}

/// For tower/hyper glue: the server never fails a request at the transport level.
pub type Never = Infallible;
