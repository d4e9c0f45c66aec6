//! PodSecurity with real kubectl against `krate server`: an enforcing namespace refuses
//! a pod with upstream's message, warn mode and workloads print kubectl's "Warning:"
//! lines, and a server-side dry-run of a namespace label warns about existing pods.
//! The admission configuration file comes in through `--admission-control-config-file`.

use crate::common::{Server, free_port};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn kubectl_sees_pod_security_refusals_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n\
         - name: PodSecurity\n  path: pod-security.yaml\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("pod-security.yaml"),
        "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\n\
         defaults:\n  warn: baseline\nexemptions:\n  namespaces: [kube-system]\n",
    )
    .unwrap();
    let srv = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &["--admission-control-config-file", config.to_str().unwrap()],
    );

    srv.kubectl_ok(&["create", "namespace", "strict"]);
    srv.kubectl_ok(&["label", "namespace", "strict", "pod-security.kubernetes.io/enforce=restricted"]);
    let out = srv.kubectl(&["run", "web", "-n", "strict", "--image", "nginx"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "Error from server (Forbidden): pods \"web\" is forbidden: violates PodSecurity \"restricted:latest\": \
             allowPrivilegeEscalation != false (container \"web\" must set securityContext.allowPrivilegeEscalation=false)"
        ),
        "{}",
        stderr(&out)
    );

    // The configured default warns (baseline) in unlabelled namespaces.
    let privileged =
        r#"{"spec":{"containers":[{"name":"root","image":"nginx","securityContext":{"privileged":true}}]}}"#;
    let out = srv.kubectl(&["run", "root", "--image", "nginx", "--overrides", privileged]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "Warning: would violate PodSecurity \"baseline:latest\": privileged (container \"root\" must not set securityContext.privileged=true)"
        ),
        "{}",
        stderr(&out)
    );

    // Workloads are admitted with a warning in an enforcing namespace.
    let out = srv.kubectl(&["create", "deployment", "web", "-n", "strict", "--image", "nginx"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("Warning: would violate PodSecurity \"restricted:latest\""), "{}", stderr(&out));

    // What would tightening default do to its pods? A server-side dry-run tells.
    let out = srv.kubectl(&[
        "label",
        "--dry-run=server",
        "namespace",
        "default",
        "pod-security.kubernetes.io/enforce=baseline",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("Warning: existing pods in namespace \"default\" violate the new PodSecurity enforce level \"baseline:latest\""),
        "{err}"
    );
    assert!(err.contains("Warning: root: privileged"), "{err}");
    let labels = srv.kubectl_ok(&["get", "namespace", "default", "-o", "jsonpath={.metadata.labels}"]);
    assert!(!labels.contains("pod-security.kubernetes.io/enforce"), "dry-run leaves the label off: {labels}");
    srv.stop();
}
