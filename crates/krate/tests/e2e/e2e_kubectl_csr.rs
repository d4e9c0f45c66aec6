//! `kubectl certificate approve|deny` against `krate server` with auditing on: a CSR made
//! with openssl is approved, signed by the built-in signer, and its certificate used by
//! kubectl; the audit log (from the --audit-* flags) records the approval.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Server, free_port};

const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  resources:
  - group: certificates.k8s.io
    resources: [certificatesigningrequests/approval]
- level: Metadata
  resources:
  - group: certificates.k8s.io
- level: None
";

fn openssl_csr(dir: &std::path::Path, name: &str, subject: &str) -> (std::path::PathBuf, String) {
    let key = dir.join(format!("{name}.key"));
    let req = dir.join(format!("{name}.csr"));
    let out = Command::new("openssl")
        .args(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", subject])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&req)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    let pem = std::fs::read(&req).unwrap();
    (key, base64_encode(&pem))
}

fn base64_encode(bytes: &[u8]) -> String {
    let out = Command::new("base64")
        .arg("-w0")
        .arg("/dev/stdin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    out.stdin.as_ref().unwrap().write_all(bytes).unwrap();
    String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap()
}

fn csr_yaml(name: &str, request: &str) -> String {
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 86400\n  usages: [client auth]\n"
    )
}

#[test]
fn kubectl_certificate_approve_and_deny() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.path().join("audit.log");
    let srv = Server::start_with(
        &dir.path().join("data"),
        free_port(),
        &[
            "--audit-policy-file",
            policy.to_str().unwrap(),
            "--audit-log-path",
            log.to_str().unwrap(),
            "--audit-log-maxsize",
            "10",
        ],
    );

    let (key, request) = openssl_csr(dir.path(), "eve", "/O=dev/O=qa/CN=eve");
    let file = dir.path().join("eve.yaml");
    std::fs::write(&file, csr_yaml("eve", &request)).unwrap();
    assert!(
        srv.kubectl_ok(&["create", "-f", file.to_str().unwrap()])
            .contains("certificatesigningrequest.certificates.k8s.io/eve created")
    );
    let pending = srv.kubectl_ok(&["get", "csr", "eve"]);
    assert!(pending.contains("Pending") && pending.contains("system:admin"), "{pending}");

    let out = srv.kubectl_ok(&["certificate", "approve", "eve"]);
    assert!(out.contains("certificatesigningrequest.certificates.k8s.io/eve approved"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let cert = loop {
        let c = srv.kubectl_ok(&["get", "csr", "eve", "-o", "jsonpath={.status.certificate}"]);
        if !c.is_empty() {
            break c;
        }
        assert!(Instant::now() < deadline, "eve's CSR was not signed");
        std::thread::sleep(Duration::from_millis(100));
    };
    let shown = srv.kubectl_ok(&["get", "csr", "eve"]);
    assert!(shown.contains("Approved,Issued"), "{shown}");
    let cert_file = dir.path().join("eve.crt");
    let decoded = Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        decoded.stdin.as_ref().unwrap().write_all(cert.as_bytes()).unwrap();
    }
    std::fs::write(&cert_file, decoded.wait_with_output().unwrap().stdout).unwrap();

    // kubectl with eve's certificate: the server knows her as eve.
    let eve_config = dir.path().join("eve.kubeconfig");
    std::fs::copy(srv.kubeconfig(), &eve_config).unwrap();
    let set = Command::new(common::kubectl_binary())
        .args(["config", "set-credentials", "admin", "--embed-certs=true"])
        .arg(format!("--client-certificate={}", cert_file.display()))
        .arg(format!("--client-key={}", key.display()))
        .env("KUBECONFIG", &eve_config)
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let as_eve = Command::new(common::kubectl_binary())
        .args(["get", "namespaces"])
        .env("KUBECONFIG", &eve_config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&as_eve.stderr);
    assert!(!as_eve.status.success() && err.contains("User \"eve\" cannot list resource \"namespaces\""), "{err}");
    // Both organizations of the request are her groups: the subject was copied whole.
    let whoami = Command::new(common::kubectl_binary())
        .args(["auth", "whoami", "-o", "json"])
        .env("KUBECONFIG", &eve_config)
        .output()
        .unwrap();
    assert!(whoami.status.success(), "{}", String::from_utf8_lossy(&whoami.stderr));
    let review: serde_json::Value = serde_json::from_slice(&whoami.stdout).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "eve");
    assert_eq!(review["status"]["userInfo"]["groups"], serde_json::json!(["dev", "qa", "system:authenticated"]));

    // Deny another: it is never signed.
    let (_, request) = openssl_csr(dir.path(), "mallory", "/CN=mallory");
    let file = dir.path().join("mallory.yaml");
    std::fs::write(&file, csr_yaml("mallory", &request)).unwrap();
    srv.kubectl_ok(&["create", "-f", file.to_str().unwrap()]);
    assert!(srv.kubectl_ok(&["certificate", "deny", "mallory"]).contains("denied"));
    std::thread::sleep(Duration::from_millis(500));
    let shown = srv.kubectl_ok(&["get", "csr", "mallory"]);
    assert!(shown.contains("Denied") && !shown.contains("Issued"), "{shown}");
    // Approving a denied CSR is refused.
    let again = srv.kubectl(&["certificate", "approve", "mallory"]);
    assert!(!again.status.success());

    // The audit log has kubectl's approval at RequestResponse, with kubectl's condition.
    let deadline = Instant::now() + Duration::from_secs(10);
    let approval = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|e| e["objectRef"]["subresource"] == "approval" && e["objectRef"]["name"] == "eve");
        if let Some(e) = found {
            break e;
        }
        assert!(Instant::now() < deadline, "no approval event in {text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!((approval["verb"].as_str(), approval["level"].as_str()), (Some("update"), Some("RequestResponse")));
    assert_eq!(approval["stage"], "ResponseComplete");
    assert_eq!(approval["requestObject"]["status"]["conditions"][0]["reason"], "KubectlApprove");
    assert!(approval["userAgent"].as_str().unwrap().starts_with("kubectl"));
    srv.stop();
}
