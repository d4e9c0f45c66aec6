//! kube-rs clients over the in-process transport (what controllers inside
//! `krate server` use): same semantics as over HTTPS, including watches.

use std::time::Duration;

use crate::common::TestServer;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
}

#[tokio::test]
async fn in_process_clients_take_the_same_road() {
    let srv = TestServer::start().await;
    let server = srv.running.server.clone();
    let controller = kube::Client::new(
        InProcess::new(server.clone(), user("system:kube-controller-manager", &["system:masters"])),
        "default",
    );
    let api: Api<ConfigMap> = Api::default_namespaced(controller.clone());

    let stream = watcher(api.clone(), watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "inproc"}, "data": {"a": "b"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap().unwrap().unwrap();
    assert_eq!(seen.metadata.name.as_deref(), Some("inproc"));

    // What one transport writes, the other reads.
    let over_https: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    assert_eq!(over_https.get("inproc").await.unwrap().data.unwrap()["a"], "b");

    // Authorization applies in-process too.
    let nobody = kube::Client::new(InProcess::new(server, user("someone", &["system:authenticated"])), "default");
    match Api::<ConfigMap>::default_namespaced(nobody).get("inproc").await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("expected 403, got {other:?}"),
    }
}
