//! The ResourceQuota controller through the real API server: status.used follows the
//! namespace's pods, services, configmaps and other objects, within the quota's scopes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ResourceQuota, Service};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);
const NS: &str = "quota";

fn create<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, cpu: Option<&str>) -> Pod {
    let resources = match cpu {
        Some(cpu) => json!({"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "128Mi"}}),
        None => json!({}),
    };
    create(
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx", "resources": resources}]}}),
    )
}

async fn used(quotas: &Api<ResourceQuota>, name: &str) -> BTreeMap<String, String> {
    let q = quotas.get(name).await.unwrap();
    q.status.and_then(|s| s.used).unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
}

async fn wait_used(quotas: &Api<ResourceQuota>, name: &str, want: &[(&str, &str)]) -> BTreeMap<String, String> {
    let what = format!("{name} used {want:?}");
    eventually(&what, WAIT, || async {
        let used = used(quotas, name).await;
        want.iter().all(|(k, v)| used.get(*k).map(String::as_str) == Some(*v)).then_some(used)
    })
    .await
}

#[tokio::test]
async fn quota_usage_follows_the_namespace() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["resourcequota"]);
    let client = cluster.admin().await;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &create(json!({"metadata": {"name": NS}})))
        .await
        .unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();

    // Compute limits with the NotBestEffort scope (best-effort pods need not state
    // requests), object counts unscoped, and best-effort pods counted apart.
    let compute = json!({"pods": "10", "requests.cpu": "4", "requests.memory": "1Gi", "limits.memory": "2Gi"});
    quotas
        .create(
            &pp,
            &create(json!({"metadata": {"name": "compute"}, "spec": {"hard": compute, "scopes": ["NotBestEffort"]}})),
        )
        .await
        .unwrap();
    let objects = json!({"pods": "10", "services": "5", "services.nodeports": "5", "services.loadbalancers": "2",
        "count/configmaps": "5", "count/deployments.apps": "3", "secrets": "5"});
    quotas.create(&pp, &create(json!({"metadata": {"name": "objects"}, "spec": {"hard": objects}}))).await.unwrap();
    quotas
        .create(&pp, &create(json!({"metadata": {"name": "best-effort"}, "spec": {"hard": {"pods": "10"}, "scopes": ["BestEffort"]}})))
        .await
        .unwrap();
    let first = wait_used(&quotas, "objects", &[("pods", "0"), ("services", "0")]).await;
    assert_eq!(first.len(), 7, "every hard resource has a used value: {first:?}");
    wait_used(&quotas, "compute", &[("pods", "0")]).await;
    wait_used(&quotas, "best-effort", &[("pods", "0")]).await;
    let status = quotas.get("compute").await.unwrap().status.unwrap();
    assert_eq!(status.hard.unwrap()["requests.memory"].0, "1Gi");

    pods.create(&pp, &pod("a", Some("500m"))).await.unwrap();
    pods.create(&pp, &pod("b", Some("1"))).await.unwrap();
    pods.create(&pp, &pod("c", None)).await.unwrap();
    services
        .create(
            &pp,
            &create(json!({"metadata": {"name": "np"}, "spec": {"type": "NodePort", "selector": {"a": "b"},
            "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}})),
        )
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&pp, &create(json!({"metadata": {"name": "cm"}})))
        .await
        .unwrap();
    let deployment: Deployment =
        create(json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}));
    Api::<Deployment>::namespaced(client.clone(), NS).create(&pp, &deployment).await.unwrap();

    wait_used(
        &quotas,
        "compute",
        &[("pods", "2"), ("requests.cpu", "1500m"), ("requests.memory", "128Mi"), ("limits.memory", "256Mi")],
    )
    .await;
    wait_used(
        &quotas,
        "objects",
        &[
            ("pods", "3"),
            ("services", "1"),
            ("services.nodeports", "2"),
            ("services.loadbalancers", "0"),
            ("count/configmaps", "1"),
            ("count/deployments.apps", "1"),
        ],
    )
    .await;
    wait_used(&quotas, "best-effort", &[("pods", "1")]).await;

    // Finished and deleted pods stop counting.
    let failed = json!({"status": {"phase": "Failed"}});
    pods.patch_status("a", &PatchParams::default(), &Patch::Merge(&failed)).await.unwrap();
    pods.delete("c", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    wait_used(&quotas, "compute", &[("pods", "1"), ("requests.cpu", "1")]).await;
    wait_used(&quotas, "objects", &[("pods", "1")]).await;
    wait_used(&quotas, "best-effort", &[("pods", "0")]).await;
}

#[tokio::test]
async fn creates_beyond_a_quota_are_refused() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["resourcequota"]);
    let client = cluster.admin().await;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &create(json!({"metadata": {"name": NS}})))
        .await
        .unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    let hard = json!({"pods": "2", "requests.cpu": "1", "configmaps": "1"});
    quotas.create(&pp, &create(json!({"metadata": {"name": "small"}, "spec": {"hard": hard}}))).await.unwrap();
    wait_used(&quotas, "small", &[("pods", "0")]).await;

    // Pods must state what the quota limits.
    let err = pods.create(&pp, &pod("plain", None)).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("{err}") };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(status.message, "pods \"plain\" is forbidden: failed quota: small: must specify requests.cpu");

    // Back-to-back creates are charged at admission, before the controller recounts.
    pods.create(&pp, &pod("a", Some("600m"))).await.unwrap();
    let err = pods.create(&pp, &pod("b", Some("600m"))).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("{err}") };
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "pods \"b\" is forbidden: exceeded quota: small, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"
    );
    configmaps.create(&pp, &create(json!({"metadata": {"name": "one"}}))).await.unwrap();
    let err = configmaps.create(&pp, &create(json!({"metadata": {"name": "two"}}))).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 403 && s.message.contains("exceeded quota: small")));

    // Freed usage is usable again once the controller recounts.
    pods.delete("a", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    wait_used(&quotas, "small", &[("requests.cpu", "0")]).await;
    // The create may meet the quota mid-write (a conflict admission retries, or a recount
    // in flight): it succeeds within a short, bounded wait.
    eventually("b admitted", WAIT, || async { pods.create(&pp, &pod("b", Some("600m"))).await.ok() }).await;
}

#[tokio::test]
async fn updates_are_charged_for_what_they_add() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["resourcequota"]);
    let client = cluster.admin().await;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &create(json!({"metadata": {"name": NS}})))
        .await
        .unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    let hard = json!({"services.nodeports": "0", "services": "5"});
    quotas.create(&pp, &create(json!({"metadata": {"name": "ports"}, "spec": {"hard": hard}}))).await.unwrap();
    wait_used(&quotas, "ports", &[("services", "0")]).await;
    let svc = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}});
    services.create(&pp, &create(svc)).await.unwrap();
    // ClusterIP to NodePort asks for a node port the quota does not have.
    let patch = json!({"spec": {"type": "NodePort"}});
    let err = services.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("{err}") };
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "services \"web\" is forbidden: exceeded quota: ports, requested: services.nodeports=1, used: services.nodeports=0, limited: services.nodeports=0"
    );
    // An update adding nothing the quota limits passes.
    let patch = json!({"metadata": {"labels": {"tier": "front"}}});
    services.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}
