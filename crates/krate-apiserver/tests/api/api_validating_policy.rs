//! ValidatingAdmissionPolicy over HTTPS: policies bound by bindings deny with
//! upstream's message, reason and code, warn through Warning headers, read params
//! from ConfigMaps, honour matchConditions, namespaceSelector and failurePolicy.

use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::common::TestServer;

async fn send(client: &kube::Client, method: &str, uri: &str, body: &Value) -> (u16, Vec<String>, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    let code = resp.status().as_u16();
    let warnings = resp.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, warnings, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn create(client: &kube::Client, uri: &str, body: Value) {
    let (code, _, out) = send(client, "POST", uri, &body).await;
    assert_eq!(code, 201, "{uri}: {out}");
}

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

fn configmaps_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]})
}

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
           "metadata": {"name": name}, "spec": spec})
}

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// Creates `cm` until the answer is `code` (policies take effect once the watch
/// cache has them), returning the last answer.
async fn expect_code(client: &kube::Client, ns: &str, cm: Value, code: u16) -> (u16, Vec<String>, Value) {
    let uri = format!("/api/v1/namespaces/{ns}/configmaps?dryRun=All");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = send(client, "POST", &uri, &cm).await;
        if answer.0 == code || tokio::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn deny_uses_upstreams_message_reason_and_code() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    create(&c, POLICIES, policy("small-configmaps", json!({
        "matchConstraints": configmaps_rule(),
        "validations": [
            {"expression": "!has(object.data) || object.data.size() <= 2"},
            {"expression": "!('forbidden' in object.?data.orValue({}))", "message": "no forbidden key", "reason": "Forbidden"},
            {"expression": "object.metadata.name.size() < 20", "messageExpression": "'name ' + object.metadata.name + ' is too long'"}
        ]
    }))).await;
    create(
        &c,
        BINDINGS,
        binding("small-configmaps-binding", json!({"policyName": "small-configmaps", "validationActions": ["Deny"]})),
    )
    .await;

    // No reason: 422 Invalid, the expression as message.
    let (code, _, status) =
        expect_code(&c, "default", configmap("big", json!({"a": "1", "b": "2", "c": "3"})), 422).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["message"],
        "configmaps \"big\" is forbidden: ValidatingAdmissionPolicy 'small-configmaps' with binding 'small-configmaps-binding' denied request: failed expression: !has(object.data) || object.data.size() <= 2"
    );
    // reason Forbidden: 403 with the message.
    let (code, _, status) = expect_code(&c, "default", configmap("f", json!({"forbidden": "x"})), 403).await;
    assert_eq!((code, status["reason"].as_str()), (403, Some("Forbidden")), "{status}");
    assert_eq!(
        status["message"],
        "configmaps \"f\" is forbidden: ValidatingAdmissionPolicy 'small-configmaps' with binding 'small-configmaps-binding' denied request: no forbidden key"
    );
    // messageExpression.
    let (_, _, status) = expect_code(&c, "default", configmap("a-very-long-configmap-name", json!({})), 422).await;
    assert!(
        status["message"].as_str().unwrap().ends_with("denied request: name a-very-long-configmap-name is too long"),
        "{status}"
    );
    // A conforming object passes; other resources are not covered.
    let (code, _, _) = expect_code(&c, "default", configmap("ok", json!({"a": "1"})), 201).await;
    assert_eq!(code, 201);
    let (code, _, body) = send(&c, "POST", "/api/v1/namespaces/default/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "1", "b": "2", "c": "3"}})).await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn warn_and_audit_actions_admit_with_a_warning() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    create(&c, POLICIES, policy("labelled", json!({
        "matchConstraints": configmaps_rule(),
        "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels", "message": "a team label is required"}]
    }))).await;
    create(
        &c,
        BINDINGS,
        binding("labelled-warn", json!({"policyName": "labelled", "validationActions": ["Warn", "Audit"]})),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (code, warnings) = loop {
        let (code, warnings, _) =
            send(&c, "POST", "/api/v1/namespaces/default/configmaps?dryRun=All", &configmap("w", json!({}))).await;
        if !warnings.is_empty() || tokio::time::Instant::now() > deadline {
            break (code, warnings);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        vec!["299 - \"Validation failed for ValidatingAdmissionPolicy 'labelled' with binding 'labelled-warn': a team label is required\"".to_string()]
    );
}

#[tokio::test]
async fn params_come_from_a_configmap() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    create(&c, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "limits"}}))
        .await;
    create(&c, "/api/v1/namespaces/limits/configmaps", configmap("max-keys", json!({"max": "1"}))).await;
    create(&c, POLICIES, policy("max-keys", json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}],
                             "objectSelector": {"matchLabels": {"checked": "yes"}}},
        "variables": [{"name": "max", "expression": "int(params.data.max)"}],
        "validations": [{"expression": "size(object.data) <= variables.max",
                         "messageExpression": "'at most ' + string(variables.max) + ' keys'"}]
    }))).await;
    create(
        &c,
        BINDINGS,
        binding(
            "max-keys",
            json!({
                "policyName": "max-keys", "validationActions": ["Deny"],
                "paramRef": {"name": "max-keys", "namespace": "limits", "parameterNotFoundAction": "Deny"}
            }),
        ),
    )
    .await;
    let mut cm = configmap("two", json!({"a": "1", "b": "2"}));
    cm["metadata"]["labels"] = json!({"checked": "yes"});
    let (code, _, status) = expect_code(&c, "default", cm.clone(), 422).await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with("with binding 'max-keys' denied request: at most 1 keys"),
        "{status}"
    );
    // objectSelector: unlabelled objects are not checked.
    let (code, _, _) = expect_code(&c, "default", configmap("two", json!({"a": "1", "b": "2"})), 201).await;
    assert_eq!(code, 201);
    // The param changes, the decision follows.
    let req = http::Request::builder()
        .method("PATCH")
        .uri("/api/v1/namespaces/limits/configmaps/max-keys")
        .header("content-type", "application/merge-patch+json")
        .body(serde_json::to_vec(&json!({"data": {"max": "5"}})).unwrap())
        .unwrap();
    c.request::<Value>(req).await.unwrap();
    let (code, _, _) = expect_code(&c, "default", cm.clone(), 201).await;
    assert_eq!(code, 201);
    // A missing param with parameterNotFoundAction Deny refuses (failurePolicy Fail).
    let (code, _, _) = send(&c, "DELETE", "/api/v1/namespaces/limits/configmaps/max-keys", &json!({})).await;
    assert_eq!(code, 200);
    let (code, _, status) = expect_code(&c, "default", cm, 422).await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with(
            "denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
        ),
        "{status}"
    );
}

#[tokio::test]
async fn match_conditions_and_namespace_selector_narrow_a_policy() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    for (ns, env) in [("prod", "production"), ("dev", "development")] {
        create(
            &c,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"env": env}}}),
        )
        .await;
    }
    let mut rules = configmaps_rule();
    rules["namespaceSelector"] = json!({"matchLabels": {"env": "production"}});
    create(&c, POLICIES, policy("prod-immutable", json!({
        "matchConstraints": rules,
        "matchConditions": [{"name": "not-exempt", "expression": "!object.metadata.name.startsWith('exempt-')"}],
        "validations": [{"expression": "object.?immutable.orValue(false) == true", "message": "configmaps in production must be immutable"},
                        {"expression": "namespaceObject.metadata.labels.env == 'production'"}]
    }))).await;
    create(
        &c,
        BINDINGS,
        binding("prod-immutable", json!({"policyName": "prod-immutable", "validationActions": ["Deny"]})),
    )
    .await;
    let (code, _, status) = expect_code(&c, "prod", configmap("mutable", json!({})), 422).await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with("denied request: configmaps in production must be immutable")
    );
    // Another namespace, an exempt name (matchCondition false), an immutable one: admitted.
    assert_eq!(expect_code(&c, "dev", configmap("mutable", json!({})), 201).await.0, 201);
    assert_eq!(expect_code(&c, "prod", configmap("exempt-x", json!({})), 201).await.0, 201);
    let mut immutable = configmap("fixed", json!({}));
    immutable["immutable"] = json!(true);
    assert_eq!(expect_code(&c, "prod", immutable, 201).await.0, 201);
}

#[tokio::test]
async fn failure_policy_decides_on_runtime_errors() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    // `object.data.missing` fails at runtime for configmaps without that key.
    for (name, failure) in [("strict", "Fail"), ("lenient", "Ignore")] {
        let mut rules = configmaps_rule();
        rules["objectSelector"] = json!({"matchLabels": {"policy": name}});
        create(
            &c,
            POLICIES,
            policy(
                name,
                json!({
                    "failurePolicy": failure,
                    "matchConstraints": rules,
                    "validations": [{"expression": "object.data.missing == 'x'"}]
                }),
            ),
        )
        .await;
        create(&c, BINDINGS, binding(name, json!({"policyName": name, "validationActions": ["Deny"]}))).await;
    }
    let labelled = |policy: &str| {
        let mut cm = configmap("cm", json!({"a": "b"}));
        cm["metadata"]["labels"] = json!({"policy": policy});
        cm
    };
    let (code, _, status) = expect_code(&c, "default", labelled("strict"), 422).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "configmaps \"cm\" is forbidden: ValidatingAdmissionPolicy 'strict' with binding 'strict' denied request: expression 'object.data.missing == 'x'' resulted in error: no such key: missing"
    );
    assert_eq!(expect_code(&c, "default", labelled("lenient"), 201).await.0, 201);
    // Policies never apply to admission configuration itself, so a broken one can be removed.
    let (code, _, _) = send(&c, "DELETE", &format!("{BINDINGS}/strict"), &json!({})).await;
    assert_eq!(code, 200);
}
