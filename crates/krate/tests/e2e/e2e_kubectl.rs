//! kubectl 1.32 against `krate server --disable-agent`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, free_port, kubectl_binary, squeeze};

fn write(dir: &std::path::Path, name: &str, yaml: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

#[test]
fn kubectl_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());

    let version = srv.kubectl_ok(&["version"]);
    assert!(version.contains("Server Version: v1.36.0+krate"), "{version}");
    let resources = squeeze(&srv.kubectl_ok(&["api-resources"]));
    assert!(resources.contains(&"deployments deploy apps/v1 true Deployment".to_string()), "{resources:?}");
    assert!(resources.contains(&"namespaces ns v1 false Namespace".to_string()));
    let versions = srv.kubectl_ok(&["api-versions"]);
    for gv in ["apps/v1", "autoscaling/v2", "batch/v1", "v1"] {
        assert!(versions.lines().any(|l| l == gv), "{gv} missing from {versions}");
    }
    assert!(!versions.contains("batch/v1beta1"));
    let info = srv.kubectl_ok(&["cluster-info"]);
    assert!(info.contains(&format!("Kubernetes control plane is running at https://127.0.0.1:{}", srv.port)), "{info}");
    let raw = srv.kubectl_ok(&["get", "--raw", "/apis/apps"]);
    assert!(raw.contains("\"preferredVersion\":{\"groupVersion\":\"apps/v1\""), "{raw}");

    // Objects from files, with kubectl's default strict validation (done by the server).
    let ns = write(dir.path(), "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n");
    let cm = write(
        dir.path(),
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team\ndata:\n  a: b\n",
    );
    let deploy = write(
        dir.path(),
        "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers: [{name: c, image: busybox}]\n",
    );
    assert!(srv.kubectl_ok(&["create", "-f", &ns]).contains("namespace/team created"));
    assert!(srv.kubectl_ok(&["create", "-f", &cm]).contains("configmap/settings created"));
    assert!(srv.kubectl_ok(&["create", "-f", &deploy]).contains("deployment.apps/web created"));

    let all = squeeze(&srv.kubectl_ok(&[
        "get",
        "configmaps",
        "--all-namespaces",
        "-o",
        "custom-columns=NS:.metadata.namespace,NAME:.metadata.name",
    ]));
    assert!(all.contains(&"team settings".to_string()), "{all:?}");
    assert!(srv.kubectl_ok(&["label", "-n", "team", "configmap", "settings", "tier=front"]).contains("labeled"));
    assert!(srv.kubectl_ok(&["annotate", "-n", "team", "configmap", "settings", "note=hello"]).contains("annotated"));
    let described = srv.kubectl_ok(&["describe", "-n", "team", "configmap", "settings"]);
    assert!(described.contains("tier=front") && described.contains("note: hello"), "{described}");
    let selected = srv.kubectl_ok(&["get", "cm", "-A", "-l", "tier=front", "-o", "name"]);
    assert_eq!(selected.trim(), "configmap/settings");

    // Server-side printing: upstream's columns.
    let svcs = squeeze(&srv.kubectl_ok(&["get", "services", "-A"]));
    assert_eq!(svcs[0], "NAMESPACE NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE");
    assert!(svcs[1].starts_with("default kubernetes ClusterIP 10.43.0.1 <none> 443/TCP "), "{svcs:?}");
    let nss = squeeze(&srv.kubectl_ok(&["get", "namespace", "team"]));
    assert!(nss[0] == "NAME STATUS AGE" && nss[1].starts_with("team Active "), "{nss:?}");
    let cms = squeeze(&srv.kubectl_ok(&["get", "configmap", "-n", "team"]));
    // kube-root-ca.crt, published by a controller, sits beside it.
    assert!(cms[0] == "NAME DATA AGE" && cms.iter().any(|r| r.starts_with("settings 1 ")), "{cms:?}");

    assert!(srv.kubectl_ok(&["scale", "deployment", "web", "--replicas=3"]).contains("scaled"));
    let wide = squeeze(&srv.kubectl_ok(&["get", "deployment", "web", "-o", "wide"]));
    assert_eq!(wide[0], "NAME READY UP-TO-DATE AVAILABLE AGE CONTAINERS IMAGES SELECTOR");
    // No nodes: the deployment controller's pods stay Pending (UP-TO-DATE grows as it
    // creates them).
    let columns: Vec<&str> = wide[1].split(' ').collect();
    assert_eq!((columns[0], columns[1], columns[3]), ("web", "0/3", "0"), "{wide:?}");
    assert!(wide[1].ends_with(" c busybox app=web"), "{wide:?}");
    assert_eq!(
        srv.kubectl_ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"]),
        "3 2"
    );

    // get -w sees a change made while it watches.
    let mut watch = Command::new(kubectl_binary())
        .args(["get", "configmaps", "-n", "team", "-w", "-o", "name"])
        .env("KUBECONFIG", srv.kubeconfig())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let initial: Vec<String> = (0..2).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
    assert!(initial.contains(&"configmap/settings".to_string()), "the initial list: {initial:?}");
    let late =
        write(dir.path(), "late.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: late\n  namespace: team\n");
    srv.kubectl_ok(&["create", "-f", &late]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line =
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("watch shows the new object");
        if line == "configmap/late" {
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();

    assert!(
        srv.kubectl_ok(&["delete", "-n", "team", "configmap", "settings"]).contains("configmap \"settings\" deleted")
    );
    let gone = srv.kubectl(&["get", "-n", "team", "configmap", "settings"]);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr)
            .contains("Error from server (NotFound): configmaps \"settings\" not found")
    );
    // A namespace being deleted is Terminating (held here by an object's finalizer, or the
    // namespace controller would finish at once); the system namespaces cannot be deleted.
    srv.kubectl_ok(&["create", "configmap", "held", "-n", "team"]);
    srv.kubectl_ok(&[
        "patch",
        "configmap",
        "held",
        "-n",
        "team",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    srv.kubectl_ok(&["delete", "namespace", "team", "--wait=false"]);
    assert_eq!(srv.kubectl_ok(&["get", "ns", "team", "-o", "jsonpath={.status.phase}"]), "Terminating");
    let refused = srv.kubectl(&["delete", "namespace", "kube-system", "--wait=false"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("this namespace may not be deleted"));
    srv.stop();
}

#[test]
fn restart_keeps_the_ca_and_the_objects() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let srv = Server::start(&data, port);
    let cm = write(dir.path(), "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\ndata:\n  k: v\n");
    srv.kubectl_ok(&["create", "-f", &cm]);
    let ca = std::fs::read(data.join("server/tls/server-ca.crt")).unwrap();
    let uid = srv.kubectl_ok(&["get", "cm", "kept", "-o", "jsonpath={.metadata.uid}"]);
    srv.stop();

    let srv = Server::start(&data, port);
    assert_eq!(std::fs::read(data.join("server/tls/server-ca.crt")).unwrap(), ca, "the CA survives a restart");
    assert_eq!(srv.kubectl_ok(&["get", "cm", "kept", "-o", "jsonpath={.metadata.uid} {.data.k}"]), format!("{uid} v"));
    let nss = srv.kubectl_ok(&["get", "ns", "-o", "name"]);
    assert_eq!(nss.lines().count(), 4, "system namespaces are not duplicated: {nss}");
    srv.stop();
}
