//! kubectl's patching commands against `krate server --disable-agent`: client-side
//! apply (three-way strategic merge with last-applied-configuration), `kubectl patch`
//! (strategic by default, merge and json on request) and `kubectl edit`.

use crate::common;

use std::process::Command;

use crate::common::{Server, free_port, kubectl_binary};

fn deployment(env_value: &str, sidecar: bool, replicas: u32) -> String {
    let sidecar = if sidecar { "      - name: log\n        image: busybox\n" } else { "" };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n  labels: {{tier: front}}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: app\n        image: nginx\n        env: [{{name: MODE, value: \"{env_value}\"}}]\n{sidecar}"
    )
}

#[test]
fn apply_patch_and_edit_merge_strategically() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let manifest = dir.path().join("web.yaml");
    let apply = |yaml: String| {
        std::fs::write(&manifest, yaml).unwrap();
        srv.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()])
    };
    let get = |path: &str| srv.kubectl_ok(&["get", "deploy", "web", "-o", &format!("jsonpath={path}")]);

    assert!(apply(deployment("a", true, 1)).contains("deployment.apps/web created"));
    assert!(apply(deployment("a", true, 1)).contains("deployment.apps/web unchanged"));
    // Someone else scales and labels the live object; apply must keep what it does not manage.
    srv.kubectl_ok(&["label", "deploy", "web", "owner=ops"]);
    srv.kubectl_ok(&["set", "env", "deploy/web", "-c", "app", "EXTRA=1"]);
    assert!(apply(deployment("b", false, 2)).contains("deployment.apps/web configured"));
    assert_eq!(get("{.spec.replicas}"), "2");
    assert_eq!(get("{.spec.template.spec.containers[*].name}"), "app", "the dropped sidecar is deleted");
    let env = get("{range .spec.template.spec.containers[0].env[*]}{.name}={.value} {end}");
    assert_eq!(env.trim(), "MODE=b EXTRA=1", "env merges on its name: the live EXTRA stays");
    assert_eq!(get("{.metadata.labels.owner} {.metadata.labels.tier}"), "ops front");

    // kubectl patch is strategic by default: a container merges by name, others stay.
    srv.kubectl_ok(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"busybox"}]}}}}"#,
    ]);
    // A new item goes first when no $setElementOrder is given, as upstream orders it.
    assert_eq!(get("{.spec.template.spec.containers[*].name}"), "side app");
    srv.kubectl_ok(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","$patch":"delete"}]}}}}"#,
    ]);
    assert_eq!(get("{.spec.template.spec.containers[*].name}"), "app");
    // The same change as a merge patch replaces the list; a JSON patch edits by index.
    srv.kubectl_ok(&[
        "patch",
        "deploy",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"only","image":"busybox"}]}}}}"#,
    ]);
    assert_eq!(get("{.spec.template.spec.containers[*].name}"), "only");
    srv.kubectl_ok(&[
        "patch",
        "deploy",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":4}]"#,
    ]);
    assert_eq!(get("{.spec.replicas}"), "4");
    // A strategic patch without the list's merge key is the client's mistake: 400, nothing changes.
    let bad = srv.kubectl(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}}"#,
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("BadRequest") || err.contains("merge key"), "{err}");
    assert_eq!(get("{.spec.template.spec.containers[0].image}"), "busybox");

    // kubectl edit: the editor changes the image; kubectl sends a strategic patch.
    let editor = dir.path().join("editor.sh");
    std::fs::write(&editor, "#!/bin/sh\nsed -i 's/image: busybox/image: alpine/' \"$1\"\n").unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(kubectl_binary())
        .args(["edit", "deploy", "web"])
        .env("KUBECONFIG", srv.kubeconfig())
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("deployment.apps/web edited"));
    assert_eq!(get("{.spec.template.spec.containers[0].image}"), "alpine");
    srv.stop();
}

#[test]
fn server_side_apply_with_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let manifest = dir.path().join("web.yaml");
    let apply = |yaml: String, extra: &[&str]| {
        std::fs::write(&manifest, yaml).unwrap();
        let mut args = vec!["apply", "--server-side", "-f", manifest.to_str().unwrap()];
        args.extend_from_slice(extra);
        srv.kubectl(&args)
    };
    let get = |path: &str| srv.kubectl_ok(&["get", "deploy", "web", "-o", &format!("jsonpath={path}")]);

    let out = apply(deployment("a", true, 1), &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("deployment.apps/web serverside-applied"));
    let managed = srv.kubectl_ok(&["get", "deploy", "web", "-o", "yaml", "--show-managed-fields"]);
    assert!(managed.contains("manager: kubectl\n    operation: Apply"), "{managed}");
    assert!(managed.contains("k:{\"name\":\"log\"}:"), "{managed}");

    // kubectl scale owns replicas now: a different value in the manifest conflicts.
    srv.kubectl_ok(&["scale", "deploy", "web", "--replicas=3"]);
    let out = apply(deployment("a", true, 2), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl\" with subresource \"scale\" using apps/v1: .spec.replicas"
        ),
        "{err}"
    );
    assert_eq!(get("{.spec.replicas}"), "3");
    let out = apply(deployment("a", true, 2), &["--force-conflicts"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(get("{.spec.replicas}"), "2");

    // Fields the manifest stops setting go when nobody else owns them.
    assert!(apply(deployment("b", false, 2), &[]).status.success());
    assert_eq!(get("{.spec.template.spec.containers[*].name}"), "app");
    assert_eq!(get("{.spec.template.spec.containers[0].env[0].value}"), "b");
    srv.stop();
}

#[test]
fn client_side_apply_upgrades_to_server_side() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let manifest = dir.path().join("web.yaml");
    std::fs::write(&manifest, deployment("a", true, 1)).unwrap();
    let path = manifest.to_str().unwrap();
    srv.kubectl_ok(&["apply", "-f", path]);
    // The first server-side apply takes over the client-side apply's fields…
    srv.kubectl_ok(&["apply", "--server-side", "-f", path]);
    let managed = srv.kubectl_ok(&["get", "deploy", "web", "-o", "yaml", "--show-managed-fields"]);
    assert!(!managed.contains("manager: kubectl-client-side-apply"), "{managed}");
    // …so dropping the sidecar from the manifest removes it.
    std::fs::write(&manifest, deployment("a", false, 1)).unwrap();
    srv.kubectl_ok(&["apply", "--server-side", "-f", path]);
    assert_eq!(
        srv.kubectl_ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[*].name}"]),
        "app"
    );
    srv.stop();
}

/// The everyday commands that read and change objects: the API side of each.
#[test]
fn everyday_commands() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let manifest = dir.path().join("web.yaml");
    std::fs::write(&manifest, deployment("a", false, 1)).unwrap();
    let path = manifest.to_str().unwrap();
    srv.kubectl_ok(&["apply", "-f", path]);
    let get = |path: &str| srv.kubectl_ok(&["get", "deploy", "web", "-o", &format!("jsonpath={path}")]);

    // kubectl diff: a server dry run, nothing stored.
    std::fs::write(&manifest, deployment("b", false, 3)).unwrap();
    let diff = srv.kubectl(&["diff", "-f", path]);
    assert_eq!(diff.status.code(), Some(1), "differences exit 1: {}", String::from_utf8_lossy(&diff.stderr));
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(text.contains("-  replicas: 1") && text.contains("+  replicas: 3"), "{text}");
    assert_eq!(get("{.spec.replicas}"), "1", "diff changes nothing");

    // set image|env|resources, label --overwrite, rollout restart.
    srv.kubectl_ok(&["set", "image", "deploy/web", "app=nginx:9"]);
    srv.kubectl_ok(&["set", "env", "deploy/web", "-c", "app", "MODE=c"]);
    srv.kubectl_ok(&["set", "resources", "deploy/web", "-c", "app", "--limits=cpu=200m,memory=64Mi"]);
    let refused = srv.kubectl(&["label", "deploy", "web", "tier=back"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("already has a value (front)"));
    srv.kubectl_ok(&["label", "deploy", "web", "tier=back", "--overwrite"]);
    srv.kubectl_ok(&["annotate", "deploy", "web", "note=x"]);
    srv.kubectl_ok(&["annotate", "deploy", "web", "note=y", "--overwrite"]);
    srv.kubectl_ok(&["rollout", "restart", "deploy/web"]);
    let c = "{.spec.template.spec.containers[0]";
    assert_eq!(get(&format!("{c}.image}} {c}.env[0].value}} {c}.resources.limits.cpu}}")), "nginx:9 c 200m");
    assert_eq!(get("{.metadata.labels.tier} {.metadata.annotations.note}"), "back y");
    assert!(get("{.spec.template.metadata.annotations}").contains("kubectl.kubernetes.io/restartedAt"));

    // wait, sort-by, and the output forms.
    srv.kubectl_ok(&["wait", "--for=jsonpath={.spec.replicas}=1", "deploy/web", "--timeout=10s"]);
    for (name, n) in [("b", "2"), ("a", "3"), ("c", "1")] {
        let cm = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &cm,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{name}\n  labels: {{rank: \"{n}\"}}\n"),
        )
        .unwrap();
        srv.kubectl_ok(&["create", "-f", cm.to_str().unwrap()]);
    }
    let sorted = srv.kubectl_ok(&["get", "cm", "-l", "rank", "--sort-by=.metadata.labels.rank", "-o", "name"]);
    assert_eq!(sorted.split_whitespace().collect::<Vec<_>>(), ["configmap/cm-c", "configmap/cm-b", "configmap/cm-a"]);
    let cols =
        srv.kubectl_ok(&["get", "cm", "cm-a", "-o", "custom-columns=NAME:.metadata.name,N:.metadata.labels.rank"]);
    assert_eq!(common::squeeze(&cols), ["NAME N", "cm-a 3"]);
    let yaml = srv.kubectl_ok(&["get", "cm", "cm-a", "-o", "yaml"]);
    assert!(yaml.contains("kind: ConfigMap") && yaml.contains("name: cm-a"));
    let json: serde_json::Value =
        serde_json::from_str(&srv.kubectl_ok(&["get", "cm", "-l", "rank", "-o", "json"])).unwrap();
    assert_eq!(json["kind"], "List");
    assert_eq!(json["items"].as_array().unwrap().len(), 3);

    // replace, and replace --force (delete and create: a new uid).
    let live = srv.kubectl_ok(&["get", "cm", "cm-a", "-o", "yaml"]).replace("rank: \"3\"", "rank: \"9\"");
    let live_file = dir.path().join("live.yaml");
    std::fs::write(&live_file, live).unwrap();
    srv.kubectl_ok(&["replace", "-f", live_file.to_str().unwrap()]);
    assert_eq!(srv.kubectl_ok(&["get", "cm", "cm-a", "-o", "jsonpath={.metadata.labels.rank}"]), "9");
    let uid = srv.kubectl_ok(&["get", "cm", "cm-a", "-o", "jsonpath={.metadata.uid}"]);
    let stale = srv.kubectl(&["replace", "-f", live_file.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains("the object has been modified"),
        "a stale replace is a conflict"
    );
    srv.kubectl_ok(&["replace", "--force", "-f", live_file.to_str().unwrap()]);
    assert_ne!(srv.kubectl_ok(&["get", "cm", "cm-a", "-o", "jsonpath={.metadata.uid}"]), uid);
    srv.stop();
}

#[test]
fn warnings_reach_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let file = dir.path().join("pod.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  nodeSelector: {beta.kubernetes.io/os: linux}\n  containers:\n  - name: c\n    image: busybox\n    env: [{name: X, value: \"1\"}, {name: X, value: \"2\"}]\n",
    )
    .unwrap();
    let out = srv.kubectl(&["create", "-f", file.to_str().unwrap()]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Warning: spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use \"kubernetes.io/os\" instead"),
        "{err}"
    );
    assert!(err.contains("Warning: spec.containers[0].env[1]: hides previous definition of \"X\""), "{err}");
    // A workload's template warns with its own path, on create and when the template changes.
    let out = srv.kubectl(&["create", "deployment", "d", "--image=busybox", "--dry-run=client", "-o", "yaml"]);
    let yaml = String::from_utf8_lossy(&out.stdout).replace(
        "      containers:",
        "      nodeSelector: {failure-domain.beta.kubernetes.io/zone: a}\n      containers:",
    );
    std::fs::write(&file, yaml).unwrap();
    let out = srv.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "Warning: spec.template.spec.nodeSelector[failure-domain.beta.kubernetes.io/zone]: deprecated since v1.17"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = srv.kubectl(&["label", "deploy", "d", "x=y"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Warning"), "an unchanged template does not warn again");
    srv.stop();
}
