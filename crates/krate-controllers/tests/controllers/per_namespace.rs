//! The per-namespace controllers through the real API server: each new namespace gets
//! its default ServiceAccount and the kube-root-ca.crt ConfigMap, and gets them back
//! when they are deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn namespaces_get_their_service_account_and_root_ca_back() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["serviceaccount", "root-ca-cert-publisher"]);
    let client = cluster.admin().await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "team-a");
    let ca = eventually("root CA published", WAIT, || async { cms.get_opt("kube-root-ca.crt").await.unwrap() }).await;
    assert_eq!(ca.data.unwrap()["ca.crt"], cluster.running.pki.ca.cert_pem);
    eventually("default SA", WAIT, || async { sas.get_opt("default").await.unwrap() }).await;

    cms.delete("kube-root-ca.crt", &DeleteParams::default()).await.unwrap();
    let back = eventually("root CA back", WAIT, || async { cms.get_opt("kube-root-ca.crt").await.unwrap() }).await;
    assert_eq!(back.data.unwrap()["ca.crt"], cluster.running.pki.ca.cert_pem);
}
