//! `krate server --storage etcd` against a real etcd-server, with kubectl.

use crate::common::{Server, free_port, squeeze};
use krate_store::testsuite::etcd_process::EtcdCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_runs_on_etcd() {
    let etcd = EtcdCluster::start(1).await;
    let endpoints = etcd.endpoints().join(",");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let args = ["--storage", "etcd", "--etcd-servers", endpoints.as_str()];
    // The harness waits with blocking sleeps; keep them off the runtime's other work.
    let srv = tokio::task::block_in_place(|| Server::start_with(&data, port, &args));
    assert!(
        squeeze(&srv.kubectl_ok(&["get", "namespaces", "-o", "name"])).contains(&"namespace/kube-system".to_string())
    );
    let cm = dir.path().join("cm.yaml");
    std::fs::write(&cm, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: on-etcd\ndata:\n  k: v\n").unwrap();
    assert!(srv.kubectl_ok(&["create", "--validate=false", "-f", cm.to_str().unwrap()]).contains("created"));
    assert_eq!(srv.kubectl_ok(&["get", "cm", "on-etcd", "-o", "jsonpath={.data.k}"]), "v");
    let svc = squeeze(&srv.kubectl_ok(&["get", "svc", "kubernetes"]));
    assert!(svc[1].starts_with("kubernetes ClusterIP 10.43.0.1 "), "{svc:?}");
    assert!(srv.kubectl_ok(&["delete", "cm", "on-etcd"]).contains("deleted"));

    // The state lives in etcd: a restart on an empty data dir still has the namespaces.
    srv.stop();
    let fresh = dir.path().join("fresh");
    let srv = tokio::task::block_in_place(|| Server::start_with(&fresh, port, &args));
    assert_eq!(srv.kubectl_ok(&["get", "ns", "-o", "name"]).lines().count(), 4);
    srv.stop();
    drop(etcd);
}
