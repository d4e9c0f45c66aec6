//! The official Python client (pip `kubernetes`) against `krate server`.

use std::process::Command;

use crate::common::{Server, free_port};

#[test]
fn python_client_end_to_end() {
    run_script(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client_e2e.py"));
}

#[test]
fn python_utils_and_dynamic_client() {
    run_script(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/utils_dynamic_e2e.py"));
}

fn run_script(script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let out = Command::new("python3").arg(script).env("KUBECONFIG", srv.kubeconfig()).output().expect("python3 runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("PASS"),
        "python client e2e failed (is `pip install kubernetes` done? scripts/install-deps.sh does it):\n{stdout}\n{stderr}\n{}",
        srv.log()
    );
    srv.stop();
}
