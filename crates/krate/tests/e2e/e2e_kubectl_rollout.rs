//! The API side of `kubectl rollout` and `kubectl wait`, with kubectl 1.32 and 1.37: on a
//! server running no controllers, the test writes ReplicaSets, ControllerRevisions and
//! status as those controllers would (owner references, revision annotations, status
//! through the status subresource) and checks that kubectl's history, undo, status,
//! pause/resume and wait read and write them. Rollouts by the real controllers are
//! tested in crates/krate-controllers/tests (deployment.rs, daemonset.rs).

use crate::common;

use crate::common::{Server, free_port, second_kubectl, squeeze};

#[test]
fn rollout_and_wait_with_kubectl() {
    scenario(&common::kubectl_binary());
}

#[test]
fn rollout_and_wait_with_second_kubectl() {
    if let Some(bin) = second_kubectl() {
        scenario(&bin);
    }
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers: [{{name: app, image: \"{image}\"}}]\n"
    )
}

/// A ReplicaSet as the deployment controller writes one for `revision`.
fn replica_set(hash: &str, revision: u32, image: &str, owner_uid: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-{hash}
  labels: {{app: web, pod-template-hash: "{hash}"}}
  annotations: {{deployment.kubernetes.io/revision: "{revision}"}}
  ownerReferences:
  - {{apiVersion: apps/v1, kind: Deployment, name: web, uid: "{owner_uid}", controller: true, blockOwnerDeletion: true}}
spec:
  replicas: 0
  selector:
    matchLabels: {{app: web, pod-template-hash: "{hash}"}}
  template:
    metadata:
      labels: {{app: web, pod-template-hash: "{hash}"}}
    spec:
      containers: [{{name: app, image: "{image}"}}]
"#
    )
}

fn scenario(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &["--disable-controller-manager", "--disable-scheduler"],
    );
    let ok = |args: &[&str]| srv.kubectl_with_ok(bin, args);
    let apply = |name: &str, yaml: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, yaml).unwrap();
        ok(&["apply", "-f", file.to_str().unwrap()])
    };
    let get = |path: &str| ok(&["get", "deploy", "web", "-o", &format!("jsonpath={path}")]);

    apply("web.yaml", &deployment("app:v1"));
    let uid = get("{.metadata.uid}");
    apply("rs1.yaml", &replica_set("aaa", 1, "app:v1", &uid));
    apply("web.yaml", &deployment("app:v2"));
    apply("rs2.yaml", &replica_set("bbb", 2, "app:v2", &uid));

    // history: one row per ReplicaSet the Deployment controls, by revision.
    let history = squeeze(&ok(&["rollout", "history", "deploy/web"]));
    assert_eq!(history[0], "deployment.apps/web", "{history:?}");
    assert!(history.contains(&"REVISION CHANGE-CAUSE".to_string()), "{history:?}");
    assert!(history.contains(&"1 <none>".to_string()) && history.contains(&"2 <none>".to_string()), "{history:?}");
    let one = ok(&["rollout", "history", "deploy/web", "--revision=1"]);
    assert!(one.contains("Image:") && one.contains("app:v1"), "{one}");

    // undo: the template of revision 1 comes back (without its pod-template-hash).
    let undo = ok(&["rollout", "undo", "deploy/web", "--to-revision=1"]);
    assert!(undo.contains("deployment.apps/web rolled back"), "{undo}");
    assert_eq!(get("{.spec.template.spec.containers[0].image}"), "app:v1");
    assert_eq!(get("{.spec.template.metadata.labels}"), r#"{"app":"web"}"#);
    // Undoing to the template already running is skipped, as upstream.
    let again = ok(&["rollout", "undo", "deploy/web", "--to-revision=1"]);
    assert!(again.contains("skipped rollback"), "{again}");
    let missing = srv.kubectl_with(bin, &["rollout", "undo", "deploy/web", "--to-revision=7"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("unable to find specified revision 7"));

    // pause and resume write spec.paused; undo refuses a paused Deployment.
    ok(&["rollout", "pause", "deploy/web"]);
    assert_eq!(get("{.spec.paused}"), "true");
    let paused = srv.kubectl_with(bin, &["rollout", "undo", "deploy/web"]);
    assert!(String::from_utf8_lossy(&paused.stderr).contains("paused"), "undo of a paused deployment fails");
    ok(&["rollout", "resume", "deploy/web"]);
    assert_eq!(get("{.spec.paused}"), "");

    // status: not done until the controller's status says so.
    let waiting = srv.kubectl_with(bin, &["rollout", "status", "deploy/web", "--timeout=1s"]);
    assert!(!waiting.status.success(), "no status yet: the rollout is not complete");
    let generation = get("{.metadata.generation}");
    let status = format!(
        r#"{{"status":{{"observedGeneration":{generation},"replicas":1,"updatedReplicas":1,"readyReplicas":1,"availableReplicas":1,"conditions":[{{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"Deployment has minimum availability."}},{{"type":"Progressing","status":"True","reason":"NewReplicaSetAvailable","message":"ReplicaSet \"web-aaa\" has successfully progressed."}}]}}}}"#
    );
    ok(&["patch", "deploy", "web", "--subresource=status", "--type=merge", "-p", &status]);
    let done = ok(&["rollout", "status", "deploy/web", "--timeout=10s"]);
    assert!(done.contains("deployment \"web\" successfully rolled out"), "{done}");

    // wait: conditions and jsonpath, met and not met.
    let met = ok(&["wait", "--for=condition=Available", "deploy/web", "--timeout=10s"]);
    assert!(met.contains("deployment.apps/web condition met"), "{met}");
    let unmet = srv.kubectl_with(bin, &["wait", "--for=condition=ReplicaFailure", "deploy/web", "--timeout=1s"]);
    assert!(!unmet.status.success(), "an absent condition times out");
    ok(&["wait", "--for=jsonpath={.status.availableReplicas}=1", "deploy/web", "--timeout=10s"]);
    // wait --for=delete returns once the object is gone.
    ok(&["create", "configmap", "gone"]);
    let srv_bin = (bin.to_string(), srv.kubeconfig());
    let waiter = std::thread::spawn(move || {
        std::process::Command::new(&srv_bin.0)
            .args(["wait", "--for=delete", "configmap/gone", "--timeout=20s"])
            .env("KUBECONFIG", &srv_bin.1)
            .output()
            .unwrap()
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    ok(&["delete", "configmap", "gone"]);
    let deleted = waiter.join().unwrap();
    assert!(deleted.status.success(), "{}", String::from_utf8_lossy(&deleted.stderr));

    // StatefulSet history comes from ControllerRevisions it controls.
    apply(
        "sts.yaml",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  serviceName: db\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers: [{name: db, image: \"db:v1\"}]\n",
    );
    let sts_uid = ok(&["get", "sts", "db", "-o", "jsonpath={.metadata.uid}"]);
    apply(
        "rev.yaml",
        &format!(
            "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata:\n  name: db-5d8f\n  labels: {{app: db, controller.kubernetes.io/hash: 5d8f}}\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: \"{sts_uid}\", controller: true}}\nrevision: 1\ndata:\n  spec:\n    template:\n      $patch: replace\n      metadata:\n        labels: {{app: db}}\n      spec:\n        containers: [{{name: db, image: \"db:v1\"}}]\n"
        ),
    );
    let sts_history = squeeze(&ok(&["rollout", "history", "sts/db"]));
    assert!(sts_history.contains(&"1 <none>".to_string()), "{sts_history:?}");
    srv.stop();
}
