//! Consistent GETs from the watch cache: no store read per GET, and never older than a
//! write the client saw acknowledged. Its own test binary, outside the `api` one: the
//! store metrics it counts are process-wide, and other tests' reads would be counted.

#[path = "api/common/mod.rs"]
mod common;

use common::TestServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

async fn store_gets(client: &kube::Client) -> u64 {
    let text = client.request_text(http::Request::get("/metrics").body(vec![]).unwrap()).await.unwrap();
    text.lines()
        .find(|l| l.starts_with("krate_store_request_duration_seconds_count") && l.contains("operation=\"get\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn gets_come_from_the_cache_and_read_your_writes() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"n": "0"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.get("c").await.unwrap(); // starts the ConfigMap cache
    let before = store_gets(&client).await;
    for i in 1..=20 {
        let written = api
            .patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"n": i.to_string()}})))
            .await
            .unwrap();
        let read = api.get("c").await.unwrap();
        assert_eq!(read.data.unwrap()["n"], i.to_string(), "a GET right after a write sees it");
        assert_eq!(read.metadata.resource_version, written.metadata.resource_version);
    }
    let after = store_gets(&client).await;
    // The patches read the store (compare-and-swap needs it); the 20 GETs did not.
    assert!(
        after - before <= 20 + 2,
        "GETs were served from the cache: {} store reads for 20 patches and 20 GETs",
        after - before
    );
    assert!(api.get_opt("missing").await.unwrap().is_none());
}
