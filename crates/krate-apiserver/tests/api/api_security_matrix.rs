//! The security matrix: every kind of identity × requests, through the whole road
//! (authentication, impersonation, RBAC and Node authorization, admission) over HTTPS with
//! kube-rs, proving both what is allowed and what is refused.
//!
//! Identities: the admin (system:masters certificate), a user with a namespaced Role (a
//! certificate), a node (system:node:n1 in system:nodes), a service account (a bound
//! token from the TokenRequest API, bound to `view` in its namespace), an anonymous
//! client, the admin impersonating the Role user, and the Role user trying to
//! impersonate the admin.

use std::time::Duration;

use crate::common::{TestServer, call, code};
use serde_json::{Value, json};

async fn token_client(srv: &TestServer, token: String) -> kube::Client {
    let mut cfg = srv.config().await;
    cfg.auth_info = kube::config::AuthInfo { token: Some(token.into()), ..Default::default() };
    kube::Client::try_from(cfg).expect("client")
}

async fn impersonating(srv: &TestServer, base: Option<(&str, &[&str])>, user: &str) -> kube::Client {
    let mut cfg = match base {
        None => srv.config().await,
        Some((name, groups)) => srv.user_config(name, groups).await,
    };
    cfg.auth_info.impersonate = Some(user.into());
    kube::Client::try_from(cfg).expect("client")
}

/// What is asked, method, path, body, and the expected code per identity (in the order
/// of the identities in the test).
type Row<'a> = (&'a str, &'a str, &'a str, Option<&'a Value>, [u16; 7]);

async fn setup(admin: &kube::Client) -> String {
    let post = |path: &'static str, body: Value| async move {
        call(admin, "POST", path, Some(body)).await.unwrap_or_else(|e| panic!("POST {path}: {e}"))
    };
    post("/api/v1/namespaces", json!({"metadata": {"name": "team"}})).await;
    post(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles",
        json!({"metadata": {"name": "dev"}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    )
    .await;
    post(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
        json!({"metadata": {"name": "dev-dana"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dev"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dana"}]}),
    )
    .await;
    post("/api/v1/namespaces/team/serviceaccounts", json!({"metadata": {"name": "bot"}})).await;
    post(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
        json!({"metadata": {"name": "bot-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
    )
    .await;
    for s in ["used", "unused"] {
        post("/api/v1/namespaces/team/secrets", json!({"metadata": {"name": s}, "stringData": {"k": "v"}})).await;
    }
    post("/api/v1/nodes", json!({"metadata": {"name": "n1"}})).await;
    post(
        "/api/v1/namespaces/team/pods",
        json!({"metadata": {"name": "web"}, "spec": {"nodeName": "n1", "serviceAccountName": "bot",
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "s", "secret": {"secretName": "used"}}]}}),
    )
    .await;
    let answer = call(admin, "POST", "/api/v1/namespaces/team/serviceaccounts/bot/token", Some(json!({"spec": {}})))
        .await
        .expect("a token for bot");
    answer["status"]["token"].as_str().expect("a token").to_string()
}

#[tokio::test]
async fn identities_by_requests_allow_and_deny_as_upstream() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    let token = setup(&admin).await;
    let identities: Vec<(&str, kube::Client)> = vec![
        ("admin", admin.clone()),
        ("dana", srv.user_client("dana", &["devs"]).await),
        ("node", srv.user_client("system:node:n1", &["system:nodes"]).await),
        ("bot", token_client(&srv, token).await),
        ("anonymous", srv.anonymous().await),
        ("admin-as-dana", impersonating(&srv, None, "dana").await),
        ("dana-as-admin", impersonating(&srv, Some(("dana", &["devs"])), "system:admin").await),
    ];
    let cm = json!({"metadata": {"generateName": "m-"}});
    let rows: Vec<Row> = vec![
        ("version", "GET", "/version", None, [200, 200, 200, 200, 200, 200, 403]),
        ("discovery", "GET", "/api", None, [200, 200, 200, 200, 403, 200, 403]),
        (
            "list team configmaps",
            "GET",
            "/api/v1/namespaces/team/configmaps",
            None,
            [200, 200, 403, 200, 403, 200, 403],
        ),
        (
            "create a team configmap",
            "POST",
            "/api/v1/namespaces/team/configmaps",
            Some(&cm),
            [200, 200, 403, 403, 403, 200, 403],
        ),
        (
            "list default configmaps",
            "GET",
            "/api/v1/namespaces/default/configmaps",
            None,
            [200, 403, 403, 403, 403, 403, 403],
        ),
        ("get a team pod", "GET", "/api/v1/namespaces/team/pods/web", None, [200, 200, 200, 200, 403, 200, 403]),
        // Nodes may delete pods (RBAC), NodeRestriction then looks the pod up: 404.
        (
            "delete a team pod",
            "DELETE",
            "/api/v1/namespaces/team/pods/missing",
            None,
            [404, 403, 404, 403, 403, 403, 403],
        ),
        (
            "get the used secret",
            "GET",
            "/api/v1/namespaces/team/secrets/used",
            None,
            [200, 403, 200, 403, 403, 403, 403],
        ),
        (
            "get an unused secret",
            "GET",
            "/api/v1/namespaces/team/secrets/unused",
            None,
            [200, 403, 403, 403, 403, 403, 403],
        ),
        // A node reads its own Node only (AuthorizeNodeWithSelectors).
        ("list nodes", "GET", "/api/v1/nodes", None, [200, 403, 403, 403, 403, 403, 403]),
        ("get its node", "GET", "/api/v1/nodes/n1", None, [200, 403, 200, 403, 403, 403, 403]),
        (
            "list cluster roles",
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            None,
            [200, 403, 403, 403, 403, 403, 403],
        ),
    ];
    // Decisions follow writes by the watch latency: wait until dana's Role and the node's
    // pod count.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for (i, path) in [(1, "/api/v1/namespaces/team/configmaps"), (2, "/api/v1/namespaces/team/secrets/used")] {
        while code(&identities[i].1, "GET", path, None).await != 200 {
            assert!(tokio::time::Instant::now() < deadline, "{} never allowed {path}", identities[i].0);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut mismatches = Vec::new();
    for (what, method, path, body, expected) in &rows {
        for ((who, client), want) in identities.iter().zip(expected) {
            let got = code(client, method, path, body.cloned()).await;
            if got != *want {
                mismatches.push(format!("{who} / {what}: expected {want}, got {got}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));

    // A refusal names the user and what was asked, as upstream.
    match call(&identities[1].1, "GET", "/api/v1/namespaces/default/configmaps", None).await {
        Err(kube::Error::Api(e)) => assert_eq!(
            e.message,
            "configmaps is forbidden: User \"dana\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
        ),
        other => panic!("expected 403, got {other:?}"),
    }
    match call(&identities[6].1, "GET", "/version", None).await {
        Err(kube::Error::Api(e)) => assert!(
            e.message.contains("User \"dana\" cannot impersonate resource \"users\" in API group \"\""),
            "{}",
            e.message
        ),
        other => panic!("expected 403, got {other:?}"),
    }
}
