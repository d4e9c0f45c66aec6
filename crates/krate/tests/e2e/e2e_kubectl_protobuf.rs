//! kubectl's typed generators (`kubectl create namespace|configmap|secret|deployment|job|
//! serviceaccount`) send their objects in protobuf, as client-go does for built-in kinds,
//! and read the answers in protobuf. Objects read back in JSON as they were meant.

use crate::common::{Server, free_port};
use serde_json::Value;

fn json(srv: &Server, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&srv.kubectl_ok(&all)).unwrap()
}

#[test]
fn kubectl_create_generators_speak_protobuf() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());

    assert!(srv.kubectl_ok(&["create", "namespace", "pb"]).contains("namespace/pb created"));
    let ns = json(&srv, &["namespace", "pb"]);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(ns["spec"]["finalizers"], serde_json::json!(["kubernetes"]));

    let out = srv.kubectl_ok(&["create", "-n", "pb", "configmap", "x", "--from-literal=a=b", "--from-literal=e="]);
    assert!(out.contains("configmap/x created"), "{out}");
    let cm = json(&srv, &["-n", "pb", "configmap", "x"]);
    assert_eq!(cm["data"], serde_json::json!({"a": "b", "e": ""}));
    assert!(cm["metadata"]["creationTimestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{cm}");
    assert!(cm["metadata"].get("generation").is_none(), "{cm}");

    let out = srv.kubectl_ok(&["create", "-n", "pb", "secret", "generic", "s", "--from-literal=password=hunter2"]);
    assert!(out.contains("secret/s created"), "{out}");
    let s = json(&srv, &["-n", "pb", "secret", "s"]);
    assert_eq!(s["type"], "Opaque");
    assert_eq!(s["data"]["password"], "aHVudGVyMg==");

    let out = srv.kubectl_ok(&["create", "-n", "pb", "deployment", "d", "--image=busybox", "--replicas=2"]);
    assert!(out.contains("deployment.apps/d created"), "{out}");
    let d = json(&srv, &["-n", "pb", "deployment", "d"]);
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "d");
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!((c["name"].as_str(), c["image"].as_str()), (Some("busybox"), Some("busybox")));
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
    assert!(d["spec"].get("paused").is_none(), "{d}");

    let out = srv.kubectl_ok(&["create", "-n", "pb", "job", "j", "--image=busybox", "--", "echo", "hi"]);
    assert!(out.contains("job.batch/j created"), "{out}");
    let j = json(&srv, &["-n", "pb", "job", "j"]);
    let c = &j["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"], serde_json::json!(["echo", "hi"]));
    assert_eq!(j["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert_eq!(j["spec"]["backoffLimit"], 6);

    let out = srv.kubectl_ok(&["create", "-n", "pb", "serviceaccount", "bot"]);
    assert!(out.contains("serviceaccount/bot created"), "{out}");
    let sa = json(&srv, &["-n", "pb", "serviceaccount", "bot"]);
    assert_eq!(sa["metadata"]["name"], "bot");

    let out = srv.kubectl_ok(&["create", "-n", "pb", "service", "clusterip", "web", "--tcp=80:8080"]);
    assert!(out.contains("service/web created"), "{out}");
    let svc = json(&srv, &["-n", "pb", "service", "web"]);
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert!(svc["spec"]["clusterIP"].as_str().is_some_and(|ip| ip.starts_with("10.")), "{svc}");

    let out = srv.kubectl_ok(&["create", "-n", "pb", "role", "r", "--verb=get,list", "--resource=pods"]);
    assert!(out.contains("role.rbac.authorization.k8s.io/r created"), "{out}");
    let role = json(&srv, &["-n", "pb", "role", "r"]);
    assert_eq!(role["rules"][0]["verbs"], serde_json::json!(["get", "list"]));
    assert_eq!(role["rules"][0]["resources"], serde_json::json!(["pods"]));
    let out = srv.kubectl_ok(&["create", "-n", "pb", "rolebinding", "rb", "--role=r", "--user=alice"]);
    assert!(out.contains("rolebinding.rbac.authorization.k8s.io/rb created"), "{out}");
    let rb = json(&srv, &["-n", "pb", "rolebinding", "rb"]);
    assert_eq!(rb["roleRef"]["name"], "r");
    assert_eq!(rb["subjects"][0]["name"], "alice");

    let out = srv.kubectl_ok(&["create", "-n", "pb", "quota", "q", "--hard=pods=2,cpu=500m"]);
    assert!(out.contains("resourcequota/q created"), "{out}");
    let q = json(&srv, &["-n", "pb", "resourcequota", "q"]);
    assert_eq!(q["spec"]["hard"], serde_json::json!({"pods": "2", "cpu": "500m"}));

    let out = srv.kubectl_ok(&["create", "priorityclass", "high", "--value=1000", "--description=important"]);
    assert!(out.contains("priorityclass.scheduling.k8s.io/high created"), "{out}");
    let pc = json(&srv, &["priorityclass", "high"]);
    assert_eq!((pc["value"].as_i64(), pc["description"].as_str()), (Some(1000), Some("important")));

    // The typed generators do send protobuf (kubectl logs its request and response
    // headers at -v=8), and a create that the server refuses comes back as a readable Status.
    let traced = srv.kubectl(&["create", "-n", "pb", "configmap", "traced", "--from-literal=a=b", "-v=8"]);
    let log = String::from_utf8_lossy(&traced.stderr);
    assert!(traced.status.success(), "{log}");
    assert!(log.contains("Content-Type: application/vnd.kubernetes.protobuf"), "{log}");
    let dup = srv.kubectl(&["create", "-n", "pb", "configmap", "x", "--from-literal=a=b"]);
    assert!(!dup.status.success());
    let err = String::from_utf8_lossy(&dup.stderr);
    assert!(err.contains("configmaps \"x\" already exists"), "{err}");

    assert!(srv.kubectl_ok(&["delete", "-n", "pb", "configmap", "x"]).contains("deleted"));
    let gone = srv.kubectl(&["get", "-n", "pb", "configmap", "x"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("not found"));
}
