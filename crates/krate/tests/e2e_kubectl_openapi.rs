//! kubectl's OpenAPI and discovery consumers against `krate server --disable-agent`:
//! explain, client validation choice (server-side strict field validation), aggregated
//! discovery.

mod common;

use common::{Server, free_port, squeeze};

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers: [{name: c, image: busybox}]\n";

fn write(dir: &std::path::Path, name: &str, yaml: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

#[test]
fn kubectl_uses_openapi_and_aggregated_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let cache = dir.path().join("cache").display().to_string();
    let cache_dir = format!("--cache-dir={cache}");

    // explain reads the OpenAPI v3 document of the group-version.
    let probe = srv.kubectl_ok(&[&cache_dir, "explain", "pod.spec.containers.livenessProbe"]);
    assert!(probe.contains("FIELD: livenessProbe <Probe>"), "{probe}");
    assert!(probe.contains("Periodic probe of container liveness"), "{probe}");
    assert!(probe.contains("failureThreshold\t<integer>"), "{probe}");
    let recursive = srv.kubectl_ok(&[&cache_dir, "explain", "deployment", "--recursive"]);
    assert!(recursive.contains("GROUP:      apps") && recursive.contains("KIND:       Deployment"), "{recursive}");
    for field in ["replicas\t<integer>", "containers\t<[]Container> -required-", "livenessProbe\t<Probe>"] {
        assert!(recursive.contains(field), "{field} missing from {recursive}");
    }

    // The v2 form is read from gnostic's protobuf document.
    let v2 = srv.kubectl_ok(&[&cache_dir, "explain", "deployment.spec", "--output", "plaintext-openapiv2"]);
    assert!(v2.contains("RESOURCE: spec <Object>") && v2.contains("minReadySeconds\t<integer>"), "{v2}");
    let v2 = srv.kubectl_ok(&[
        &cache_dir,
        "explain",
        "pod.spec.containers.livenessProbe",
        "--output",
        "plaintext-openapiv2",
    ]);
    assert!(v2.contains("Periodic probe of container liveness"), "{v2}");

    // Without --validate=false kubectl checks the PATCH operation declares fieldValidation,
    // then leaves validation to the server (fieldValidation=Strict).
    let good = write(dir.path(), "good.yaml", DEPLOYMENT);
    let out = srv.kubectl(&[&cache_dir, "create", "-f", &good, "-v=6"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("deployment.apps/web created"));
    assert!(log.contains("fieldValidation=Strict"), "{log}");
    let bad = write(dir.path(), "bad.yaml", &DEPLOYMENT.replace("  replicas: 1\n", "  replicas: 1\n  replicaz: 2\n"));
    let out = srv.kubectl(&[&cache_dir, "create", "-f", &bad]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("Error from server (BadRequest)"), "{err}");
    assert!(err.contains("strict decoding error: unknown field \"spec.replicaz\""), "{err}");

    // Client-side apply merges with the OpenAPI v3 patch metadata.
    let scaled = write(dir.path(), "scaled.yaml", &DEPLOYMENT.replace("replicas: 1", "replicas: 2"));
    assert!(srv.kubectl_ok(&[&cache_dir, "apply", "-f", &scaled]).contains("deployment.apps/web configured"));
    let replicas = srv.kubectl_ok(&[&cache_dir, "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas, "2");

    // Discovery from a cold cache takes two requests: /api and /apis, aggregated.
    let fresh = format!("--cache-dir={}", dir.path().join("cold").display());
    let out = srv.kubectl(&[&fresh, "api-resources", "-v=6"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let gets: Vec<&str> = log.lines().filter(|l| l.contains("round_trippers") && l.contains(" GET ")).collect();
    assert_eq!(gets.len(), 2, "{gets:#?}");
    assert!(gets.iter().all(|l| l.contains("/api?") || l.contains("/apis?")), "{gets:#?}");
    let rows = squeeze(&String::from_utf8_lossy(&out.stdout));
    assert!(rows.contains(&"deployments deploy apps/v1 true Deployment".to_string()), "{rows:?}");
    assert!(rows.contains(&"pods po v1 true Pod".to_string()), "{rows:?}");
}
