//! kubectl 1.32 against `krate server` with the default authorization (Node,RBAC):
//! `kubectl auth can-i` (plain and --list) for users with their own kubeconfigs and
//! client certificates signed by the cluster CA, RBAC objects made with kubectl, and
//! privilege escalation refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{Server, free_port, kubectl_binary, squeeze};

/// A kubeconfig for `user` in `groups`: a key and certificate signed with the cluster CA
/// (openssl), beside the admin kubeconfig's cluster.
fn user_kubeconfig(srv: &Server, dir: &Path, user: &str, groups: &[&str]) -> PathBuf {
    let tls = srv.data_dir.join("server").join("tls");
    let file = user.replace(':', "_");
    let (key, csr, crt) =
        (dir.join(format!("{file}.key")), dir.join(format!("{file}.csr")), dir.join(format!("{file}.crt")));
    let subject: String = groups.iter().map(|g| format!("/O={g}")).collect::<String>() + &format!("/CN={user}");
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        path(&key),
        "-out",
        path(&csr),
        "-subj",
        &subject,
    ]);
    // A v3 client certificate: rustls refuses extension-less (v1) ones.
    let ext = dir.join(format!("{file}.ext"));
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    let serial =
        format!("0x{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    run(&[
        "x509",
        "-req",
        "-in",
        path(&csr),
        "-CA",
        path(&tls.join("server-ca.crt")),
        "-CAkey",
        path(&tls.join("server-ca.key")),
        "-set_serial",
        &serial,
        "-extfile",
        path(&ext),
        "-out",
        path(&crt),
        "-days",
        "1",
    ]);
    let kubeconfig = dir.join(format!("{file}.kubeconfig"));
    std::fs::copy(srv.kubeconfig(), &kubeconfig).unwrap();
    let kc = |args: &[&str]| {
        let out = Command::new(kubectl_binary()).args(args).env("KUBECONFIG", &kubeconfig).output().unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let cert_arg = format!("--client-certificate={}", crt.display());
    let key_arg = format!("--client-key={}", key.display());
    kc(&["config", "set-credentials", user, &cert_arg, &key_arg, "--embed-certs=true"]);
    let current = String::from_utf8(
        Command::new(kubectl_binary())
            .args(["config", "current-context"])
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    kc(&["config", "set-context", current.trim(), &format!("--user={user}")]);
    kubeconfig
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn kubectl_as(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(kubectl_binary()).args(args).env("KUBECONFIG", kubeconfig).output().expect("kubectl runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `kubectl auth can-i` until it answers `want` (decisions follow writes by the watch
/// latency), bounded.
fn can_i_becomes(kubeconfig: &Path, args: &[&str], want: &str) -> String {
    let mut full = vec!["auth", "can-i"];
    full.extend_from_slice(args);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = kubectl_as(kubeconfig, &full);
        // A refusal may carry the authorizer's reason: "no - …".
        let answer = stdout(&out);
        if answer == want || answer.starts_with(&format!("{want} - ")) {
            // kubectl exits 0 for yes and 1 for no.
            assert_eq!(out.status.success(), want == "yes", "{args:?}");
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "can-i {args:?}: still {:?} ({})",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn kubectl_auth_can_i_with_rbac() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let admin = srv.kubeconfig();

    // The admin (system:masters) may do anything, and --list shows cluster-admin's rules.
    can_i_becomes(&admin, &["*", "*"], "yes");
    let list = squeeze(&srv.kubectl_ok(&["auth", "can-i", "--list"]));
    assert!(list.contains(&"*.* [] [] [*]".to_string()), "{list:?}");
    assert!(list.contains(&"[*] [] [*]".to_string()), "{list:?}");

    srv.kubectl_ok(&["create", "namespace", "team"]);
    srv.kubectl_ok(&["create", "role", "pod-reader", "-n", "team", "--verb=get,list,watch", "--resource=pods"]);
    srv.kubectl_ok(&["create", "rolebinding", "jane-reads", "-n", "team", "--role=pod-reader", "--user=jane"]);

    let jane = user_kubeconfig(&srv, dir.path(), "jane", &["devs"]);
    can_i_becomes(&jane, &["list", "pods", "-n", "team"], "yes");
    can_i_becomes(&jane, &["delete", "pods", "-n", "team"], "no");
    can_i_becomes(&jane, &["list", "pods", "-n", "default"], "no");
    can_i_becomes(&jane, &["create", "selfsubjectaccessreviews.authorization.k8s.io"], "yes");
    let listed = kubectl_as(&jane, &["auth", "can-i", "--list", "-n", "team"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let lines = squeeze(&String::from_utf8_lossy(&listed.stdout));
    assert_eq!(lines[0], "Resources Non-Resource URLs Resource Names Verbs");
    for want in [
        "pods [] [] [get list watch]",
        "selfsubjectaccessreviews.authorization.k8s.io [] [] [create]",
        "selfsubjectrulesreviews.authorization.k8s.io [] [] [create]",
        "[/healthz] [] [get]",
    ] {
        assert!(lines.contains(&want.to_string()), "{want} missing from {lines:?}");
    }
    assert!(!lines.iter().any(|l| l.starts_with("*.*")), "{lines:?}");

    // Refusals name the user and the missing permission.
    let out = kubectl_as(&jane, &["get", "pods", "-n", "default"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );

    // jane may manage roles in team, but only grant what she holds.
    srv.kubectl_ok(&["create", "role", "role-manager", "-n", "team", "--verb=create,get,list", "--resource=roles"]);
    srv.kubectl_ok(&["create", "rolebinding", "jane-manages", "-n", "team", "--role=role-manager", "--user=jane"]);
    can_i_becomes(&jane, &["create", "roles.rbac.authorization.k8s.io", "-n", "team"], "yes");
    let out = kubectl_as(&jane, &["create", "role", "deleter", "-n", "team", "--verb=delete", "--resource=pods"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is attempting to grant RBAC permissions not currently held"), "{err}");
    assert!(err.contains("{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}"), "{err}");
    let out = kubectl_as(&jane, &["create", "role", "reader2", "-n", "team", "--verb=get", "--resource=pods"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // A node identity: its own lease yes, other nodes' leases and unrelated secrets no.
    let node = user_kubeconfig(&srv, dir.path(), "system:node:n1", &["system:nodes"]);
    can_i_becomes(&node, &["get", "leases.coordination.k8s.io/n1", "-n", "kube-node-lease"], "yes");
    let answer = can_i_becomes(&node, &["get", "leases.coordination.k8s.io/n2", "-n", "kube-node-lease"], "no");
    assert_eq!(answer, "no - can only access node lease with the same name as the requesting node");
    let answer = can_i_becomes(&node, &["get", "secrets/anything", "-n", "default"], "no");
    assert_eq!(answer, "no - no relationship found between node 'n1' and this object");
    // Its own Node only (AuthorizeNodeWithSelectors, on by default since v1.32).
    can_i_becomes(&node, &["get", "nodes/n1"], "yes");
    let answer = can_i_becomes(&node, &["list", "nodes"], "no");
    assert_eq!(answer, "no - node 'n1' cannot read all nodes, only its own Node object");
}
