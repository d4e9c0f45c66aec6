//! The admission chain over HTTPS: PodSecurity enforces (403 with upstream's message),
//! warns (Warning headers) and checks dry-runs; relabelling a namespace warns about its
//! pods; the admission configuration file sets defaults and exemptions; ServiceAccount
//! admission gives pods their account and token volume.

use crate::common::TestServer;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

async fn send(
    client: &kube::Client,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Vec<String>, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    let code = resp.status().as_u16();
    let warnings = resp.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, warnings, serde_json::from_slice(&bytes).unwrap())
}

async fn post(client: &kube::Client, uri: &str, body: Value) -> (u16, Vec<String>, Value) {
    send(client, "POST", uri, "application/json", &body).await
}

async fn namespace(client: &kube::Client, name: &str, labels: Value) {
    let (code, _, body) = post(
        client,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

fn pod(name: &str, security: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": security}]}})
}

fn restricted_pod(name: &str) -> Value {
    let mut p = pod(name, json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}));
    p["spec"]["securityContext"] = json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    p
}

/// Upstream's Warning header form of a warning text.
fn header(text: &str) -> String {
    format!("299 - \"{}\"", text.replace('"', "\\\""))
}

const RESTRICTED_PLAIN: &str = "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

#[tokio::test]
async fn enforce_refuses_pods_with_upstreams_message_also_on_dry_run() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    namespace(&client, "strict", json!({"pod-security.kubernetes.io/enforce": "restricted"})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "strict");

    for dry_run in [true, false] {
        let params = PostParams { dry_run, ..Default::default() };
        let err = pods.create(&params, &serde_json::from_value(pod("plain", json!({}))).unwrap()).await.unwrap_err();
        let kube::Error::Api(status) = err else { panic!("{err}") };
        assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            status.message,
            format!("pods \"plain\" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_PLAIN}")
        );
    }
    // Dry-run of a compliant pod passes and stores nothing; the real one is stored.
    let good: Pod = serde_json::from_value(restricted_pod("good")).unwrap();
    pods.create(&PostParams { dry_run: true, ..Default::default() }, &good).await.unwrap();
    assert!(pods.get_opt("good").await.unwrap().is_none());
    let created = pods.create(&PostParams::default(), &good).await.unwrap();
    assert_eq!(created.spec.as_ref().unwrap().service_account_name.as_deref(), Some("default"));

    // Updates that leave the containers alone are not checked again; new images are.
    let (code, _, _) = send(
        &client,
        "PATCH",
        "/api/v1/namespaces/strict/pods/good",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn service_account_admission_injects_the_token_volume() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    namespace(&client, "apps", json!({})).await;
    let (code, _, created) = post(&client, "/api/v1/namespaces/apps/pods", pod("p", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["serviceAccountName"], "default");
    let volume = &created["spec"]["volumes"][0];
    let name = volume["name"].as_str().unwrap();
    assert!(name.starts_with("kube-api-access-"), "{volume}");
    assert_eq!(
        volume["projected"]["sources"],
        json!([
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ])
    );
    assert_eq!(
        created["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    );
    let mut ghost = pod("g", json!({}));
    ghost["spec"]["serviceAccountName"] = json!("ghost");
    let (code, _, status) = post(&client, "/api/v1/namespaces/apps/pods", ghost).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "pods \"g\" is forbidden: error looking up service account apps/ghost: serviceaccount \"ghost\" not found"
    );
}

#[tokio::test]
async fn warn_mode_and_workloads_give_warning_headers() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    namespace(
        &client,
        "soft",
        json!({"pod-security.kubernetes.io/warn": "baseline", "pod-security.kubernetes.io/audit": "restricted"}),
    )
    .await;
    let (code, warnings, _) =
        post(&client, "/api/v1/namespaces/soft/pods", pod("p", json!({"privileged": true}))).await;
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        vec![header(
            "would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
        )]
    );

    // A Deployment in an enforcing namespace is admitted with a warning, never refused.
    namespace(&client, "strict", json!({"pod-security.kubernetes.io/enforce": "restricted"})).await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod("x", json!({}))["spec"]}}});
    let (code, warnings, body) = post(&client, "/apis/apps/v1/namespaces/strict/deployments", deployment).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(warnings, vec![header(&format!("would violate PodSecurity \"restricted:latest\": {RESTRICTED_PLAIN}"))]);
}

#[tokio::test]
async fn relabelling_a_namespace_warns_about_existing_pods() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    namespace(&client, "lab", json!({})).await;
    for p in [pod("a", json!({})), pod("b", json!({})), pod("priv", json!({"privileged": true})), restricted_pod("ok")]
    {
        let (code, _, body) = post(&client, "/api/v1/namespaces/lab/pods", p).await;
        assert_eq!(code, 201, "{body}");
    }
    let label = |level: &str| json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}});
    let (code, warnings, ns) = send(
        &client,
        "PATCH",
        "/api/v1/namespaces/lab?dryRun=All",
        "application/merge-patch+json",
        &label("restricted"),
    )
    .await;
    assert_eq!(code, 200, "{ns}");
    let reasons = "allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile";
    assert_eq!(
        warnings,
        vec![
            header(
                "existing pods in namespace \"lab\" violate the new PodSecurity enforce level \"restricted:latest\""
            ),
            header(&format!("a (and 1 other pod): {reasons}")),
            header(&format!("priv: privileged, {reasons}")),
        ]
    );
    let (_, _, stored) = send(&client, "GET", "/api/v1/namespaces/lab", "application/json", &json!({})).await;
    assert!(stored["metadata"]["labels"].get("pod-security.kubernetes.io/enforce").is_none(), "dry-run stores nothing");

    // Invalid values are refused as upstream does.
    let (code, _, status) =
        send(&client, "PATCH", "/api/v1/namespaces/lab", "application/merge-patch+json", &label("bogus")).await;
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        "Namespace \"lab\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"bogus\": must be one of privileged, baseline, restricted"
    );
}

#[tokio::test]
async fn configuration_file_sets_defaults_and_exemptions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admission.yaml");
    std::fs::write(
        &path,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n\
         - name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n\
         \x20   defaults:\n      enforce: baseline\n    exemptions:\n      namespaces: [free]\n      runtimeClasses: [kata]\n",
    )
    .unwrap();
    let srv = TestServer::start_with(|o| o.admission_control_config_file = Some(path)).await;
    let client = srv.client().await;
    namespace(&client, "plain", json!({})).await;
    let (code, _, status) = post(&client, "/api/v1/namespaces/plain/pods", pod("p", json!({"privileged": true}))).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "pods \"p\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
    );
    let mut kata = pod("k", json!({"privileged": true}));
    kata["spec"]["runtimeClassName"] = json!("kata");
    let (code, _, body) = post(&client, "/api/v1/namespaces/plain/pods", kata).await;
    assert_eq!(code, 201, "{body}");

    let (code, warnings, _) = post(
        &client,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "free", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        vec![header(
            "namespace \"free\" is exempt from Pod Security, and the policy (enforce=restricted:latest, warn=restricted:latest) will be ignored"
        )]
    );
    let (code, _, body) = post(&client, "/api/v1/namespaces/free/pods", pod("p", json!({"privileged": true}))).await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn a_broken_configuration_file_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admission.yaml");
    std::fs::write(
        &path,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults:\n      enforce: strict\n",
    )
    .unwrap();
    let store = krate_store::sqlite::SqliteStore::open(krate_store::sqlite::SqliteConfig::new(dir.path().join("db")))
        .await
        .unwrap();
    let mut opts = krate_apiserver::start::Options::new(dir.path().join("data"), std::sync::Arc::new(store));
    opts.anonymous_auth = false;
    opts.admission_control_config_file = Some(path);
    let Err(e) = krate_apiserver::start::start(opts).await else { panic!("started with a bad configuration") };
    assert!(e.to_string().contains("defaults.enforce: Unsupported value: \"strict\""), "{e}");
}
