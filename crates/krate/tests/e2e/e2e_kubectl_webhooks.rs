//! Admission webhooks with real kubectl against `krate server`: a small HTTPS webhook
//! server (Python's http.server behind TLS, certificates from its own CA made with the
//! openssl command) mutates ConfigMaps with a JSONPatch and refuses some with a message;
//! kubectl shows the refusal as upstream's "admission webhook ... denied the request"
//! and prints the webhook's warning.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, free_port};

const WEBHOOK: &str = r#"
import base64, json, ssl, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        name = (req.get("object") or {}).get("metadata", {}).get("name", "")
        resp = {"uid": req["uid"], "allowed": True}
        if self.path.startswith("/mutate"):
            patch = [{"op": "add", "path": "/metadata/labels", "value": {"webhook": "seen"}}]
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        elif name.startswith("forbidden"):
            resp = {"uid": req["uid"], "allowed": False, "warnings": ["the test webhook looked at " + name],
                    "status": {"code": 403, "reason": "Forbidden", "message": name + " is not welcome"}}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Hook)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
"#;

/// The webhook process, stopped when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a serving certificate for 127.0.0.1 signed by it; the CA's PEM.
fn certificates(dir: &std::path::Path) -> String {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=webhook-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ],
    );
    openssl(
        dir,
        &["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=webhook", "-keyout", "tls.key", "-out", "tls.csr"],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            "tls.crt",
        ],
    );
    std::fs::read_to_string(dir.join("ca.crt")).unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn kubectl_sees_webhook_mutations_refusals_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path());
    std::fs::write(dir.path().join("hook.py"), WEBHOOK).unwrap();
    let port = free_port();
    let mut child = Command::new("python3")
        .current_dir(dir.path())
        .args(["hook.py", &port.to_string(), "tls.crt", "tls.key"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs");
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let _webhook = Process(child);

    let srv = Server::start(&dir.path().join("data"), free_port());
    let bundle = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca.as_bytes());
    let webhook = |name: &str, path: &str| {
        format!(
            "- name: {name}\n  clientConfig:\n    url: https://127.0.0.1:{port}{path}\n    caBundle: {bundle}\n  \
             rules:\n  - operations: [CREATE]\n    apiGroups: [\"\"]\n    apiVersions: [v1]\n    resources: [configmaps]\n  \
             sideEffects: None\n  admissionReviewVersions: [v1]\n  timeoutSeconds: 5\n"
        )
    };
    let manifest = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: label\n\
         webhooks:\n{}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata:\n  name: deny\nwebhooks:\n{}",
        webhook("label.example.com", "/mutate"),
        webhook("deny.example.com", "/validate"),
    );
    std::fs::write(dir.path().join("webhooks.yaml"), manifest).unwrap();
    srv.kubectl_ok(&["apply", "-f", dir.path().join("webhooks.yaml").to_str().unwrap()]);

    // The configurations take effect once the server's cache has them.
    let deadline = Instant::now() + Duration::from_secs(15);
    for i in 0.. {
        let name = format!("probe-{i}");
        srv.kubectl_ok(&["create", "configmap", &name, "--from-literal=k=v"]);
        let labels = srv.kubectl_ok(&["get", "configmap", &name, "-o", "jsonpath={.metadata.labels.webhook}"]);
        if labels.trim() == "seen" {
            break;
        }
        assert!(Instant::now() < deadline, "the mutating webhook never took effect: {}", srv.log());
        std::thread::sleep(Duration::from_millis(200));
    }

    let out = srv.kubectl(&["create", "configmap", "forbidden-config", "--from-literal=k=v"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("Warning: the test webhook looked at forbidden-config"), "{err}");
    // `kubectl create configmap` words refusals itself (as against upstream's server).
    assert!(
        err.contains(
            "error: failed to create configmap: admission webhook \"deny.example.com\" denied the request: \
             forbidden-config is not welcome"
        ),
        "{err}"
    );

    srv.kubectl_ok(&["create", "configmap", "welcome", "--from-literal=k=v"]);
    let label = srv.kubectl_ok(&["get", "configmap", "welcome", "-o", "jsonpath={.metadata.labels.webhook}"]);
    assert_eq!(label.trim(), "seen");
    srv.stop();
}
