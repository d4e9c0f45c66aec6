//! Auditing end to end: a server started with a policy file and an audit log, a scripted
//! kube-rs session, and the log read back line by line; the webhook backend against a
//! small HTTP receiver; a handler panic audited at the Panic stage.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::TestServer;
use futures::{StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use krate_apiserver::audit::AuditOptions;
use krate_apiserver::audit::log::LogOptions;
use krate_apiserver::audit::webhook::WebhookOptions;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchParams};
use serde_json::{Value, json};

const SESSION_POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
# Discovery and health are noise here.
- level: None
  nonResourceURLs: ["/api*", "/apis*", "/openapi*", "/healthz*", "/readyz*", "/version"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets"]
- level: RequestResponse
  omitManagedFields: true
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Metadata
"#;

fn audit_options(dir: &Path, policy: &str) -> (AuditOptions, PathBuf) {
    let policy_file = dir.join("policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let log = dir.join("logs").join("audit.log");
    let opts = AuditOptions {
        policy_file: Some(policy_file),
        log: Some(LogOptions { path: log.clone(), max_size_mb: 100, max_backups: 1, max_age_days: 1 }),
        log_format: "json".into(),
        webhook: None,
    };
    (opts, log)
}

fn read_events(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

/// The log's events once `done` holds for them (the writer runs on its own thread).
async fn events_when(log: &Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let events = read_events(log);
        if done(&events) {
            return events;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for audit events: {events:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stages(events: &[Value], id: &str) -> Vec<String> {
    events.iter().filter(|e| e["auditID"] == id).map(|e| e["stage"].as_str().unwrap().to_string()).collect()
}

fn find<'a>(events: &'a [Value], verb: &str, resource: &str, stage: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["verb"] == verb && e["objectRef"]["resource"] == resource && e["stage"] == stage)
        .collect()
}

/// A client whose certificate says `user` in `groups` (not system:masters: RBAC refuses
/// it what no binding grants).
async fn client_as(srv: &TestServer, user: &str, groups: &[&str]) -> kube::Client {
    let cert = srv.running.pki.issue_client(user, groups).unwrap();
    let kubeconfig = srv.running.pki.kubeconfig(&srv.running.url, &cert, user);
    let path = srv.dir.path().join(format!("{user}.kubeconfig"));
    std::fs::write(&path, kubeconfig).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn a_session_is_logged_stage_by_stage_at_the_policys_levels() {
    let tmp = tempfile::tempdir().unwrap();
    let (opts, log) = audit_options(tmp.path(), SESSION_POLICY);
    let srv = TestServer::start_with(|o| o.audit = opts).await;
    let client = srv.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // create, get (raw, to see the Audit-ID header), list, watch, update, delete.
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "audited"}, "data": {"k": "v"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let req = http::Request::get("/api/v1/namespaces/default/configmaps/audited")
        .header("user-agent", "audit-test/1.0")
        .header("x-forwarded-for", "10.1.2.3")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let get_id = resp.headers()["audit-id"].to_str().unwrap().to_string();
    let _ = resp.into_body().collect().await.unwrap();
    cms.list(&ListParams::default()).await.unwrap();
    let watch = cms.watch(&WatchParams::default().timeout(1), "0").await.unwrap();
    let seen: Vec<_> =
        tokio::time::timeout(Duration::from_secs(10), watch.try_collect::<Vec<_>>()).await.unwrap().unwrap();
    assert!(!seen.is_empty(), "the watch sees the configmap");
    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    cms.replace("audited", &PostParams::default(), &changed).await.unwrap();
    cms.delete("audited", &DeleteParams::default()).await.unwrap();
    // A secret is audited at Metadata only.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "pw"}, "stringData": {"p": "hunter2"}})).unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    // A forbidden request.
    let jane: Api<ConfigMap> = Api::namespaced(client_as(&srv, "jane", &["dev"]).await, "default");
    assert!(jane.get("audited").await.is_err());

    let events = events_when(&log, |evs| {
        evs.iter().any(|e| e["user"]["username"] == "jane" && e["stage"] == "ResponseComplete")
            && !find(evs, "watch", "configmaps", "ResponseComplete").is_empty()
    })
    .await;
    for e in &events {
        assert_eq!((e["kind"].as_str(), e["apiVersion"].as_str()), (Some("Event"), Some("audit.k8s.io/v1")));
        assert!(e["requestReceivedTimestamp"].is_string() && e["stageTimestamp"].is_string());
        assert!(e.get("requestURI").is_some() && e.get("auditID").is_some());
        assert_ne!(e["level"], "None");
    }
    // Discovery was asked for by kube-rs? Either way, the None rule keeps it out.
    assert!(events.iter().all(|e| !e["requestURI"].as_str().unwrap().starts_with("/apis?")));

    // The create: both stages, at RequestResponse, objects without managedFields.
    let create = find(&events, "create", "configmaps", "ResponseComplete");
    assert_eq!(create.len(), 1);
    let c = create[0];
    let id = c["auditID"].as_str().unwrap();
    assert_eq!(stages(&events, id), ["RequestReceived", "ResponseComplete"]);
    assert_eq!(c["level"], "RequestResponse");
    assert_eq!(c["user"]["username"], "system:admin");
    assert!(c["user"]["groups"].as_array().unwrap().contains(&json!("system:masters")));
    assert_eq!(
        c["objectRef"],
        json!({"resource": "configmaps", "namespace": "default", "name": "audited", "apiVersion": "v1"})
    );
    assert_eq!(c["responseStatus"]["code"], 201);
    assert_eq!(c["requestObject"]["data"]["k"], "v");
    assert_eq!(c["responseObject"]["metadata"]["uid"], json!(created.metadata.uid));
    assert!(c["responseObject"]["metadata"].get("managedFields").is_none(), "omitManagedFields");
    assert_eq!(c["annotations"]["authorization.k8s.io/decision"], "allow");
    assert_eq!(c["sourceIPs"], json!(["127.0.0.1"]));
    let received = events.iter().find(|e| e["auditID"] == id && e["stage"] == "RequestReceived").unwrap();
    assert!(received.get("responseStatus").is_none() && received.get("responseObject").is_none());
    assert_eq!(received["requestObject"]["data"]["k"], "v");

    // The get: its auditID is the one in the response header; forwarded addresses first.
    assert_eq!(stages(&events, &get_id), ["RequestReceived", "ResponseComplete"]);
    let g = events.iter().find(|e| e["auditID"] == get_id && e["stage"] == "ResponseComplete").unwrap();
    assert_eq!((g["verb"].as_str(), g["userAgent"].as_str()), (Some("get"), Some("audit-test/1.0")));
    assert_eq!(g["sourceIPs"], json!(["10.1.2.3", "127.0.0.1"]));
    assert_eq!(g["responseObject"]["data"]["k"], "v");
    assert!(g.get("requestObject").is_none());

    // The list answers a ConfigMapList.
    let l = find(&events, "list", "configmaps", "ResponseComplete");
    assert_eq!(l[0]["responseObject"]["kind"], "ConfigMapList");

    // The watch: ResponseStarted when the stream starts, ResponseComplete when it ends.
    let w = find(&events, "watch", "configmaps", "ResponseComplete")[0];
    assert_eq!(
        stages(&events, w["auditID"].as_str().unwrap()),
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );
    assert!(w.get("responseObject").is_none());

    // The update names the object's uid and resourceVersion.
    let u = find(&events, "update", "configmaps", "ResponseComplete")[0];
    assert_eq!(u["objectRef"]["uid"], json!(created.metadata.uid));
    assert_eq!(u["objectRef"]["resourceVersion"], json!(created.metadata.resource_version));
    assert_eq!(u["requestObject"]["data"]["k"], "w");

    // The delete answers a Status.
    let d = find(&events, "delete", "configmaps", "ResponseComplete")[0];
    assert_eq!(
        (d["responseStatus"]["code"].as_i64(), d["responseObject"]["kind"].as_str()),
        (Some(200), Some("Status"))
    );

    // The secret: Metadata, so neither object.
    let s = find(&events, "create", "secrets", "ResponseComplete")[0];
    assert_eq!(s["level"], "Metadata");
    assert!(s.get("requestObject").is_none() && s.get("responseObject").is_none());
    assert!(!serde_json::to_string(&events).unwrap().contains("hunter2"), "the secret's data is never logged");

    // The forbidden request: 403 with upstream's reason, and the decision annotations.
    let f = events.iter().find(|e| e["user"]["username"] == "jane" && e["stage"] == "ResponseComplete").unwrap();
    assert_eq!(f["responseStatus"]["code"], 403);
    assert_eq!(f["responseStatus"]["reason"], "Forbidden");
    assert!(f["responseStatus"]["message"].as_str().unwrap().contains("User \"jane\" cannot get resource"));
    assert_eq!(f["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert!(f["annotations"].get("authorization.k8s.io/reason").is_some());
    assert!(f.get("responseObject").is_some(), "RequestResponse for configmaps, even refused");

    // Metrics count events and levels.
    let metrics = krate_apiserver::metrics::render();
    assert!(metrics.contains("apiserver_audit_event_total"), "{metrics}");
    assert!(metrics.contains("apiserver_audit_level_total{level=\"RequestResponse\"}"));
}

#[tokio::test]
async fn omitted_stages_and_user_rules_shape_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  users: ["jane"]
- level: Request
  omitStages: ["ResponseStarted"]
  verbs: ["watch"]
  resources:
  - group: ""
    resources: ["configmaps"]
- level: None
"#;
    let (opts, log) = audit_options(tmp.path(), policy);
    let srv = TestServer::start_with(|o| o.audit = opts).await;
    let admin: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"a": "1"}})).unwrap();
    admin.create(&PostParams::default(), &cm).await.unwrap();
    let watch = admin.watch(&WatchParams::default().timeout(1), "0").await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), watch.collect::<Vec<_>>()).await.unwrap();
    let jane: Api<ConfigMap> = Api::namespaced(client_as(&srv, "jane", &[]).await, "default");
    assert!(jane.create(&PostParams::default(), &cm).await.is_err());

    let events = events_when(&log, |evs| {
        evs.iter().any(|e| e["user"]["username"] == "jane") && evs.iter().any(|e| e["verb"] == "watch")
    })
    .await;
    assert!(events.iter().all(|e| e["stage"] != "RequestReceived"), "policy-wide omitStages");
    // The admin's create matched no rule but None.
    assert!(events.iter().all(|e| e["verb"] != "create" || e["user"]["username"] == "jane"));
    // The watch: only ResponseComplete (ResponseStarted omitted by its rule).
    let watch: Vec<_> = events.iter().filter(|e| e["verb"] == "watch").collect();
    assert_eq!(watch.len(), 1, "{watch:#?}");
    assert_eq!(watch[0]["stage"], "ResponseComplete");
    // jane at Request: the request object, not the response.
    let j = events.iter().find(|e| e["user"]["username"] == "jane").unwrap();
    assert_eq!((j["level"].as_str(), j["responseStatus"]["code"].as_i64()), (Some("Request"), Some(403)));
    assert_eq!(j["requestObject"]["data"]["a"], "1");
    assert!(j.get("responseObject").is_none());
}

#[tokio::test]
async fn a_panicking_handler_answers_500_and_is_audited_at_the_panic_stage() {
    struct Panics;
    #[async_trait::async_trait]
    impl krate_api::computed::ComputedResource for Panics {
        async fn create(&self, _: &krate_api::computed::ComputedRequest<'_>, _: Value) -> krate_api::ApiResult<Value> {
            panic!("deliberately broken handler")
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let policy = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources:\n  - group: authorization.k8s.io\n";
    let (opts, log) = audit_options(tmp.path(), policy);
    let srv = TestServer::start_with(|o| o.audit = opts).await;
    srv.running.server.register_computed("authorization.k8s.io", "selfsubjectrulesreviews", "", Arc::new(Panics));
    let client = srv.client().await;
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}});
    let req = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews")
        .header("content-type", "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 500);
    let id = resp.headers()["audit-id"].to_str().unwrap().to_string();
    let status: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(status["reason"], "InternalError");
    let events = events_when(&log, |evs| evs.iter().any(|e| e["stage"] == "Panic")).await;
    assert_eq!(stages(&events, &id), ["RequestReceived", "Panic"]);
    let p = events.iter().find(|e| e["stage"] == "Panic").unwrap();
    assert_eq!(p["responseStatus"]["code"], 500);
    assert!(p["responseStatus"]["message"].as_str().unwrap().contains("deliberately broken handler"));
    // The server still serves.
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.list(&ListParams::default()).await.unwrap();
}

#[tokio::test]
async fn failed_authentication_is_audited_once_at_response_started() {
    let tmp = tempfile::tempdir().unwrap();
    let (opts, log) =
        audit_options(tmp.path(), "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n");
    let srv = TestServer::start_with(|o| {
        o.audit = opts;
        o.anonymous_auth = false;
    })
    .await;
    let anonymous = srv.anonymous().await;
    let get = |token: Option<&str>| {
        let mut b = http::Request::get("/api/v1/namespaces/default/configmaps");
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        b.body(kube::client::Body::empty()).unwrap()
    };
    let mut ids = Vec::new();
    for token in [None, Some("not-a-token")] {
        let resp = anonymous.send(get(token)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 401);
        ids.push(resp.headers()["audit-id"].to_str().unwrap().to_string());
    }
    let events = events_when(&log, |evs| ids.iter().all(|id| evs.iter().any(|e| e["auditID"] == *id))).await;
    let messages: Vec<_> = ids
        .iter()
        .map(|id| {
            assert_eq!(stages(&events, id), ["ResponseStarted"]);
            let e = events.iter().find(|e| e["auditID"] == *id).unwrap();
            assert_eq!((e["verb"].as_str(), e["responseStatus"]["code"].as_i64()), (Some("list"), Some(401)));
            assert_eq!(e["user"], json!({}));
            e["responseStatus"]["message"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        messages,
        ["Authentication failed, no credentials provided", "Authentication failed, attempted: bearer"]
    );
}

/// A tiny HTTP receiver: answers 500 to its first POST, then 200, and hands every body on.
async fn receiver() -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/audit", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let posts = Arc::new(AtomicUsize::new(0));
    let counter = posts.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (tx, counter) = (tx.clone(), counter.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (tx, counter) = (tx.clone(), counter.clone());
                    async move {
                        assert_eq!(req.uri().path(), "/audit");
                        let bytes = req.into_body().collect().await.unwrap().to_bytes();
                        let n = counter.fetch_add(1, Ordering::SeqCst);
                        let code = if n == 0 { 500 } else { 200 };
                        if code == 200 {
                            let _ = tx.send(serde_json::from_slice::<Value>(&bytes).unwrap());
                        }
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .status(code)
                                .body(http_body_util::Full::new(bytes::Bytes::new()))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (url, rx, posts)
}

#[tokio::test]
async fn the_webhook_gets_batched_event_lists_and_retries() {
    let (url, mut rx, posts) = receiver().await;
    let tmp = tempfile::tempdir().unwrap();
    let hook = tmp.path().join("webhook.kubeconfig");
    std::fs::write(
        &hook,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: sink\n  cluster:\n    server: {url}\nusers:\n- name: api\n  user: {{}}\ncontexts:\n- name: default\n  context: {{cluster: sink, user: api}}\ncurrent-context: default\n"),
    )
    .unwrap();
    let policy_file = tmp.path().join("policy.yaml");
    std::fs::write(&policy_file, SESSION_POLICY).unwrap();
    let opts = AuditOptions {
        policy_file: Some(policy_file),
        log: None,
        log_format: "json".into(),
        webhook: Some(WebhookOptions {
            batch_max_wait: Duration::from_millis(200),
            initial_backoff: Duration::from_millis(100),
            ..WebhookOptions::new(hook)
        }),
    };
    let srv = TestServer::start_with(|o| o.audit = opts).await;
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    for i in 0..3 {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("w{i}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut creates = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while creates.len() < 3 {
        let list = tokio::time::timeout_at(deadline, rx.recv()).await.expect("webhook batches arrive").unwrap();
        assert_eq!((list["kind"].as_str(), list["apiVersion"].as_str()), (Some("EventList"), Some("audit.k8s.io/v1")));
        for e in list["items"].as_array().unwrap() {
            if e["verb"] == "create" && e["stage"] == "ResponseComplete" {
                creates.push(e["objectRef"]["name"].as_str().unwrap().to_string());
            }
        }
    }
    creates.sort();
    assert_eq!(creates, ["w0", "w1", "w2"], "each event once, the failed batch retried");
    assert!(posts.load(std::sync::atomic::Ordering::SeqCst) >= 2, "the first POST failed and was retried");
}

#[tokio::test]
async fn impersonated_requests_name_both_users() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  users: [\"system:admin\"]\n- level: None\n";
    let (opts, log) = audit_options(tmp.path(), policy);
    let srv = TestServer::start_with(|o| o.audit = opts).await;
    // The admin acts as bob (in group devs); the policy matches the admin, as upstream.
    let mut config = srv.config().await;
    config.auth_info.impersonate = Some("bob".into());
    config.auth_info.impersonate_groups = Some(vec!["devs".into()]);
    let bob: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    assert!(bob.get("anything").await.is_err(), "bob may not read config maps");
    let events = events_when(&log, |evs| evs.iter().any(|e| e["stage"] == "ResponseComplete")).await;
    let e = events.iter().find(|e| e["stage"] == "ResponseComplete").unwrap();
    assert_eq!(e["user"]["username"], "system:admin");
    assert_eq!(e["impersonatedUser"]["username"], "bob");
    assert!(e["impersonatedUser"]["groups"].as_array().unwrap().contains(&json!("devs")));
    assert_eq!(e["responseStatus"]["code"], 403);
}
