//! Discovery, health, version, metrics and access over HTTPS with kube-rs.

use std::collections::BTreeSet;

use crate::common::TestServer;
use kube::discovery::{Discovery, Scope};

fn get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(vec![]).unwrap()
}

/// Rows of upstream v1.36's `kubectl api-resources` for the built-ins.
fn upstream_api_resources() -> BTreeSet<String> {
    include_str!("../../../krate-api/tests/data/api-resources-v1.36.txt")
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[tokio::test]
async fn discovery_matches_upstream_api_resources() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut rows = BTreeSet::new();
    for group in discovery.groups().filter(|g| !g.name().is_empty()) {
        // api-resources lists each resource once, in its group's preferred version.
        for (ar, caps) in group.recommended_resources() {
            let short = client
                .list_api_group_resources(&ar.api_version)
                .await
                .ok()
                .and_then(|l| l.resources.into_iter().find(|r| r.name == ar.plural))
                .and_then(|r| r.short_names)
                .unwrap_or_default();
            let namespaced = caps.scope == Scope::Namespaced;
            let mut cols = vec![ar.plural.clone()];
            if !short.is_empty() {
                cols.push(short.join(","));
            }
            cols.extend([ar.api_version.clone(), namespaced.to_string(), ar.kind.clone()]);
            rows.insert(cols.join(" "));
        }
    }
    let core = client.list_core_api_resources("v1").await.unwrap();
    for r in core.resources.iter().filter(|r| !r.name.contains('/')) {
        let mut cols = vec![r.name.clone()];
        if let Some(s) = r.short_names.as_ref().filter(|s| !s.is_empty()) {
            cols.push(s.join(","));
        }
        cols.extend(["v1".to_string(), r.namespaced.to_string(), r.kind.clone()]);
        rows.insert(cols.join(" "));
    }
    let expected = upstream_api_resources();
    let missing: Vec<_> = expected.difference(&rows).collect();
    let extra: Vec<_> = rows.difference(&expected).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing: {missing:#?}\nextra: {extra:#?}");

    // Subresources and their kinds, as upstream reports them.
    let pods = core.resources.iter().find(|r| r.name == "pods/eviction").unwrap();
    assert_eq!(
        (pods.kind.as_str(), pods.group.as_deref(), pods.version.as_deref()),
        ("Eviction", Some("policy"), Some("v1"))
    );
    let apps = client.list_api_group_resources("apps/v1").await.unwrap();
    let scale = apps.resources.iter().find(|r| r.name == "deployments/scale").unwrap();
    assert_eq!((scale.kind.as_str(), scale.group.as_deref()), ("Scale", Some("autoscaling")));

    // Removed versions are not served.
    for path in [
        "/apis/batch/v1beta1",
        "/apis/batch/v1beta1/namespaces/default/cronjobs",
        "/apis/policy/v1beta1/podsecuritypolicies",
        "/apis/discovery.k8s.io/v1beta1",
    ] {
        match client.request::<serde_json::Value>(get(path)).await {
            Err(kube::Error::Api(e)) => assert_eq!(e.code, 404, "{path}"),
            other => panic!("{path}: expected 404, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn health_version_metrics_and_anonymous_access() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    let anon = srv.anonymous().await;

    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(anon.request_text(get(path)).await.unwrap(), "ok", "{path}");
    }
    // system:public-info-viewer names the exact paths: single checks need more (admin).
    for path in ["/readyz/etcd", "/livez/ping"] {
        assert!(anon.request_text(get(path)).await.is_err(), "{path}");
        assert_eq!(admin.request_text(get(path)).await.unwrap(), "ok", "{path}");
    }
    let verbose = anon.request_text(get("/readyz?verbose")).await.unwrap();
    assert!(verbose.contains("[+]etcd ok") && verbose.ends_with("readyz check passed\n"), "{verbose}");
    let v = anon.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "36"));
    assert!(v.git_version.starts_with("v1.36.") && v.git_version.contains("krate"), "{}", v.git_version);

    // Anonymous users get the public paths only; discovery and resources are refused.
    for path in ["/api", "/apis", "/api/v1/namespaces"] {
        match anon.request::<serde_json::Value>(get(path)).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{path}");
                assert!(e.message.contains("system:anonymous"), "{}", e.message);
            }
            other => panic!("{path}: expected 403, got {other:?}"),
        }
    }
    let api: serde_json::Value = admin.request(get("/api")).await.unwrap();
    assert_eq!(api["versions"][0], "v1");

    let _: serde_json::Value = admin.request(get("/api/v1/namespaces")).await.unwrap();
    let metrics = admin.request_text(get("/metrics")).await.unwrap();
    for name in [
        "apiserver_request_total",
        "apiserver_request_duration_seconds",
        "krate_store_request_duration_seconds",
        "krate_store_revision",
    ] {
        assert!(metrics.contains(name), "metrics lack {name}");
    }
    assert!(metrics.contains("resource=\"namespaces\""));
}
