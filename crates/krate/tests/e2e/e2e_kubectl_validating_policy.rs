//! ValidatingAdmissionPolicy with real kubectl against `krate server`: `kubectl apply`
//! of a policy and its binding, then a create the policy denies shows upstream's
//! message (Invalid by default, Forbidden when the validation says so), and a Warn
//! binding prints kubectl's "Warning:" line.

use std::time::{Duration, Instant};

use crate::common::{Server, free_port};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-limit
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["deployments"]
  validations:
  - expression: "object.spec.replicas <= 5"
  - expression: "!object.metadata.name.startsWith('root-')"
    message: "names may not start with root-"
    reason: Forbidden
  auditAnnotations:
  - key: replicas
    valueExpression: "string(object.spec.replicas)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-limit-binding
spec:
  policyName: replica-limit
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: team-label
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]
  validations:
  - expression: "'team' in object.metadata.?labels.orValue({})"
    messageExpression: "'deployment ' + object.metadata.name + ' has no team label'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: team-label-warn
spec:
  policyName: team-label
  validationActions: [Warn]
"#;

/// Runs kubectl until `done` holds for its output (policies take effect once the
/// server's watch cache has them), returning the last output.
fn until(srv: &Server, args: &[&str], done: impl Fn(&std::process::Output) -> bool) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = srv.kubectl(args);
        if done(&out) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn kubectl_applies_a_policy_and_sees_its_denials() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let manifest = dir.path().join("policy.yaml");
    std::fs::write(&manifest, POLICY).unwrap();
    let out = srv.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]);
    assert!(out.contains("validatingadmissionpolicy.admissionregistration.k8s.io/replica-limit created"), "{out}");
    assert!(
        out.contains("validatingadmissionpolicybinding.admissionregistration.k8s.io/replica-limit-binding created"),
        "{out}"
    );

    let too_many = ["create", "deployment", "big", "--image", "nginx", "--replicas", "10"];
    let out = until(&srv, &too_many, |o| !o.status.success());
    assert!(!out.status.success(), "the policy never denied");
    let err = stderr(&out);
    assert!(err.contains("is invalid"), "{err}");
    assert!(
        err.contains(
            "ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: failed expression: object.spec.replicas <= 5"
        ),
        "{err}"
    );

    let out = srv.kubectl(&["create", "deployment", "root-web", "--image", "nginx"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "Error from server (Forbidden): deployments.apps \"root-web\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: names may not start with root-"
        ),
        "{}",
        stderr(&out)
    );

    // Within the limit: created, with the Warn binding's warning.
    let out = srv.kubectl(&["create", "deployment", "web", "--image", "nginx", "--replicas", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "Warning: Validation failed for ValidatingAdmissionPolicy 'team-label' with binding 'team-label-warn': deployment web has no team label"
        ),
        "{}",
        stderr(&out)
    );

    // Deleting the binding lifts the policy.
    srv.kubectl_ok(&["delete", "validatingadmissionpolicybinding", "replica-limit-binding"]);
    let out = until(&srv, &too_many, |o| o.status.success());
    assert!(out.status.success(), "{}", stderr(&out));
}
