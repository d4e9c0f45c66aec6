//! kubectl 1.32 and authentication against `krate server`: `kubectl auth whoami`,
//! `kubectl create token`, kubeconfigs with tokens, the join token across a restart.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Server, free_port, kubectl_binary};

/// A kubeconfig for `srv` that authenticates with `token` only.
fn token_kubeconfig(srv: &Server, dir: &Path, name: &str, token: &str) -> String {
    let admin = std::fs::read_to_string(srv.kubeconfig()).unwrap();
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("the admin kubeconfig has the CA")
        .to_string();
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: {token}\n",
        srv.port
    );
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

fn kubectl_with(kubeconfig: &str, args: &[&str]) -> Output {
    Command::new(kubectl_binary()).arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn kubectl_whoami_tokens_and_the_join_token() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let srv = Server::start(&data, port);

    let me = srv.kubectl_ok(&["auth", "whoami"]);
    assert!(me.contains("Username") && me.contains("system:admin"), "{me}");
    assert!(me.contains("[system:masters system:authenticated]"), "{me}");

    // Impersonation with --as / --as-group (the admin may).
    let as_jane = srv.kubectl_ok(&["auth", "whoami", "--as", "jane", "--as-group", "dev", "-o", "json"]);
    let as_jane: serde_json::Value = serde_json::from_str(&as_jane).unwrap();
    assert_eq!(as_jane["status"]["userInfo"]["username"], "jane");
    assert_eq!(as_jane["status"]["userInfo"]["groups"], serde_json::json!(["dev", "system:authenticated"]));

    // A ServiceAccount's token, from `kubectl create token`, in a kubeconfig.
    srv.kubectl_ok(&["create", "serviceaccount", "robot"]);
    let token = srv.kubectl_ok(&["create", "token", "robot", "--duration=1h"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let robot = token_kubeconfig(&srv, dir.path(), "robot.kubeconfig", &token);
    let out = kubectl_with(&robot, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "system:serviceaccount:default:robot");
    // Authenticated, not (yet) authorized: Forbidden, not Unauthorized.
    let out = kubectl_with(&robot, &["get", "pods"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("Forbidden"), "{}", text(&out));

    // Durations below upstream's minimum are refused by the server.
    let out = srv.kubectl(&["create", "token", "robot", "--duration=5m"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("may not specify a duration less than 10 minutes"), "{}", text(&out));

    // Unknown and tampered tokens: 401, which kubectl reports as such.
    let bogus = token_kubeconfig(&srv, dir.path(), "bogus.kubeconfig", &format!("{token}x"));
    let out = kubectl_with(&bogus, &["get", "pods"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("Unauthorized"), "{}", text(&out));

    // The join token: made on first start, kept with mode 0600, a bootstrap token.
    let token_file = data.join("token");
    let join = std::fs::read_to_string(&token_file).unwrap().trim().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(srv.log().contains(&join), "the join token is not in the log");
    let id = join.split('.').next().unwrap().to_string();
    let joiner = token_kubeconfig(&srv, dir.path(), "join.kubeconfig", &join);
    let out = kubectl_with(&joiner, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("system:bootstrap:{id}"), "{}", text(&out));

    // A restart keeps the join token and the signing key.
    srv.stop();
    // The old kubeconfig would make the wait for readiness end at once.
    std::fs::remove_file(data.join("admin.kubeconfig")).unwrap();
    let srv = Server::start(&data, port);
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), join);
    for (kc, who) in
        [(&joiner, format!("system:bootstrap:{id}")), (&robot, "system:serviceaccount:default:robot".into())]
    {
        let out = kubectl_with(kc, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), who, "{}", text(&out));
    }
    srv.stop();
}
