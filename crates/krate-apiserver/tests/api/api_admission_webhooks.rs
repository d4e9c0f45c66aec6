//! Dynamic admission webhooks over HTTPS: a real webhook server (rustls + hyper, its
//! own CA given as caBundle) started by each test; the API server calls it with
//! AdmissionReviews. Covers refusals with upstream's message, JSONPatch mutation then
//! validation, object and namespace selectors, failurePolicy with the webhook down,
//! timeouts, dry runs, warnings, reinvocation, Service references, and the
//! configurations' own validation.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use serde_json::{Value, json};

use crate::common::TestServer;

/// What the test webhook answers: the AdmissionReview response (uid filled in), after
/// an optional delay.
struct Reply {
    delay: Duration,
    response: Value,
}

type Handler = dyn Fn(&str, &Value) -> Reply + Send + Sync;

/// A webhook server: HTTPS on 127.0.0.1 with a certificate of its own CA, valid for
/// `localhost`, 127.0.0.1 and the given extra names.
struct Webhook {
    addr: SocketAddr,
    ca_pem: String,
    /// Each request's path and AdmissionReview, in order.
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Webhook {
    async fn start(names: &[&str], handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static) -> Webhook {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::from_ca_cert_pem(&ca.pem(), &ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names =
            vec![SanType::DnsName("localhost".try_into().unwrap()), SanType::IpAddress("127.0.0.1".parse().unwrap())];
        for n in names {
            params.subject_alt_names.push(SanType::DnsName(n.to_string().try_into().unwrap()));
        }
        let cert = params.signed_by(&key, &issuer).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else { return };
                    let (acceptor, seen, handler) = (acceptor.clone(), seen.clone(), handler.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else { return };
                        let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                            let (seen, handler) = (seen.clone(), handler.clone());
                            async move {
                                let path = req.uri().path().to_string();
                                let query = req.uri().query().unwrap_or("").to_string();
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let review: Value = serde_json::from_slice(&body).unwrap();
                                seen.lock().push((format!("{path}?{query}"), review.clone()));
                                let reply = handler(&path, &review);
                                tokio::time::sleep(reply.delay).await;
                                let mut response = reply.response;
                                response["uid"] = review["request"]["uid"].clone();
                                let answer = json!({"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                                                    "response": response});
                                Ok::<_, std::convert::Infallible>(
                                    http::Response::builder()
                                        .header("content-type", "application/json")
                                        .body(Full::new(bytes::Bytes::from(serde_json::to_vec(&answer).unwrap())))
                                        .unwrap(),
                                )
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            })
        };
        Webhook { addr, ca_pem: ca.pem(), seen, task }
    }

    fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    fn seen(&self) -> Vec<(String, Value)> {
        self.seen.lock().clone()
    }

    fn calls_to(&self, path: &str) -> Vec<Value> {
        self.seen().into_iter().filter(|(p, _)| p.starts_with(path)).map(|(_, r)| r).collect()
    }
}

fn allow() -> Reply {
    Reply { delay: Duration::ZERO, response: json!({"allowed": true}) }
}

fn patch(ops: Value) -> Reply {
    let p = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&ops).unwrap());
    Reply { delay: Duration::ZERO, response: json!({"allowed": true, "patchType": "JSONPatch", "patch": p}) }
}

/// One webhook entry for a configuration.
fn hook(name: &str, client_config: Value, resources: &[&str], extra: Value) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": resources}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        h[k] = v.clone();
    }
    h
}

async fn send(client: &kube::Client, method: &str, uri: &str, body: Option<&Value>) -> (u16, Vec<String>, Value) {
    let content_type = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default())
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    let code = resp.status().as_u16();
    let warnings = resp.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, warnings, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn configure(client: &kube::Client, mutating: bool, name: &str, webhooks: Vec<Value>) {
    let (plural, kind) = if mutating {
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration")
    } else {
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration")
    };
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                      "metadata": {"name": name}, "webhooks": webhooks});
    let (code, _, out) =
        send(client, "POST", &format!("/apis/admissionregistration.k8s.io/v1/{plural}"), Some(&body)).await;
    assert_eq!(code, 201, "{out}");
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

/// A ConfigMap with a generated name.
fn generated(labels: Value) -> Value {
    let mut cm = configmap("", labels);
    cm["metadata"].as_object_mut().unwrap().remove("name");
    cm["metadata"]["generateName"] = json!("cm-");
    cm
}

/// Creates ConfigMap probes until `done` holds for the answer (the configuration reaches
/// the server's cache shortly after it is written), within 10 s.
async fn until(
    client: &kube::Client,
    ns: &str,
    what: &str,
    done: impl Fn(u16, &Value) -> bool,
) -> (u16, Vec<String>, Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let probe = generated(json!({}));
        let answer = send(client, "POST", &format!("/api/v1/namespaces/{ns}/configmaps"), Some(&probe)).await;
        if done(answer.0, &answer.2) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{what}: last answer {} {}", answer.0, answer.2);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_cm(client: &kube::Client, ns: &str, cm: &Value) -> (u16, Vec<String>, Value) {
    send(client, "POST", &format!("/api/v1/namespaces/{ns}/configmaps"), Some(cm)).await
}

#[tokio::test]
async fn validating_webhooks_refuse_with_their_message_and_see_the_request() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&[], |_, review| {
        let name = review["request"]["object"]["metadata"]["name"].as_str().unwrap_or("").to_string();
        if name.starts_with("forbidden") {
            Reply {
                delay: Duration::ZERO,
                response: json!({"allowed": false, "warnings": ["checked by the test webhook"],
                                 "status": {"code": 403, "reason": "Forbidden", "message": format!("{name} is not allowed")}}),
            }
        } else {
            Reply {
                delay: Duration::ZERO,
                response: json!({"allowed": true, "warnings": ["checked by the test webhook"],
                                 "auditAnnotations": {"decision": "allowed"}}),
            }
        }
    })
    .await;
    let cc = json!({"url": hook_server.url("/validate"), "caBundle": hook_server.ca_bundle()});
    configure(&client, false, "deny", vec![hook("deny.example.com", cc, &["configmaps"], json!({}))]).await;
    until(&client, "default", "webhook effective", |_, _| !hook_server.seen().is_empty()).await;

    let (code, warnings, status) = create_cm(&client, "default", &configmap("forbidden-one", json!({}))).await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "admission webhook \"deny.example.com\" denied the request: forbidden-one is not allowed"
    );
    assert_eq!(warnings, vec!["299 - \"checked by the test webhook\"".to_string()]);

    let (code, warnings, _) = create_cm(&client, "default", &configmap("fine", json!({}))).await;
    assert_eq!((code, warnings.len()), (201, 1));

    // The AdmissionReview carries the request as upstream sends it.
    let (path, review) = hook_server.seen().into_iter().last().unwrap();
    assert_eq!(path, "/validate?timeout=10s");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    let r = &review["request"];
    assert_eq!(r["operation"], "CREATE");
    assert_eq!(r["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(r["resource"], json!({"group": "", "version": "v1", "resource": "configmaps"}));
    assert_eq!((r["namespace"].as_str(), r["name"].as_str()), (Some("default"), Some("fine")));
    assert_eq!(r["userInfo"]["username"], "system:admin");
    assert_eq!(r["options"]["kind"], "CreateOptions");
    assert_eq!(r["dryRun"], false);
    assert!(r["object"]["metadata"]["uid"].is_string(), "validating webhooks see the prepared object");
    assert!(r["oldObject"].is_null());

    // Updates and deletes send the old object too.
    let (code, _, _) =
        send(&client, "PATCH", "/api/v1/namespaces/default/configmaps/fine", Some(&json!({"data": {"k": "w"}}))).await;
    assert_eq!(code, 200);
    let (_, review) = hook_server.seen().into_iter().last().unwrap();
    assert_eq!(review["request"]["operation"], "UPDATE");
    assert_eq!(review["request"]["oldObject"]["data"]["k"], "v");
    assert_eq!(review["request"]["object"]["data"]["k"], "w");
    let (code, _, _) = send(&client, "DELETE", "/api/v1/namespaces/default/configmaps/fine", None).await;
    assert_eq!(code, 200);
    let (_, review) = hook_server.seen().into_iter().last().unwrap();
    assert_eq!(review["request"]["operation"], "DELETE");
    assert_eq!(review["request"]["options"]["kind"], "DeleteOptions");
    assert!(review["request"]["object"].is_null());
    assert_eq!(review["request"]["oldObject"]["metadata"]["name"], "fine");
}

#[tokio::test]
async fn mutating_webhook_patches_are_applied_then_validated() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&[], |_, review| {
        let name = review["request"]["object"]["metadata"]["name"].as_str().unwrap_or("");
        if name == "broken" {
            // A label value the API server's validation refuses.
            patch(json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "not a valid value!"}}]))
        } else {
            patch(json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}},
                         {"op": "add", "path": "/data/added", "value": "by-webhook"}]))
        }
    })
    .await;
    let cc = json!({"url": hook_server.url("/mutate"), "caBundle": hook_server.ca_bundle()});
    configure(&client, true, "mutate", vec![hook("mutate.example.com", cc, &["configmaps"], json!({}))]).await;
    until(&client, "default", "webhook effective", |_, cm| cm["metadata"]["labels"]["mutated"] == "yes").await;

    let (code, _, cm) = create_cm(&client, "default", &configmap("plain", json!({}))).await;
    assert_eq!(code, 201, "{cm}");
    assert_eq!(cm["metadata"]["labels"]["mutated"], "yes");
    assert_eq!(cm["data"]["added"], "by-webhook");
    // Mutating webhooks see the object as the client sent it, before the server prepared it.
    let review = hook_server.calls_to("/mutate").pop().unwrap();
    assert!(review["request"]["object"]["metadata"]["uid"].is_null());

    let (code, _, status) = create_cm(&client, "default", &configmap("broken", json!({}))).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "metadata.labels");
}

#[tokio::test]
async fn object_and_namespace_selectors_choose_the_requests() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&[], |_, _| Reply {
        delay: Duration::ZERO,
        response: json!({"allowed": false, "status": {"message": "selected"}}),
    })
    .await;
    for (ns, labels) in [("watched", json!({"webhooks": "on"})), ("ignored", json!({}))] {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}});
        assert_eq!(send(&client, "POST", "/api/v1/namespaces", Some(&body)).await.0, 201);
    }
    let cc = json!({"url": hook_server.url("/v"), "caBundle": hook_server.ca_bundle()});
    let extra = json!({"namespaceSelector": {"matchLabels": {"webhooks": "on"}},
                       "objectSelector": {"matchExpressions": [{"key": "checked", "operator": "Exists"}]}});
    configure(&client, false, "selective", vec![hook("selective.example.com", cc, &["configmaps"], extra)]).await;
    // Wait until the configuration is in force: a selected object is refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _, _) = create_cm(&client, "watched", &generated(json!({"checked": "1"}))).await;
        if code == 400 {
            break;
        }
        assert!(Instant::now() < deadline, "the webhook never took effect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cm = generated(json!({"checked": "1"}));

    let (code, _, status) = create_cm(&client, "watched", &cm).await;
    assert_eq!(code, 400, "no code from the webhook: 400");
    assert_eq!(status["message"], "admission webhook \"selective.example.com\" denied the request: selected");
    let calls = hook_server.seen().len();
    // Not selected: the namespace lacks the label, or the object lacks its label.
    assert_eq!(create_cm(&client, "ignored", &cm).await.0, 201);
    assert_eq!(create_cm(&client, "watched", &configmap("unlabelled", json!({}))).await.0, 201);
    assert_eq!(hook_server.seen().len(), calls, "unselected requests never reach the webhook");
}

#[tokio::test]
async fn failure_policy_decides_when_the_webhook_cannot_be_reached() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cc = json!({"url": format!("https://127.0.0.1:{port}/down")});
    let extra = json!({"failurePolicy": "Ignore", "namespaceSelector": {"matchLabels": {"policy": "ignore"}}});
    let ignoring = hook("ignore.example.com", cc.clone(), &["configmaps"], extra);
    let extra = json!({"failurePolicy": "Fail", "namespaceSelector": {"matchLabels": {"policy": "fail"}}});
    let failing = hook("fail.example.com", cc, &["configmaps"], extra);
    for (ns, policy) in [("lenient", "ignore"), ("strict", "fail")] {
        let body =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"policy": policy}}});
        assert_eq!(send(&client, "POST", "/api/v1/namespaces", Some(&body)).await.0, 201);
    }
    configure(&client, false, "down", vec![ignoring, failing]).await;

    let (_, _, status) = until(&client, "strict", "failing webhook effective", |code, _| code == 500).await;
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(
        status["message"],
        format!(
            "Internal error occurred: failed calling webhook \"fail.example.com\": failed to call webhook: \
             Post \"https://127.0.0.1:{port}/down?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    assert_eq!(create_cm(&client, "lenient", &configmap("passes", json!({}))).await.0, 201);
}

#[tokio::test]
async fn slow_webhooks_time_out_after_timeout_seconds() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&[], |path, _| {
        let delay = if path == "/slow" { Duration::from_secs(4) } else { Duration::ZERO };
        Reply { delay, response: json!({"allowed": true}) }
    })
    .await;
    let cc = json!({"url": hook_server.url("/slow"), "caBundle": hook_server.ca_bundle()});
    configure(
        &client,
        false,
        "slow",
        vec![hook("slow.example.com", cc, &["configmaps"], json!({"timeoutSeconds": 1, "failurePolicy": "Fail"}))],
    )
    .await;
    let started = Instant::now();
    let (_, _, status) = until(&client, "default", "timeout", |code, _| code == 500).await;
    assert!(started.elapsed() < Duration::from_secs(4), "the call was cut at its timeout");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \""
        ) && message.ends_with("/slow?timeout=1s\": context deadline exceeded"),
        "{message}"
    );
    assert_eq!(hook_server.calls_to("/slow")[0]["request"]["operation"], "CREATE");
}

#[tokio::test]
async fn dry_runs_reach_only_side_effect_free_webhooks() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&[], |_, _| allow()).await;
    let cc = json!({"url": hook_server.url("/v"), "caBundle": hook_server.ca_bundle()});
    // v1 refuses webhooks that admit to side effects.
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                      "metadata": {"name": "effects"},
                      "webhooks": [hook("effects.example.com", cc.clone(), &["configmaps"], json!({"sideEffects": "Some"}))]});
    let (code, _, status) =
        send(&client, "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", Some(&body))
            .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "webhooks[0].sideEffects");
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""
    );

    configure(
        &client,
        false,
        "dry",
        vec![hook("dry.example.com", cc, &["configmaps"], json!({"sideEffects": "NoneOnDryRun"}))],
    )
    .await;
    until(&client, "default", "webhook effective", |_, _| !hook_server.seen().is_empty()).await;
    let (code, _, _) =
        send(&client, "POST", "/api/v1/namespaces/default/configmaps?dryRun=All", Some(&configmap("dry", json!({}))))
            .await;
    assert_eq!(code, 201);
    let (_, review) = hook_server.seen().pop().unwrap();
    assert_eq!(review["request"]["dryRun"], true);
    assert_eq!(review["request"]["options"]["dryRun"], json!(["All"]));
}

#[tokio::test]
async fn webhooks_with_if_needed_are_reinvoked_after_later_changes() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&[], |path, review| {
        let labels = &review["request"]["object"]["metadata"]["labels"];
        match path {
            // Adds its label once; sees the others' changes on reinvocation.
            "/first" | "/never" => allow(),
            "/second" if labels.get("second").is_none() => {
                patch(json!([{"op": "add", "path": "/metadata/labels/second", "value": "done"}]))
            }
            _ => allow(),
        }
    })
    .await;
    let cc = |p: &str| json!({"url": hook_server.url(p), "caBundle": hook_server.ca_bundle()});
    configure(
        &client,
        true,
        "chain",
        vec![
            hook("first.example.com", cc("/first"), &["configmaps"], json!({"reinvocationPolicy": "IfNeeded"})),
            hook("never.example.com", cc("/never"), &["configmaps"], json!({"reinvocationPolicy": "Never"})),
            hook("second.example.com", cc("/second"), &["configmaps"], json!({"reinvocationPolicy": "IfNeeded"})),
        ],
    )
    .await;
    until(&client, "default", "webhooks effective", |_, cm| cm["metadata"]["labels"]["second"] == "done").await;
    let before = (hook_server.calls_to("/first").len(), hook_server.calls_to("/never").len());
    let (code, _, cm) = create_cm(&client, "default", &configmap("chained", json!({"app": "x"}))).await;
    assert_eq!(code, 201);
    assert_eq!(cm["metadata"]["labels"]["second"], "done");
    let first = hook_server.calls_to("/first");
    assert_eq!(first.len() - before.0, 2, "called, then reinvoked after second.example.com changed the object");
    assert_eq!(first.last().unwrap()["request"]["object"]["metadata"]["labels"]["second"], "done");
    assert_eq!(hook_server.calls_to("/never").len() - before.1, 1, "Never is not reinvoked");
}

#[tokio::test]
async fn service_references_reach_the_webhook_through_its_endpoints() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&["hooks.webhooks.svc"], |_, _| {
        patch(json!([{"op": "add", "path": "/metadata/labels", "value": {"via": "service"}}]))
    })
    .await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "webhooks"}});
    assert_eq!(send(&client, "POST", "/api/v1/namespaces", Some(&ns)).await.0, 201);
    // A selector-less Service with hand-made Endpoints pointing at the test server.
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks"},
                     "spec": {"ports": [{"name": "https", "port": 443, "targetPort": hook_server.addr.port()}]}});
    let (code, _, out) = send(&client, "POST", "/api/v1/namespaces/webhooks/services", Some(&svc)).await;
    assert_eq!(code, 201, "{out}");
    let ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hooks"},
                    "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                 "ports": [{"name": "https", "port": hook_server.addr.port()}]}]});
    let (code, _, out) = send(&client, "POST", "/api/v1/namespaces/webhooks/endpoints", Some(&ep)).await;
    assert_eq!(code, 201, "{out}");
    let cc = json!({"service": {"namespace": "webhooks", "name": "hooks", "path": "/mutate"},
                    "caBundle": hook_server.ca_bundle()});
    configure(&client, true, "by-service", vec![hook("svc.example.com", cc, &["configmaps"], json!({}))]).await;
    let (_, _, cm) =
        until(&client, "default", "service webhook effective", |_, cm| cm["metadata"]["labels"]["via"] == "service")
            .await;
    assert_eq!(cm["metadata"]["labels"]["via"], "service");
    assert_eq!(hook_server.seen().last().unwrap().0, "/mutate?timeout=10s");
}

#[tokio::test]
async fn configurations_are_validated_and_never_sent_to_webhooks() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                      "metadata": {"name": "bad"},
                      "webhooks": [{"name": "short", "clientConfig": {"url": "http://h/p?q=1"},
                                    "rules": [{"operations": ["CREATE"], "apiGroups": ["*"], "apiVersions": ["*"],
                                               "resources": ["*"]}]}]});
    let (code, _, status) =
        send(&client, "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", Some(&body))
            .await;
    assert_eq!(code, 422, "{status}");
    let fields: Vec<&str> =
        status["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    for f in [
        "webhooks[0].name",
        "webhooks[0].sideEffects",
        "webhooks[0].clientConfig.url",
        "webhooks[0].admissionReviewVersions",
    ] {
        assert!(fields.contains(&f), "{f} not in {fields:?}");
    }

    // A webhook refusing everything cannot lock out its own configuration.
    let hook_server = Webhook::start(&[], |_, _| Reply {
        delay: Duration::ZERO,
        response: json!({"allowed": false, "status": {"message": "no"}}),
    })
    .await;
    let cc = json!({"url": hook_server.url("/all"), "caBundle": hook_server.ca_bundle()});
    let mut everything = hook("all.example.com", cc, &["*"], json!({}));
    everything["rules"][0]["apiGroups"] = json!(["*"]);
    everything["rules"][0]["apiVersions"] = json!(["*"]);
    configure(&client, false, "deny-all", vec![everything]).await;
    until(&client, "default", "deny-all effective", |code, _| code == 400).await;
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/deny-all";
    let (code, _, out) = send(&client, "PATCH", path, Some(&json!({"metadata": {"labels": {"x": "y"}}}))).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(send(&client, "DELETE", path, None).await.0, 200);
    let calls = hook_server.seen();
    assert!(
        calls.iter().all(|(_, r)| r["request"]["resource"]["group"] != "admissionregistration.k8s.io"),
        "the webhook saw its configuration"
    );
}

#[tokio::test]
async fn match_conditions_decide_which_requests_reach_the_webhook() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let hook_server = Webhook::start(&[], |_, _| Reply {
        delay: Duration::ZERO,
        response: json!({"allowed": false, "status": {"message": "conditions held"}}),
    })
    .await;
    let cc = json!({"url": hook_server.url("/v"), "caBundle": hook_server.ca_bundle()});
    let conditions = json!({"matchConditions": [
        {"name": "create", "expression": "request.operation == 'CREATE'"},
        {"name": "guarded", "expression": "object.metadata.name.startsWith('guarded')"},
    ]});
    // A condition that cannot be evaluated (no such field): failurePolicy Fail refuses.
    let broken = json!({"matchConditions": [{"name": "broken", "expression": "object.spec.replicas > 1"}],
                        "objectSelector": {"matchLabels": {"broken": "yes"}}});
    configure(
        &client,
        false,
        "conditional",
        vec![
            hook("conditional.example.com", cc.clone(), &["configmaps"], conditions),
            hook("broken.example.com", cc, &["configmaps"], broken),
        ],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _, status) = create_cm(&client, "default", &configmap("guarded-1", json!({}))).await;
        if code == 400 {
            assert_eq!(
                status["message"],
                "admission webhook \"conditional.example.com\" denied the request: conditions held"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the webhook never took effect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = hook_server.seen().len();
    assert_eq!(create_cm(&client, "default", &configmap("open-1", json!({}))).await.0, 201);
    assert_eq!(hook_server.seen().len(), calls, "a false condition skips the webhook");

    let (code, _, status) = create_cm(&client, "default", &configmap("open-2", json!({"broken": "yes"}))).await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("failed calling webhook \"broken.example.com\": failed to evaluate match conditions"),
        "{message}"
    );
}
