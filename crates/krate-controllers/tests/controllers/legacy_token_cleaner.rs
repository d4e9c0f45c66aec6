//! The legacy token cleaner through the real API server: with tracking on for long
//! enough, an unused auto-generated token is labelled invalid, one invalid for a whole
//! period is deleted, and recently used, mounted and hand-made tokens stay untouched.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);
const INVALID_SINCE: &str = "kubernetes.io/legacy-token-invalid-since";

fn token(name: &str, labels: serde_json::Value) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"kubernetes.io/service-account.name": "legacy"}},
        "type": "kubernetes.io/service-account-token",
    }))
    .unwrap()
}

fn label(s: &Secret, key: &str) -> Option<String> {
    s.metadata.labels.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn unused_auto_generated_tokens_are_invalidated_then_deleted() {
    let mut cluster = TestCluster::start().await;
    let admin = cluster.admin().await;
    // The API server started tracking today; pretend it has tracked for years.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-system");
    let tracking = "kube-apiserver-legacy-service-account-token-tracking";
    let since = cms.get(tracking).await.unwrap().data.unwrap()["since"].clone();
    assert_eq!(since, jiff::Timestamp::now().strftime("%Y-%m-%d").to_string());
    cms.patch(tracking, &PatchParams::default(), &Patch::Merge(json!({"data": {"since": "2020-01-01"}})))
        .await
        .unwrap();

    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let listed = ["unused", "used-today", "mounted", "invalid-long-ago"];
    let sa = json!({"metadata": {"name": "legacy"}, "secrets": listed.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()});
    accounts.create(&PostParams::default(), &serde_json::from_value(sa).unwrap()).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    for (name, labels) in [
        ("unused", json!({})),
        ("used-today", json!({"kubernetes.io/legacy-token-last-used": today})),
        ("mounted", json!({})),
        ("invalid-long-ago", json!({INVALID_SINCE: "2020-01-02"})),
        ("by-hand", json!({})),
    ] {
        secrets.create(&PostParams::default(), &token(name, labels)).await.unwrap();
    }
    let pod = json!({"metadata": {"name": "user"}, "spec": {
        "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "t", "secret": {"secretName": "mounted"}}]}});
    Api::<Pod>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &serde_json::from_value(pod).unwrap())
        .await
        .unwrap();
    // Older than the (short) clean-up period before the cleaner first looks.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.controllers_with(&["legacy-service-account-token-cleaner"], |s| {
        s.legacy_token_cleaner.clean_up_period = Duration::from_secs(1);
        s.legacy_token_cleaner.sync_interval = Duration::from_millis(300);
    });

    let unused = eventually("the unused token invalidated", WAIT, || async {
        let s = secrets.get("unused").await.unwrap();
        label(&s, INVALID_SINCE).is_some().then_some(s)
    })
    .await;
    assert_eq!(label(&unused, INVALID_SINCE).as_deref(), Some(today.as_str()));
    eventually("the long-invalid token deleted", WAIT, || async {
        secrets.get_opt("invalid-long-ago").await.unwrap().is_none().then_some(())
    })
    .await;
    // A few more rounds change nothing else.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in ["used-today", "mounted", "by-hand"] {
        let s = secrets.get(name).await.unwrap();
        assert_eq!(label(&s, INVALID_SINCE), None, "{name} was invalidated");
    }
    assert!(secrets.get_opt("unused").await.unwrap().is_some(), "invalid only since today: kept");
}
