//! Authorization over HTTPS with kube-rs: users with client certificates of different
//! identities (admin, a user with a namespaced Role, a node, a service account,
//! anonymous) against the RBAC and Node authorizers, the bootstrap policy, ClusterRole
//! aggregation, privilege-escalation prevention and the access reviews.

use std::future::Future;
use std::time::Duration;

use crate::common::{TestServer, call, code};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

async fn forbidden_message(c: &kube::Client, method: &str, path: &str, body: Option<Value>) -> String {
    match call(c, method, path, body).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            assert_eq!(e.reason, "Forbidden");
            e.message
        }
        other => panic!("{method} {path}: expected 403, got {other:?}"),
    }
}

/// Polls `f` until it is true: decisions follow writes by the watch latency.
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create(c: &kube::Client, path: &str, body: Value) -> Value {
    call(c, "POST", path, Some(body)).await.unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules})
}

fn binding(kind: &str, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    })
}

fn user_subject(name: &str) -> Value {
    json!([{"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}])
}

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

#[tokio::test]
async fn bootstrap_policy_is_created_with_its_labels_and_aggregated_roles() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    let ca = call(&admin, "GET", &format!("{RBAC}/clusterroles/cluster-admin"), None).await.unwrap();
    assert_eq!(ca["metadata"]["labels"]["kubernetes.io/bootstrapping"], "rbac-defaults");
    assert_eq!(ca["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"], "true");
    assert_eq!(ca["rules"][0]["verbs"], json!(["*"]));
    let crb = call(&admin, "GET", &format!("{RBAC}/clusterrolebindings/cluster-admin"), None).await.unwrap();
    assert_eq!(crb["subjects"][0]["name"], "system:masters");
    let piv =
        call(&admin, "GET", &format!("{RBAC}/clusterrolebindings/system:public-info-viewer"), None).await.unwrap();
    let names: Vec<&str> = piv["subjects"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["system:authenticated", "system:unauthenticated"]);
    let _ = call(
        &admin,
        "GET",
        &format!("{RBAC}/namespaces/kube-system/roles/extension-apiserver-authentication-reader"),
        None,
    )
    .await
    .unwrap();
    let _ = call(
        &admin,
        "GET",
        &format!("{RBAC}/namespaces/kube-public/rolebindings/system:controller:bootstrap-signer"),
        None,
    )
    .await
    .unwrap();
    // view, edit and admin gather the aggregate-to-* roles' rules.
    let grants = |role: Value, resource: &str, verb: &str| {
        role["rules"].as_array().into_iter().flatten().any(|r| {
            r["resources"].as_array().is_some_and(|rs| rs.iter().any(|x| x == resource))
                && r["verbs"].as_array().is_some_and(|vs| vs.iter().any(|v| v == verb))
        })
    };
    let admin2 = admin.clone();
    let get_role = move |name: &str| {
        let (c, path) = (admin2.clone(), format!("{RBAC}/clusterroles/{name}"));
        async move { call(&c, "GET", &path, None).await.unwrap() }
    };
    eventually("admin aggregates edit, view and aggregate-to-admin", || async {
        let (view, edit, adm) = (get_role("view").await, get_role("edit").await, get_role("admin").await);
        grants(view.clone(), "pods", "list")
            && !grants(view, "secrets", "get")
            && grants(edit.clone(), "secrets", "create")
            && grants(edit.clone(), "pods", "list")
            && !grants(edit, "rolebindings", "create")
            && grants(adm.clone(), "rolebindings", "create")
            && grants(adm, "pods", "list")
    })
    .await;
}

#[tokio::test]
async fn a_namespaced_role_allows_its_rules_in_its_namespace_only() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    create(&admin, "/api/v1/namespaces", namespace("team")).await;
    create(
        &admin,
        &format!("{RBAC}/namespaces/team/roles"),
        role(
            "pod-reader",
            json!([{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}]),
        ),
    )
    .await;
    create(
        &admin,
        &format!("{RBAC}/namespaces/team/rolebindings"),
        binding("RoleBinding", "jane-reads", "Role", "pod-reader", user_subject("jane")),
    )
    .await;
    let jane = srv.user_client("jane", &["devs"]).await;
    eventually("jane may list pods in team", || async {
        code(&jane, "GET", "/api/v1/namespaces/team/pods", None).await == 200
    })
    .await;
    // Not in other namespaces, not other verbs or resources, not cluster-wide.
    let msg = forbidden_message(&jane, "GET", "/api/v1/namespaces/default/pods", None).await;
    assert_eq!(
        msg,
        "pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let msg = forbidden_message(&jane, "POST", "/api/v1/namespaces/team/configmaps", Some(cm)).await;
    assert!(msg.starts_with("configmaps is forbidden: User \"jane\" cannot create resource \"configmaps\""), "{msg}");
    assert_eq!(code(&jane, "DELETE", "/api/v1/namespaces/team/pods/x", None).await, 403);
    assert_eq!(code(&jane, "GET", "/api/v1/pods", None).await, 403);
    assert_eq!(code(&jane, "GET", "/api/v1/namespaces/team/pods/x/exec", None).await, 403);
    // The subresource the rule names is allowed (the pod does not exist: 404).
    assert_ne!(code(&jane, "GET", "/api/v1/namespaces/team/pods/x/log", None).await, 403);
    // Every authenticated user reads discovery and health through the bootstrap roles.
    assert_eq!(code(&jane, "GET", "/apis", None).await, 200);
    assert_eq!(jane.request_text(http::Request::get("/healthz").body(vec![]).unwrap()).await.unwrap(), "ok");
    // Taking the binding away takes the permission away.
    call(&admin, "DELETE", &format!("{RBAC}/namespaces/team/rolebindings/jane-reads"), None).await.unwrap();
    eventually("jane loses pods", || async { code(&jane, "GET", "/api/v1/namespaces/team/pods", None).await == 403 })
        .await;
    // Groups are subjects too.
    create(
        &admin,
        &format!("{RBAC}/namespaces/team/rolebindings"),
        binding(
            "RoleBinding",
            "devs-read",
            "Role",
            "pod-reader",
            json!([{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    )
    .await;
    eventually("devs may list pods", || async {
        code(&jane, "GET", "/api/v1/namespaces/team/pods", None).await == 200
    })
    .await;
}

#[tokio::test]
async fn anonymous_users_get_public_information_only() {
    let srv = TestServer::start().await;
    let anon = srv.anonymous().await;
    assert_eq!(code(&anon, "GET", "/version", None).await, 200);
    let msg = forbidden_message(&anon, "GET", "/api/v1/namespaces/default/pods", None).await;
    assert!(msg.contains("User \"system:anonymous\" cannot list resource \"pods\""), "{msg}");
    let msg = forbidden_message(&anon, "GET", "/.well-known/openid-configuration", None).await;
    assert_eq!(msg, "forbidden: User \"system:anonymous\" cannot get path \"/.well-known/openid-configuration\"");
    // Decisions are counted per authorizer.
    let admin = srv.client().await;
    let metrics = admin.request_text(http::Request::get("/metrics").body(vec![]).unwrap()).await.unwrap();
    for want in [
        r#"apiserver_authorization_decisions_total{decision="allowed",name="privileged",type="Privileged"}"#,
        r#"apiserver_authorization_decisions_total{decision="noopinion",name="rbac",type="RBAC"}"#,
    ] {
        assert!(metrics.contains(want), "{want} missing");
    }
}

#[tokio::test]
async fn service_accounts_are_subjects_by_namespace_and_name() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    create(&admin, "/api/v1/namespaces", namespace("apps")).await;
    create(
        &admin,
        &format!("{RBAC}/namespaces/apps/rolebindings"),
        binding(
            "RoleBinding",
            "bot-view",
            "ClusterRole",
            "view",
            json!([{"kind": "ServiceAccount", "name": "bot", "namespace": "apps"}]),
        ),
    )
    .await;
    // One group per certificate: the PKI's subject keeps a single O.
    let groups = ["system:serviceaccounts"];
    let bot = srv.user_client("system:serviceaccount:apps:bot", &groups).await;
    let other = srv.user_client("system:serviceaccount:apps:other", &groups).await;
    eventually("the bot views deployments", || async {
        code(&bot, "GET", "/apis/apps/v1/namespaces/apps/deployments", None).await == 200
    })
    .await;
    assert_eq!(code(&bot, "GET", "/api/v1/namespaces/apps/configmaps", None).await, 200);
    // view grants no secrets and no writes; the binding is for this account only.
    assert_eq!(code(&bot, "GET", "/api/v1/namespaces/apps/secrets", None).await, 403);
    assert_eq!(code(&bot, "DELETE", "/api/v1/namespaces/apps/configmaps/x", None).await, 403);
    assert_eq!(code(&other, "GET", "/apis/apps/v1/namespaces/apps/deployments", None).await, 403);
    // Every service account reads the issuer discovery documents (served elsewhere: not 403).
    let r = call(&other, "GET", "/.well-known/openid-configuration", None).await;
    assert!(!matches!(&r, Err(kube::Error::Api(e)) if e.code == 403), "{r:?}");
    assert_ne!(code(&other, "GET", "/openid/v1/jwks", None).await, 403);
}

#[tokio::test]
async fn nodes_read_only_what_their_pods_use() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    for name in ["used", "unused"] {
        let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"k": "v"}});
        create(&admin, "/api/v1/namespaces/default/secrets", s).await;
    }
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"k": "v"}});
    create(&admin, "/api/v1/namespaces/default/configmaps", cm).await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {
            "nodeName": "n1",
            "volumes": [{"name": "s", "secret": {"secretName": "used"}}],
            "containers": [{"name": "c", "image": "nginx", "envFrom": [{"configMapRef": {"name": "settings"}}]}],
        },
    });
    create(&admin, "/api/v1/namespaces/default/pods", pod).await;
    let n1 = srv.user_client("system:node:n1", &["system:nodes"]).await;
    let n2 = srv.user_client("system:node:n2", &["system:nodes"]).await;
    eventually("n1 reads the secret its pod mounts", || async {
        code(&n1, "GET", "/api/v1/namespaces/default/secrets/used", None).await == 200
    })
    .await;
    assert_eq!(code(&n1, "GET", "/api/v1/namespaces/default/configmaps/settings", None).await, 200);
    assert_eq!(code(&n1, "GET", "/api/v1/namespaces/default/pods/web", None).await, 200);
    let msg = forbidden_message(&n1, "GET", "/api/v1/namespaces/default/secrets/unused", None).await;
    assert!(msg.ends_with(": no relationship found between node 'n1' and this object"), "{msg}");
    let msg = forbidden_message(&n2, "GET", "/api/v1/namespaces/default/secrets/used", None).await;
    assert!(msg.contains("no relationship found between node 'n2' and this object"), "{msg}");
    assert_eq!(code(&n1, "GET", "/api/v1/namespaces/default/secrets", None).await, 403);
    // A kubelet lists (and watches) one secret by name.
    let by_name = |name: &str| format!("/api/v1/namespaces/default/secrets?fieldSelector=metadata.name%3D{name}");
    assert_eq!(code(&n1, "GET", &by_name("used"), None).await, 200);
    assert_eq!(code(&n1, "GET", &by_name("unused"), None).await, 403);
    assert_eq!(code(&n1, "DELETE", "/api/v1/namespaces/default/secrets/used", None).await, 403);
    // Its own lease (absent: 404), not another node's.
    assert_eq!(code(&n1, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", None).await, 404);
    let msg =
        forbidden_message(&n1, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2", None).await;
    assert!(msg.ends_with("can only access node lease with the same name as the requesting node"), "{msg}");
    // Tokens for the service accounts of its pods: authorized, then NodeRestriction
    // admission wants them bound to one of its pods.
    let msg = forbidden_message(
        &n1,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        Some(json!({"spec": {}})),
    )
    .await;
    assert!(msg.contains("node requested token not bound to a pod"), "{msg}");
    assert_eq!(
        code(&n2, "POST", "/api/v1/namespaces/default/serviceaccounts/default/token", Some(json!({"spec": {}}))).await,
        403
    );
    // Nodes and pods by selector (AuthorizeNodeWithSelectors): its own Node only, and
    // pod lists narrowed to itself.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    assert_eq!(code(&n1, "POST", "/api/v1/nodes", Some(node)).await, 200);
    assert_eq!(code(&n1, "GET", "/api/v1/nodes/n1", None).await, 200);
    assert_eq!(code(&n1, "GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dn1", None).await, 200);
    let msg = forbidden_message(&n1, "GET", "/api/v1/nodes", None).await;
    assert!(msg.ends_with("node 'n1' cannot read all nodes, only its own Node object"), "{msg}");
    let msg = forbidden_message(&n1, "GET", "/api/v1/nodes/n2", None).await;
    assert!(msg.ends_with("node 'n1' cannot read 'n2', only its own Node object"), "{msg}");
    assert_eq!(code(&n1, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", None).await, 200);
    for path in [
        "/api/v1/pods",
        "/api/v1/pods?watch=true",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2",
        "/api/v1/pods?fieldSelector=spec.nodeName%21%3Dn1",
    ] {
        let msg = forbidden_message(&n1, "GET", path, None).await;
        assert!(msg.ends_with("can only list/watch pods with spec.nodeName field selector"), "{path}: {msg}");
    }
    assert_eq!(code(&n2, "GET", "/api/v1/namespaces/default/pods/web", None).await, 403);
    // The static node rules: events yes, namespaces no.
    assert_eq!(code(&n1, "GET", "/api/v1/namespaces", None).await, 403);
    // VolumeAttachments and ResourceSlices: a node's own only.
    let va = |name: &str, node: &str| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
            "spec": {"attacher": "csi.example.com", "nodeName": node, "source": {"persistentVolumeName": "pv"}}})
    };
    create(&admin, "/apis/storage.k8s.io/v1/volumeattachments", va("va-n1", "n1")).await;
    create(&admin, "/apis/storage.k8s.io/v1/volumeattachments", va("va-n2", "n2")).await;
    let slice = |name: &str, node: &str| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": "gpu.example.com", "nodeName": node, "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}}})
    };
    create(&admin, "/apis/resource.k8s.io/v1/resourceslices", slice("rs-n2", "n2")).await;
    eventually("n1 reads its volume attachment", || async {
        code(&n1, "GET", "/apis/storage.k8s.io/v1/volumeattachments/va-n1", None).await == 200
    })
    .await;
    assert_eq!(code(&n1, "GET", "/apis/storage.k8s.io/v1/volumeattachments/va-n2", None).await, 403);
    assert_eq!(code(&n1, "GET", "/apis/storage.k8s.io/v1/volumeattachments", None).await, 403);
    assert_eq!(code(&n1, "POST", "/apis/resource.k8s.io/v1/resourceslices", Some(slice("rs-n1", "n1"))).await, 200);
    let msg =
        forbidden_message(&n1, "POST", "/apis/resource.k8s.io/v1/resourceslices", Some(slice("rs-x", "n2"))).await;
    assert!(msg.ends_with("can only create ResourceSlice with the same NodeName as the requesting node"), "{msg}");
    assert_eq!(
        code(&n1, "GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn1", None).await,
        200
    );
    let msg = forbidden_message(&n1, "GET", "/apis/resource.k8s.io/v1/resourceslices", None).await;
    assert!(msg.ends_with("can only list/watch/deletecollection resourceslices with nodeName field selector"), "{msg}");
    assert_eq!(code(&n1, "DELETE", "/apis/resource.k8s.io/v1/resourceslices/rs-n2", None).await, 403);
    eventually("n1 deletes its own slice", || async {
        code(&n1, "DELETE", "/apis/resource.k8s.io/v1/resourceslices/rs-n1", None).await == 200
    })
    .await;
    // Moving the pod away ends the relationship.
    call(&admin, "DELETE", "/api/v1/namespaces/default/pods/web?gracePeriodSeconds=0", None).await.unwrap();
    eventually("n1 loses the secret", || async {
        code(&n1, "GET", "/api/v1/namespaces/default/secrets/used", None).await == 403
    })
    .await;
}

#[tokio::test]
async fn granting_permissions_one_does_not_hold_is_refused() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    create(&admin, "/api/v1/namespaces", namespace("team")).await;
    create(
        &admin,
        &format!("{RBAC}/namespaces/team/roles"),
        role(
            "delegate",
            json!([
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["get", "list", "create", "update", "patch", "delete"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            ]),
        ),
    )
    .await;
    create(
        &admin,
        &format!("{RBAC}/namespaces/team/rolebindings"),
        binding("RoleBinding", "delegate", "Role", "delegate", user_subject("dana")),
    )
    .await;
    let dana = srv.user_client("dana", &[]).await;
    let roles = format!("{RBAC}/namespaces/team/roles");
    let readers = role("readers", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]));
    eventually("dana may grant what she holds", || async {
        code(&dana, "POST", &roles, Some(readers.clone())).await == 200
    })
    .await;
    let deleters =
        role("deleters", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete", "watch"]}]));
    let msg = forbidden_message(&dana, "POST", &roles, Some(deleters.clone())).await;
    assert_eq!(
        msg,
        "roles.rbac.authorization.k8s.io \"deleters\" is forbidden: user \"dana\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"watch\"]}"
    );
    // Widening an existing role is an update: refused the same way.
    let mut widened = call(&dana, "GET", &format!("{roles}/readers"), None).await.unwrap();
    widened["rules"][0]["verbs"] = json!(["get", "delete"]);
    assert_eq!(code(&dana, "PUT", &format!("{roles}/readers"), Some(widened)).await, 403);
    // Binding a role whose rules she lacks needs `bind` on it.
    let bindings = format!("{RBAC}/namespaces/team/rolebindings");
    let bind_admin = binding("RoleBinding", "friend-admin", "ClusterRole", "admin", user_subject("friend"));
    let msg = forbidden_message(&dana, "POST", &bindings, Some(bind_admin.clone())).await;
    assert!(
        msg.starts_with("rolebindings.rbac.authorization.k8s.io \"friend-admin\" is forbidden: user \"dana\""),
        "{msg}"
    );
    let bind_readers = binding("RoleBinding", "friend-readers", "Role", "readers", user_subject("friend"));
    assert_eq!(code(&dana, "POST", &bindings, Some(bind_readers)).await, 200);
    // With `bind` on the admin ClusterRole and `escalate` on roles, both go through.
    create(
        &admin,
        &roles,
        role(
            "powers",
            json!([
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["admin"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]},
            ]),
        ),
    )
    .await;
    create(&admin, &bindings, binding("RoleBinding", "dana-powers", "Role", "powers", user_subject("dana"))).await;
    eventually("dana may bind admin", || async {
        code(&dana, "POST", &bindings, Some(bind_admin.clone())).await == 200
    })
    .await;
    assert_eq!(code(&dana, "POST", &roles, Some(deleters)).await, 200);
    // Cluster roles: she holds no cluster-wide rules at all.
    let cr = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "x"}, "rules": []});
    assert_eq!(code(&dana, "POST", &format!("{RBAC}/clusterroles"), Some(cr)).await, 403);
    // The admin (system:masters) may grant anything.
    let all = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "everything"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    create(&admin, &format!("{RBAC}/clusterroles"), all).await;
}

#[tokio::test]
async fn aggregated_cluster_roles_follow_labelled_roles() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    let widgets = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "widgets-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}],
    });
    create(&admin, &format!("{RBAC}/clusterroles"), widgets).await;
    let has_widgets = |name: &'static str| {
        let c = admin.clone();
        async move {
            let role = call(&c, "GET", &format!("{RBAC}/clusterroles/{name}"), None).await.unwrap();
            role["rules"].as_array().into_iter().flatten().any(|r| r["resources"] == json!(["widgets"]))
        }
    };
    eventually("view, edit and admin gain widgets", || async {
        has_widgets("view").await && has_widgets("edit").await && has_widgets("admin").await
    })
    .await;
    // A user bound to view may now read widgets' rule through RBAC (a SelfSubjectAccessReview).
    call(&admin, "DELETE", &format!("{RBAC}/clusterroles/widgets-view"), None).await.unwrap();
    eventually("view loses widgets", || async { !has_widgets("view").await && !has_widgets("admin").await }).await;
}

#[tokio::test]
async fn access_reviews_answer_for_users_and_for_oneself() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    create(&admin, "/api/v1/namespaces", namespace("team")).await;
    create(
        &admin,
        &format!("{RBAC}/namespaces/team/rolebindings"),
        binding("RoleBinding", "jane-edit", "ClusterRole", "edit", user_subject("jane")),
    )
    .await;
    let sar = |user: &str, verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": user, "groups": ["system:authenticated"],
            "resourceAttributes": {"namespace": ns, "verb": verb, "resource": "pods"}}})
    };
    let sars = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    eventually("jane may create pods in team", || async {
        call(&admin, "POST", sars, Some(sar("jane", "create", "team"))).await.unwrap()["status"]["allowed"] == true
    })
    .await;
    let allowed = call(&admin, "POST", sars, Some(sar("jane", "create", "team"))).await.unwrap();
    assert_eq!(
        allowed["status"]["reason"],
        "RBAC: allowed by RoleBinding \"jane-edit/team\" of ClusterRole \"edit\" to User \"jane\""
    );
    let denied = call(&admin, "POST", sars, Some(sar("jane", "create", "default"))).await.unwrap();
    assert_eq!(denied["status"]["allowed"], false);
    // A node's pod list is judged by the review's field selector, raw or as requirements.
    let node_list = |selector: Value| {
        json!({"spec": {"user": "system:node:n1", "groups": ["system:nodes", "system:authenticated"],
            "resourceAttributes": {"verb": "list", "resource": "pods", "fieldSelector": selector}}})
    };
    for (selector, allowed) in [
        (json!({"rawSelector": "spec.nodeName=n1"}), true),
        (json!({"requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["n1"]}]}), true),
        (json!({"rawSelector": "spec.nodeName=n2"}), false),
        (json!({"requirements": [{"key": "spec.nodeName", "operator": "NotIn", "values": ["n1"]}]}), false),
        (json!({}), false),
    ] {
        let answer = call(&admin, "POST", sars, Some(node_list(selector.clone()))).await.unwrap();
        assert_eq!(answer["status"]["allowed"], allowed, "{selector}: {answer}");
    }
    let masters = json!({"spec": {"user": "x", "groups": ["system:masters"], "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}});
    assert_eq!(call(&admin, "POST", sars, Some(masters)).await.unwrap()["status"]["allowed"], true);
    // Bad reviews are 422 with upstream's causes.
    for (body, field) in [
        (json!({"spec": {"user": "jane"}}), "spec.resourceAttributes"),
        (json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}), "spec.user"),
    ] {
        match call(&admin, "POST", sars, Some(body)).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{field}: {}", e.message)
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    let local = json!({"spec": {"user": "jane", "resourceAttributes": {"namespace": "other", "verb": "get", "resource": "pods"}}});
    assert_eq!(
        code(&admin, "POST", "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews", Some(local))
            .await,
        422
    );
    let local = json!({"spec": {"user": "jane", "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods"}}});
    let answer =
        call(&admin, "POST", "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews", Some(local))
            .await
            .unwrap();
    assert_eq!(answer["status"]["allowed"], true, "{answer}");

    // jane asks for herself; she may not ask about others.
    let jane = srv.user_client("jane", &[]).await;
    let self_review = |verb: &str| json!({"spec": {"resourceAttributes": {"namespace": "team", "verb": verb, "resource": "secrets"}}});
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    assert_eq!(call(&jane, "POST", ssar, Some(self_review("create"))).await.unwrap()["status"]["allowed"], true);
    assert_eq!(call(&jane, "POST", ssar, Some(self_review("escalate"))).await.unwrap()["status"]["allowed"], false);
    assert_eq!(code(&jane, "POST", sars, Some(sar("jane", "get", "team"))).await, 403);
    let rules = call(
        &jane,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        Some(json!({"spec": {"namespace": "team"}})),
    )
    .await
    .unwrap();
    let resource_rules = rules["status"]["resourceRules"].as_array().unwrap();
    assert!(
        resource_rules.iter().any(|r| r["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "selfsubjectaccessreviews"))
    );
    assert!(resource_rules.iter().any(|r| r["resources"].as_array().unwrap().iter().any(|x| x == "deployments")));
    let urls = rules["status"]["nonResourceRules"].as_array().unwrap();
    assert!(urls.iter().any(|r| r["nonResourceURLs"].as_array().unwrap().iter().any(|x| x == "/healthz")));
    assert_eq!(rules["status"]["incomplete"], false);
    assert_eq!(
        code(&jane, "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", Some(json!({"spec": {}}))).await,
        400
    );
}
