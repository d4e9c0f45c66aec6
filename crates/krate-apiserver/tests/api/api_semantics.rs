//! More upstream semantics over HTTPS: expired continue tokens, watch timeouts, YAML
//! responses, content negotiation, dry runs on every verb, deletecollection.

use std::time::{Duration, Instant};

use crate::common::TestServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"batch": "x"}}, "data": {"k": "v"}})).unwrap()
}

fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_expired_continue_token_is_gone_with_a_way_forward() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"))).await.unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.unwrap();
    // Move on and compact history past the first page's revision.
    api.create(&PostParams::default(), &cm("later")).await.unwrap();
    let store = srv.running.server.registry.store.clone();
    store.compact(store.current_revision().await.unwrap()).await.unwrap();

    let raw = http::Request::get(format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}"))
        .body(vec![])
        .unwrap();
    let e = status_of(client.request::<serde_json::Value>(raw).await);
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    assert!(e.message.contains("The provided continue parameter is too old"), "{}", e.message);
    let inconsistent = e.metadata.and_then(|m| m.continue_).expect("a token to continue inconsistently");
    let rest = api.list(&ListParams::default().limit(10).continue_token(&inconsistent)).await.unwrap();
    let names: Vec<String> = rest.items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert_eq!(names, vec!["c2", "c3", "c4", "later"], "continues after the last key, at the latest revision");
}

#[tokio::test]
async fn watches_end_at_their_timeout() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let started = Instant::now();
    let mut w = api.watch(&WatchParams::default().timeout(1), "0").await.unwrap().boxed();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(item) = w.next().await {
            item.unwrap();
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch ended");
    assert!(started.elapsed() >= Duration::from_millis(900), "not before its timeout");
}

#[tokio::test]
async fn yaml_responses_and_content_negotiation() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("y")).await.unwrap();
    let req = |accept: &str| {
        http::Request::get("/api/v1/namespaces/default/configmaps/y").header("accept", accept).body(vec![]).unwrap()
    };
    let yaml = client.request_text(req("application/yaml")).await.unwrap();
    assert!(yaml.contains("kind: ConfigMap") && yaml.contains("name: y"), "{yaml}");
    let json = client.request_text(req("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")).await.unwrap();
    assert!(json.starts_with('{'));
    let e = status_of(client.request_text(req("text/csv")).await);
    assert_eq!((e.code, e.reason.as_str()), (406, "NotAcceptable"));
}

#[tokio::test]
async fn dry_run_on_every_verb_changes_nothing() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let orig = api.create(&PostParams::default(), &cm("d")).await.unwrap();
    let dry_post = PostParams { dry_run: true, ..Default::default() };
    let mut changed = orig.clone();
    changed.data = Some([("k".to_string(), "changed".to_string())].into());
    let out = api.replace("d", &dry_post, &changed).await.unwrap();
    assert_eq!(out.data.unwrap()["k"], "changed", "the dry run answers with the result");
    let dry_patch = PatchParams { dry_run: true, ..Default::default() };
    api.patch("d", &dry_patch, &Patch::Merge(json!({"data": {"k": "patched"}}))).await.unwrap();
    let dry_delete = DeleteParams { dry_run: true, ..Default::default() };
    api.delete("d", &dry_delete).await.unwrap();
    let now = api.get("d").await.unwrap();
    assert_eq!(now.data.unwrap()["k"], "v");
    assert_eq!(now.metadata.resource_version, orig.metadata.resource_version, "nothing was written");
    let bad = http::Request::post("/api/v1/namespaces/default/configmaps?dryRun=Some")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&cm("z")).unwrap())
        .unwrap();
    assert_eq!(status_of(srv.client().await.request::<serde_json::Value>(bad).await).code, 400);
}

#[tokio::test]
async fn delete_collection_by_selector() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    for i in 0..4 {
        api.create(&PostParams::default(), &cm(&format!("b{i}"))).await.unwrap();
    }
    let mut keep = cm("keep");
    keep.metadata.labels = Some([("batch".to_string(), "y".to_string())].into());
    api.create(&PostParams::default(), &keep).await.unwrap();
    let deleted =
        api.delete_collection(&DeleteParams::default(), &ListParams::default().labels("batch=x")).await.unwrap();
    let list = deleted.left().expect("the deleted objects");
    assert_eq!(list.items.len(), 4);
    let left: Vec<String> =
        api.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert_eq!(left, vec!["keep"]);
}

#[tokio::test]
async fn tables_for_server_side_printing() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("t1")).await.unwrap();
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let req = |path: &str| http::Request::get(path).header("accept", accept).body(vec![]).unwrap();
    let t: serde_json::Value = client.request(req("/api/v1/namespaces/default/configmaps")).await.unwrap();
    assert_eq!((t["kind"].as_str(), t["apiVersion"].as_str()), (Some("Table"), Some("meta.k8s.io/v1")));
    let cols: Vec<&str> =
        t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cols, vec!["Name", "Data", "Age"]);
    let row = &t["rows"][0];
    assert_eq!((row["cells"][0].as_str(), row["cells"][1].as_i64()), (Some("t1"), Some(1)));
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata", "metadata by default");
    assert!(t["metadata"]["resourceVersion"].as_str().is_some());
    let t: serde_json::Value =
        client.request(req("/api/v1/namespaces/default/configmaps/t1?includeObject=Object")).await.unwrap();
    assert_eq!(t["rows"][0]["object"]["data"]["k"], "v");
    let t: serde_json::Value =
        client.request(req("/api/v1/namespaces/default/configmaps?includeObject=None")).await.unwrap();
    assert!(t["rows"][0].get("object").is_none());
    // Kinds without their own columns get upstream's default table.
    let t: serde_json::Value =
        client.request(req("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles")).await.unwrap();
    let cols: Vec<&str> =
        t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cols, vec!["Name", "Created At"]);
}

/// No client input makes the server fail: malformed bodies against every creatable
/// resource get 4xx answers, and the server stays ready.
#[tokio::test]
async fn malformed_bodies_never_cause_server_errors() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let mut paths = Vec::new();
    let core = client.list_core_api_resources("v1").await.unwrap();
    for r in core.resources.iter().filter(|r| !r.name.contains('/') && r.verbs.iter().any(|v| v == "create")) {
        paths.push(if r.namespaced {
            format!("/api/v1/namespaces/default/{}", r.name)
        } else {
            format!("/api/v1/{}", r.name)
        });
    }
    for g in client.list_api_groups().await.unwrap().groups {
        let gv = g.preferred_version.unwrap().group_version;
        for r in client.list_api_group_resources(&gv).await.unwrap().resources {
            if !r.name.contains('/') && r.verbs.iter().any(|v| v == "create") {
                let ns = if r.namespaced { "namespaces/default/" } else { "" };
                paths.push(format!("/apis/{gv}/{ns}{}", r.name));
            }
        }
    }
    assert!(paths.len() > 60, "every creatable resource: {}", paths.len());
    let bodies = [
        json!({"metadata": {"name": "x"}, "spec": "text"}),
        json!({"metadata": {"name": "x"}, "spec": {"template": 5, "selector": "s", "containers": "c", "ports": [1, "a", null]}}),
        json!({"metadata": {"name": "x", "labels": [1]}}),
        json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": 5, "image": []}], "replicas": "many"}}),
        json!({"metadata": {"name": "x"}, "data": {"k": 5}, "type": 7, "rules": "r", "subjects": 5, "roleRef": []}),
        json!({"metadata": {"name": "x"}, "spec": null, "status": "s", "involvedObject": 5, "target": "t"}),
    ];
    for path in &paths {
        for body in &bodies {
            let req = http::Request::post(path.as_str())
                .header("content-type", "application/json")
                .body(serde_json::to_vec(body).unwrap())
                .unwrap();
            match client.request::<serde_json::Value>(req).await {
                Ok(_) => {
                    let del = http::Request::delete(format!("{path}/x")).body(vec![]).unwrap();
                    let _ = client.request::<serde_json::Value>(del).await;
                }
                Err(kube::Error::Api(e)) => assert!(e.code < 500, "{path} {body}: {} {}", e.code, e.message),
                Err(e) => panic!("{path} {body}: the server failed: {e}"),
            }
        }
        let patch = http::Request::patch(format!("{path}/default"))
            .header("content-type", "application/merge-patch+json")
            .body(b"{\"spec\": 5}".to_vec())
            .unwrap();
        if let Err(kube::Error::Api(e)) = client.request::<serde_json::Value>(patch).await {
            assert!(e.code < 500, "PATCH {path}: {} {}", e.code, e.message);
        }
    }
    assert_eq!(client.request_text(http::Request::get("/readyz").body(vec![]).unwrap()).await.unwrap(), "ok");
}
