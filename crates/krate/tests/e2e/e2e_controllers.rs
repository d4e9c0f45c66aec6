//! The controllers inside `krate server`: the default ServiceAccount and the
//! kube-root-ca.crt ConfigMap in every namespace, and namespace deletion with upstream's
//! status conditions.

use std::time::{Duration, Instant};

use crate::common::{Server, free_port};

/// Polls `check` (bounded) until it returns Some.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ok_stdout(out: std::process::Output) -> Option<String> {
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn every_namespace_gets_a_default_service_account_and_the_root_ca() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    srv.kubectl_ok(&["create", "namespace", "team"]);
    let uid = eventually("the default service account", || {
        ok_stdout(srv.kubectl(&["get", "sa", "default", "-n", "team", "-o", "jsonpath={.metadata.uid}"]))
    });
    let ca = std::fs::read_to_string(srv.data_dir.join("server/tls/server-ca.crt")).unwrap();
    let published = eventually("kube-root-ca.crt", || {
        ok_stdout(srv.kubectl(&["get", "cm", "kube-root-ca.crt", "-n", "team", "-o", "jsonpath={.data.ca\\.crt}"]))
    });
    assert_eq!(published.trim(), ca.trim());
    // The system namespaces have them too.
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        eventually(ns, || ok_stdout(srv.kubectl(&["get", "sa", "default", "-n", ns])));
        eventually(ns, || ok_stdout(srv.kubectl(&["get", "cm", "kube-root-ca.crt", "-n", ns])));
    }

    // Deleted or changed copies come back.
    srv.kubectl_ok(&["delete", "sa", "default", "-n", "team"]);
    eventually("a new default service account", || {
        ok_stdout(srv.kubectl(&["get", "sa", "default", "-n", "team", "-o", "jsonpath={.metadata.uid}"]))
            .filter(|u| *u != uid)
    });
    srv.kubectl_ok(&["patch", "cm", "kube-root-ca.crt", "-n", "team", "-p", r#"{"data":{"ca.crt":"tampered"}}"#]);
    eventually("the CA restored", || {
        ok_stdout(srv.kubectl(&["get", "cm", "kube-root-ca.crt", "-n", "team", "-o", "jsonpath={.data.ca\\.crt}"]))
            .filter(|d| d.trim() == ca.trim())
    });
    srv.stop();
}

#[test]
fn deleting_a_namespace_deletes_its_content_then_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    srv.kubectl_ok(&["create", "namespace", "doomed"]);
    srv.kubectl_ok(&["create", "configmap", "plain", "-n", "doomed"]);
    srv.kubectl_ok(&["create", "secret", "generic", "s", "-n", "doomed", "--from-literal=k=v"]);
    srv.kubectl_ok(&["create", "deployment", "web", "-n", "doomed", "--image=busybox"]);
    srv.kubectl_ok(&["create", "configmap", "held", "-n", "doomed"]);
    srv.kubectl_ok(&[
        "patch",
        "cm",
        "held",
        "-n",
        "doomed",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    srv.kubectl_ok(&["delete", "namespace", "doomed", "--wait=false"]);

    // Everything without a finalizer goes; the held ConfigMap stays, and the status says so.
    let jsonpath = |t: &str| format!("jsonpath={{.status.conditions[?(@.type==\"{t}\")].message}}");
    let remaining = eventually("the remaining-content condition", || {
        ok_stdout(srv.kubectl(&["get", "ns", "doomed", "-o", &jsonpath("NamespaceContentRemaining")]))
            .filter(|m| m == "Some resources are remaining: configmaps has 1 resource instances")
    });
    assert!(!remaining.is_empty());
    assert_eq!(
        srv.kubectl_ok(&["get", "ns", "doomed", "-o", &jsonpath("NamespaceFinalizersRemaining")]),
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    assert_eq!(
        srv.kubectl_ok(&["get", "ns", "doomed", "-o", &jsonpath("NamespaceDeletionDiscoveryFailure")]),
        "All resources successfully discovered"
    );
    for kind in ["secrets", "deployments", "serviceaccounts"] {
        let left = srv.kubectl_ok(&["get", kind, "-n", "doomed", "-o", "name"]);
        assert_eq!(left.trim(), "", "{kind} left: {left}");
    }
    assert_eq!(srv.kubectl_ok(&["get", "cm", "-n", "doomed", "-o", "name"]).trim(), "configmap/held");

    // Once the finalizer is gone, so is the namespace.
    srv.kubectl_ok(&[
        "patch",
        "cm",
        "held",
        "-n",
        "doomed",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    eventually("the namespace removed", || {
        let out = srv.kubectl(&["get", "ns", "doomed"]);
        String::from_utf8_lossy(&out.stderr).contains("NotFound").then_some(())
    });
    srv.stop();
}

#[test]
fn the_controller_manager_runs_alone_against_a_remote_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start_with(&dir.path().join("data"), free_port(), &["--disable-controller-manager"]);
    let log = std::fs::File::create(dir.path().join("cm.log")).unwrap();
    let mut manager = std::process::Command::new(env!("CARGO_BIN_EXE_krate"))
        .arg("controller-manager")
        .arg("--kubeconfig")
        .arg(srv.kubeconfig())
        .stderr(log)
        .spawn()
        .expect("krate controller-manager starts");
    srv.kubectl_ok(&["create", "namespace", "remote"]);
    let ca = std::fs::read_to_string(srv.data_dir.join("server/tls/server-ca.crt")).unwrap();
    let published = eventually("kube-root-ca.crt from the remote controller manager", || {
        ok_stdout(srv.kubectl(&["get", "cm", "kube-root-ca.crt", "-n", "remote", "-o", "jsonpath={.data.ca\\.crt}"]))
            .filter(|d| !d.is_empty())
    });
    assert_eq!(published.trim(), ca.trim(), "the CA taken from the kubeconfig is the cluster's");
    let holder = ok_stdout(srv.lease_field("kube-controller-manager", "holderIdentity"));
    assert!(holder.is_some_and(|h| !h.is_empty()), "it elected itself leader");
    manager.kill().unwrap();
    manager.wait().unwrap();
    srv.stop();
}
