//! kubectl 1.32 with a CustomResourceDefinition against `krate server`: apply the CRD
//! and objects, get them by short name and category with their printer columns, explain
//! the schema, scale through the scale subresource, and delete the CRD with its objects.

use std::time::{Duration, Instant};

use crate::common::{Server, free_port, squeeze};

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: CronTabSpec says when and what to run.
            properties:
              cronSpec:
                type: string
                description: The schedule in cron format.
              image: {type: string}
              replicas: {type: integer, minimum: 0, default: 1}
          status:
            type: object
            properties:
              replicas: {type: integer}
"#;

const OBJECT: &str = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: nightly, namespace: default}\nspec: {cronSpec: '* * * * */5', image: busybox}\n";

#[test]
fn kubectl_works_with_custom_resources() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let crd = dir.path().join("crd.yaml");
    std::fs::write(&crd, CRD).unwrap();
    let crd = crd.display().to_string();
    let out = srv.kubectl_ok(&["apply", "-f", &crd]);
    assert!(out.contains("customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created"), "{out}");
    srv.kubectl_ok(&["wait", "--for=condition=Established", "--timeout=10s", "crd/crontabs.stable.example.com"]);

    // kubectl's discovery cache may lag a moment behind the new group.
    let obj = dir.path().join("ct.yaml");
    std::fs::write(&obj, OBJECT).unwrap();
    let obj = obj.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = srv.kubectl(&["apply", "-f", &obj]);
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "apply failed: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }

    let table = srv.kubectl_ok(&["get", "ct"]);
    let lines = squeeze(&table);
    assert_eq!(lines[0], "NAME SPEC REPLICAS AGE", "{table}");
    assert!(lines[1].starts_with("nightly * * * * */5 1 "), "{table}");
    let all = srv.kubectl_ok(&["get", "all"]);
    assert!(all.contains("crontab.stable.example.com/nightly"), "{all}");

    let explain = srv.kubectl_ok(&["explain", "crontabs.spec"]);
    assert!(explain.contains("CronTabSpec says when and what to run."), "{explain}");
    assert!(explain.contains("cronSpec") && explain.contains("The schedule in cron format."), "{explain}");

    srv.kubectl_ok(&["scale", "ct/nightly", "--replicas=3"]);
    assert_eq!(srv.kubectl_ok(&["get", "ct", "nightly", "-o", "jsonpath={.spec.replicas}"]), "3");

    let bad = srv.kubectl(&["patch", "ct", "nightly", "--type=merge", "-p", "{\"spec\":{\"replicas\":-1}}"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("spec.replicas in body should be greater than or equal to 0"), "{err}");

    srv.kubectl_ok(&["delete", "-f", &crd, "--timeout=20s"]);
    let gone = srv.kubectl(&["get", "crontabs.stable.example.com", "-A"]);
    assert!(!gone.status.success(), "the resource is gone with its CRD");
}
