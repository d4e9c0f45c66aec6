//! `application/vnd.kubernetes.protobuf` over HTTPS, as Go clients speak it: request
//! bodies, objects, lists, watch streams, DeleteOptions and Status errors. The protobuf
//! sent and read here is written and parsed with the k8s-pb prost types, independently
//! of krate's transcoder.

use std::time::Duration;

use crate::common::TestServer;
use http_body_util::BodyExt;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{Value, json};

const PB: &str = "application/vnd.kubernetes.protobuf";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// The `k8s\0` + runtime.Unknown envelope around a message.
fn envelope(api_version: &str, kind: &str, msg: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(msg.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The envelope's kind and raw message.
fn open(bytes: &[u8]) -> (String, Vec<u8>) {
    assert_eq!(&bytes[..4], b"k8s\0", "{bytes:?}");
    let u = Unknown::decode(&bytes[4..]).unwrap();
    (u.type_meta.unwrap().kind.unwrap(), u.raw.unwrap())
}

struct Reply {
    code: u16,
    content_type: String,
    body: Vec<u8>,
}

async fn send(client: &kube::Client, method: &str, uri: &str, ct: &str, accept: &str, body: Vec<u8>) -> Reply {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .header("accept", accept)
        .body(body)
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    let code = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").unwrap().to_str().unwrap().to_string();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    Reply { code, content_type, body }
}

fn configmap(name: &str) -> core::ConfigMap {
    // As client-go writes it: every non-pointer field, zero or not.
    core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: Some(name.into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            labels: [("app".to_string(), "pb".to_string())].into(),
            ..Default::default()
        }),
        data: [("a".to_string(), "b".to_string())].into(),
        binary_data: [("bin".to_string(), vec![0u8, 1, 255])].into(),
        immutable: None,
    }
}

#[tokio::test]
async fn configmaps_in_protobuf() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    // Create: protobuf in, protobuf out.
    let r = send(&client, "POST", CONFIGMAPS, PB, PB, envelope("v1", "ConfigMap", &configmap("one"))).await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.content_type, PB);
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "ConfigMap");
    let created = core::ConfigMap::decode(raw.as_slice()).unwrap();
    let m = created.metadata.unwrap();
    assert_eq!(m.name.as_deref(), Some("one"));
    assert_eq!(m.namespace.as_deref(), Some("default"));
    assert!(m.uid.is_some_and(|u| !u.is_empty()));
    assert!(m.creation_timestamp.and_then(|t| t.seconds).is_some_and(|s| s > 1_700_000_000));
    assert_eq!(created.data.get("a").map(String::as_str), Some("b"));
    assert_eq!(created.binary_data.get("bin"), Some(&vec![0u8, 1, 255]));

    // The stored object is what a JSON client would have written: no Go zero values.
    let r = send(&client, "GET", &format!("{CONFIGMAPS}/one"), "", "application/json", vec![]).await;
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["data"], json!({"a": "b"}));
    assert_eq!(v["binaryData"], json!({"bin": "AAH/"}));
    assert!(v["metadata"].get("generation").is_none() && v["metadata"].get("generateName").is_none(), "{v}");
    assert_eq!(v["metadata"]["labels"], json!({"app": "pb"}));

    // Get with client-go's Accept: protobuf first, JSON as a fallback.
    let r = send(&client, "GET", &format!("{CONFIGMAPS}/one"), "", &format!("{PB}, application/json"), vec![]).await;
    assert_eq!((r.code, r.content_type.as_str()), (200, PB));
    let got = core::ConfigMap::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(got.data.get("a").map(String::as_str), Some("b"));

    // List.
    let r = send(&client, "GET", CONFIGMAPS, "", PB, vec![]).await;
    assert_eq!((r.code, r.content_type.as_str()), (200, PB));
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "ConfigMapList");
    let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
    let rv = list.metadata.and_then(|m| m.resource_version).unwrap();
    assert!(list.items.iter().any(|c| c.metadata.as_ref().and_then(|m| m.name.as_deref()) == Some("one")));

    // Watch: length-prefixed WatchEvents whose objects are enveloped.
    let req = http::Request::get(format!("{CONFIGMAPS}?watch=true&resourceVersion={rv}&timeoutSeconds=10"))
        .header("accept", format!("{PB}, application/json"))
        .body(vec![])
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    let mut body = resp.into_body();
    let r = send(&client, "POST", CONFIGMAPS, PB, PB, envelope("v1", "ConfigMap", &configmap("two"))).await;
    assert_eq!(r.code, 201);
    let mut buf = Vec::new();
    let event = loop {
        if buf.len() >= 4 {
            let n = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if buf.len() >= 4 + n {
                break meta::WatchEvent::decode(&buf[4..4 + n]).unwrap();
            }
        }
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame()).await.unwrap().unwrap().unwrap();
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    };
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let (kind, raw) = open(&event.object.unwrap().raw.unwrap());
    assert_eq!(kind, "ConfigMap");
    let cm = core::ConfigMap::decode(raw.as_slice()).unwrap();
    assert_eq!(cm.metadata.and_then(|m| m.name).as_deref(), Some("two"));

    // Errors are protobuf Status objects.
    let r = send(&client, "GET", &format!("{CONFIGMAPS}/missing"), "", PB, vec![]).await;
    assert_eq!((r.code, r.content_type.as_str()), (404, PB));
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "Status");
    let status = meta::Status::decode(raw.as_slice()).unwrap();
    assert_eq!((status.reason.as_deref(), status.code), (Some("NotFound"), Some(404)));
    assert_eq!(status.message.as_deref(), Some("configmaps \"missing\" not found"));

    // Malformed protobuf: a 400 that says why, never a 500.
    for bad in [b"k8s\0\x0a\x05ab".to_vec(), b"not protobuf".to_vec(), envelope("v1", "Nope", &configmap("x"))] {
        let r = send(&client, "POST", CONFIGMAPS, PB, PB, bad).await;
        assert_eq!(r.code, 400);
        let status = meta::Status::decode(open(&r.body).1.as_slice()).unwrap();
        assert_eq!(status.reason.as_deref(), Some("BadRequest"));
        assert!(status.message.unwrap().starts_with("error decoding protobuf: "));
    }

    // DeleteOptions in protobuf; the Success Status back in protobuf.
    let opts = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        propagation_policy: Some("Background".into()),
        preconditions: Some(meta::Preconditions { uid: Some(String::new()), resource_version: None }),
        ..Default::default()
    };
    let r = send(&client, "DELETE", &format!("{CONFIGMAPS}/one"), PB, PB, envelope("v1", "DeleteOptions", &opts)).await;
    assert_eq!((r.code, r.content_type.as_str()), (200, PB), "{}", String::from_utf8_lossy(&r.body));
    let status = meta::Status::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(status.status.as_deref(), Some("Success"));

    // Tables stay JSON; discovery answers JSON to a client that also takes JSON.
    let table_accept = format!("application/json;as=Table;v=v1;g=meta.k8s.io, {PB}");
    let r = send(&client, "GET", CONFIGMAPS, "", &table_accept, vec![]).await;
    assert_eq!(r.content_type, "application/json");
    assert_eq!(serde_json::from_slice::<Value>(&r.body).unwrap()["kind"], "Table");
    let r = send(&client, "GET", "/api", "", &format!("{PB}, application/json"), vec![]).await;
    assert_eq!((r.code, r.content_type.as_str()), (200, "application/json"));
    let r = send(&client, "GET", "/api", "", PB, vec![]).await;
    assert_eq!(r.code, 406);
}

#[tokio::test]
async fn deployments_in_protobuf() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let labels: std::collections::BTreeMap<String, String> = [("app".to_string(), "d".to_string())].into();
    // As `kubectl create deployment` writes it: zero values of non-pointer fields included.
    let d = apps::Deployment {
        metadata: Some(meta::ObjectMeta { name: Some("d".into()), labels: labels.clone(), ..Default::default() }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector { match_labels: labels.clone(), match_expressions: vec![] }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta {
                    labels: labels.clone(),
                    creation_timestamp: Some(meta::Time::default()),
                    ..Default::default()
                }),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: Some("busybox".into()),
                        image: Some("busybox".into()),
                        resources: Some(Default::default()),
                        termination_message_path: Some(String::new()),
                        image_pull_policy: Some(String::new()),
                        stdin: Some(false),
                        tty: Some(false),
                        ..Default::default()
                    }],
                    restart_policy: Some(String::new()),
                    dns_policy: Some(String::new()),
                    host_network: Some(false),
                    scheduler_name: Some(String::new()),
                    ..Default::default()
                }),
            }),
            strategy: Some(Default::default()),
            min_ready_seconds: Some(0),
            paused: Some(false),
            ..Default::default()
        }),
        status: Some(Default::default()),
    };
    let r = send(&client, "POST", DEPLOYMENTS, PB, PB, envelope("apps/v1", "Deployment", &d)).await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "Deployment");
    let created = apps::Deployment::decode(raw.as_slice()).unwrap();
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(0), "replicas 0 is a pointer's value, kept");
    assert_eq!(spec.strategy.and_then(|s| s.r#type).as_deref(), Some("RollingUpdate"));
    let pod = spec.template.unwrap().spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(pod.containers[0].termination_message_path.as_deref(), Some("/dev/termination-log"));

    let r = send(&client, "GET", &format!("{DEPLOYMENTS}/d"), "", "application/json", vec![]).await;
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["spec"]["replicas"], 0);
    assert!(v["spec"].get("paused").is_none() && v["spec"].get("minReadySeconds").is_none(), "{v}");
    assert_eq!(v["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always");
    assert!(v["spec"]["template"]["metadata"].get("creationTimestamp").is_none_or(Value::is_null), "{v}");

    // Update in protobuf.
    let mut updated = created.clone();
    updated.spec.as_mut().unwrap().replicas = Some(3);
    let r =
        send(&client, "PUT", &format!("{DEPLOYMENTS}/d"), PB, PB, envelope("apps/v1", "Deployment", &updated)).await;
    assert_eq!(r.code, 200, "{}", String::from_utf8_lossy(&r.body));
    let got = apps::Deployment::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(got.spec.unwrap().replicas, Some(3));

    // List and the scale subresource.
    let r = send(&client, "GET", DEPLOYMENTS, "", PB, vec![]).await;
    let list = apps::DeploymentList::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);
    let r = send(&client, "GET", &format!("{DEPLOYMENTS}/d/scale"), "", PB, vec![]).await;
    assert_eq!(open(&r.body).0, "Scale");

    // Conflicts and validation errors come back as protobuf Status too.
    let r = send(&client, "POST", DEPLOYMENTS, PB, PB, envelope("apps/v1", "Deployment", &d)).await;
    assert_eq!(r.code, 409);
    let status = meta::Status::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(status.reason.as_deref(), Some("AlreadyExists"));
    let mut invalid = d.clone();
    invalid.metadata.as_mut().unwrap().name = Some("Bad_Name".into());
    let r = send(&client, "POST", DEPLOYMENTS, PB, PB, envelope("apps/v1", "Deployment", &invalid)).await;
    assert_eq!(r.code, 422);
    let status = meta::Status::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(status.reason.as_deref(), Some("Invalid"));
    assert!(!status.details.unwrap().causes.is_empty());
}
