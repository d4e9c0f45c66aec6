//! Server-side field validation over HTTPS (unknown and duplicate fields are warned
//! about by default, refused under Strict, ignored under Ignore, and never stored), and
//! the response conventions kubectl relies on: ?pretty and Audit-ID.

use crate::common::TestServer;
use http_body_util::BodyExt;
use serde_json::{Value, json};

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// A Deployment body with a misspelt container field, a field `spec` does not have, and
/// `replicas` written twice (the last one wins).
fn body(name: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}"}},
        "spec":{{"replicas":1,"replicas":2,"paused2":true,"selector":{{"matchLabels":{{"app":"a"}}}},
        "template":{{"metadata":{{"labels":{{"app":"a"}}}},
        "spec":{{"containers":[{{"name":"c","image":"busybox","imagee":"typo"}}]}}}}}}}}"#
    )
    .into_bytes()
}

async fn send(client: &kube::Client, method: &str, uri: &str, body: Vec<u8>) -> (u16, Vec<String>, Value) {
    let req =
        http::Request::builder().method(method).uri(uri).header("content-type", "application/json").body(body).unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    let code = resp.status().as_u16();
    let warnings =
        resp.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, warnings, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn unknown_and_duplicate_fields() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    // Strict: one 400 naming every offending field; nothing stored.
    let (code, _, status) = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Strict"), body("s")).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: \
         duplicate field \"spec.replicas\", unknown field \"spec.paused2\", \
         unknown field \"spec.template.spec.containers[0].imagee\""
    );
    let (code, _, _) = send(&client, "GET", &format!("{DEPLOYMENTS}/s"), vec![]).await;
    assert_eq!(code, 404);

    // Default (Warn): created, with one Warning header per problem; unknown fields dropped.
    let (code, warnings, created) = send(&client, "POST", DEPLOYMENTS, body("w")).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        warnings,
        vec![
            r#"299 - "duplicate field \"spec.replicas\"""#,
            r#"299 - "unknown field \"spec.paused2\"""#,
            r#"299 - "unknown field \"spec.template.spec.containers[0].imagee\"""#,
        ]
    );
    assert_eq!(created["spec"]["replicas"], 2, "the last duplicate wins");
    assert!(created["spec"].get("paused2").is_none());
    assert!(created["spec"]["template"]["spec"]["containers"][0].get("imagee").is_none());
    let (_, _, stored) = send(&client, "GET", &format!("{DEPLOYMENTS}/w"), vec![]).await;
    assert!(stored["spec"].get("paused2").is_none(), "unknown fields are not stored");

    // Ignore: no warnings.
    let (code, warnings, _) = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Ignore"), body("i")).await;
    assert_eq!((code, warnings.len()), (201, 0));

    // Updates and patches are checked too.
    let mut obj = stored.clone();
    obj["spec"]["extra"] = json!(1);
    let (code, _, status) =
        send(&client, "PUT", &format!("{DEPLOYMENTS}/w?fieldValidation=Strict"), serde_json::to_vec(&obj).unwrap())
            .await;
    assert_eq!((code, status["message"].as_str().unwrap().ends_with("unknown field \"spec.extra\"")), (400, true));
    let req = http::Request::builder()
        .method("PATCH")
        .uri(format!("{DEPLOYMENTS}/w?fieldValidation=Strict"))
        .header("content-type", "application/merge-patch+json")
        .body(br#"{"metadata":{"labels":{"a":"b"}},"spec":{"bogus":true}}"#.to_vec())
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);

    // A directive upstream does not know is a 400.
    let (code, _, status) = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Loud"), body("x")).await;
    assert_eq!(code, 400);
    assert!(status["message"].as_str().unwrap().contains("fieldValidation"), "{status}");
}

#[tokio::test]
async fn pretty_output_and_audit_ids() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let get = |uri: &str, audit: Option<&str>| {
        let mut b = http::Request::builder().uri(uri);
        if let Some(a) = audit {
            b = b.header("Audit-ID", a);
        }
        b.body(kube::client::Body::empty()).unwrap()
    };
    let resp = client.send(get("/api/v1/namespaces/default?pretty=true", Some("my-audit-id"))).await.unwrap();
    assert_eq!(resp.headers()["audit-id"], "my-audit-id", "the client's Audit-ID is echoed");
    let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(text.starts_with("{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Namespace\",\n"), "{text}");
    assert!(text.ends_with("}\n"));

    let resp = client.send(get("/api/v1/namespaces/default", None)).await.unwrap();
    let id = resp.headers()["audit-id"].to_str().unwrap().to_string();
    assert_eq!(id.len(), 36, "a generated UUID: {id}");
    let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(!text.contains('\n'), "compact unless asked: {text}");
    let resp = client.send(get("/api/v1/namespaces/nope?pretty=1", None)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert_ne!(resp.headers()["audit-id"].to_str().unwrap(), id, "each request has its own");
}
