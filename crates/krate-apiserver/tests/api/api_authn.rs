//! Authentication over HTTPS with kube-rs: client certificates, static, bootstrap and
//! service-account tokens, TokenRequest, TokenReview, SelfSubjectReview, OIDC
//! discovery, anonymous requests and impersonation. Bad credentials get 401 with
//! upstream's Unauthorized Status, never 500; until RBAC serves, a non-master user is
//! authenticated (whoami works) and refused (403) everything else.

use std::time::{Duration, Instant};

use crate::common::TestServer;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use krate_auth::authn::jwt::SigningKey;
use serde_json::{Value, json};

/// A client for `srv` authenticating with `user` (a kubeconfig user block, YAML).
async fn client_as(srv: &TestServer, user: &str) -> kube::Client {
    let ca = B64.encode(&srv.running.pki.ca.cert_pem);
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user:\n{user}",
        srv.running.url
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

async fn with_token(srv: &TestServer, token: &str) -> kube::Client {
    client_as(srv, &format!("    token: {token}\n")).await
}

async fn with_cert(srv: &TestServer, cert_pem: &str, key_pem: &str) -> kube::Client {
    client_as(
        srv,
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            B64.encode(cert_pem),
            B64.encode(key_pem)
        ),
    )
    .await
}

fn get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(vec![]).unwrap()
}

fn post(path: &str, body: Value) -> http::Request<Vec<u8>> {
    http::Request::post(path).header("content-type", "application/json").body(body.to_string().into_bytes()).unwrap()
}

/// The status code and reason a request failed with (0 when it succeeded).
async fn outcome(client: &kube::Client, req: http::Request<Vec<u8>>) -> (u16, String) {
    match client.request::<Value>(req).await {
        Ok(_) => (0, String::new()),
        Err(kube::Error::Api(e)) => (e.code, e.reason.clone()),
        Err(e) => panic!("expected an API answer, got {e:?}"),
    }
}

async fn assert_unauthorized(client: &kube::Client, what: &str) {
    match client.request::<Value>(get("/api/v1/namespaces/default/configmaps")).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (401, "Unauthorized", "Unauthorized"), "{what}")
        }
        other => panic!("{what}: expected 401, got {other:?}"),
    }
}

/// `kubectl auth whoami`: the SelfSubjectReview's userInfo.
async fn whoami(client: &kube::Client) -> Value {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let answer: Value =
        client.request(post("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)).await.expect("whoami");
    assert_eq!(answer["kind"], "SelfSubjectReview");
    answer["status"]["userInfo"].clone()
}

async fn create(admin: &kube::Client, path: &str, obj: Value) -> Value {
    admin.request(post(path, obj)).await.unwrap_or_else(|e| panic!("creating at {path}: {e:?}"))
}

async fn token_request(admin: &kube::Client, ns: &str, sa: &str, spec: Value) -> Result<Value, kube::Error> {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    admin.request(post(&format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"), body)).await
}

async fn token_for(admin: &kube::Client, ns: &str, sa: &str, spec: Value) -> String {
    let answer = token_request(admin, ns, sa, spec).await.expect("token request");
    answer["status"]["token"].as_str().expect("a token").to_string()
}

/// Waits (bounded) until `client` is refused with 401.
async fn eventually_unauthorized(client: &kube::Client, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _) = outcome(client, get("/api/v1/namespaces/default/configmaps")).await;
        if code == 401 {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still answered {code} after 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn client_certificates_are_checked_against_the_cluster_ca() {
    let srv = TestServer::start().await;
    // One of ours: authenticated (whoami), not authorized for resources yet.
    let jane = srv.running.pki.issue_client("jane", &["dev"]).unwrap();
    let client = with_cert(&srv, &jane.cert_pem, &jane.key_pem).await;
    let me = whoami(&client).await;
    assert_eq!(me["username"], "jane");
    assert_eq!(me["groups"], json!(["dev", "system:authenticated"]));
    assert_eq!(outcome(&client, get("/api/v1/namespaces/default/configmaps")).await.0, 403);

    // Another CA's certificate: 401 (not a failed handshake).
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "elsewhere-ca");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other_ca = ca_params.self_signed(&other_key).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&other_ca.pem(), &other_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.distinguished_name.push(rcgen::DnType::CommonName, "system:admin");
    leaf.distinguished_name.push(rcgen::DnType::OrganizationName, "system:masters");
    let forged = leaf.signed_by(&leaf_key, &issuer).unwrap();
    assert_unauthorized(&with_cert(&srv, &forged.pem(), &leaf_key.serialize_pem()).await, "another CA").await;

    // Ours, but expired.
    let ca_key = rcgen::KeyPair::from_pem(&srv.running.pki.ca.key_pem).unwrap();
    let ours = rcgen::Issuer::from_ca_cert_pem(&srv.running.pki.ca.cert_pem, &ca_key).unwrap();
    let mut old = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    old.distinguished_name.push(rcgen::DnType::CommonName, "system:admin");
    old.distinguished_name.push(rcgen::DnType::OrganizationName, "system:masters");
    old.not_before = rcgen::date_time_ymd(2001, 1, 1);
    old.not_after = rcgen::date_time_ymd(2002, 1, 1);
    let expired = old.signed_by(&leaf_key, &ours).unwrap();
    assert_unauthorized(&with_cert(&srv, &expired.pem(), &leaf_key.serialize_pem()).await, "expired").await;
}

#[tokio::test]
async fn static_tokens_from_the_token_file() {
    let srv = TestServer::start_with(|o| {
        let path = o.data_dir.join("tokens.csv");
        std::fs::write(&path, "s3cret-token,alice,1001,\"dev,qa\"\nbad-groups,bob,1002\n").unwrap();
        o.authn.token_auth_file = Some(path);
    })
    .await;
    let me = whoami(&with_token(&srv, "s3cret-token").await).await;
    assert_eq!(me["username"], "alice");
    assert_eq!(me["uid"], "1001");
    assert_eq!(me["groups"], json!(["dev", "qa", "system:authenticated"]));
    assert_eq!(outcome(&with_token(&srv, "s3cret-token").await, get("/api/v1/namespaces")).await.0, 403);
    assert_unauthorized(&with_token(&srv, "not-a-known-token").await, "unknown token").await;
    let metrics = srv.client().await.request_text(get("/metrics")).await.unwrap();
    for line in ["authentication_attempts{result=\"success\"}", "authentication_attempts{result=\"failure\"}"] {
        assert!(metrics.contains(line), "{line} missing");
    }
}

#[tokio::test]
async fn bootstrap_tokens_authenticate_until_expired_or_deleted() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    // The join token made at start, kept in DATA_DIR/token.
    let join = srv.running.join_token.clone().expect("a join token");
    let on_disk = std::fs::read_to_string(srv.dir.path().join("token")).unwrap();
    assert_eq!(on_disk.trim(), join);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(srv.dir.path().join("token")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let id = join.split('.').next().unwrap().to_string();
    let me = whoami(&with_token(&srv, &join).await).await;
    assert_eq!(me["username"], format!("system:bootstrap:{id}"));
    assert_eq!(
        me["groups"],
        json!(["system:bootstrappers", "system:bootstrappers:krate:default-node-token", "system:authenticated"])
    );

    // A wrong secret for a known id, an expired token.
    assert_unauthorized(&with_token(&srv, &format!("{id}.0000000000000000")).await, "wrong secret").await;
    let b64 = |s: &str| B64.encode(s);
    create(
        &admin,
        "/api/v1/namespaces/kube-system/secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-old123"},
            "data": {
                "token-id": b64("old123"), "token-secret": b64("0123456789abcdef"),
                "usage-bootstrap-authentication": b64("true"), "expiration": b64("2020-01-01T00:00:00Z"),
            },
        }),
    )
    .await;
    assert_unauthorized(&with_token(&srv, "old123.0123456789abcdef").await, "expired bootstrap token").await;

    // Deleting the Secret revokes the token.
    let del = http::Request::delete(format!("/api/v1/namespaces/kube-system/secrets/bootstrap-token-{id}"))
        .body(vec![])
        .unwrap();
    let _: Value = admin.request(del).await.unwrap();
    eventually_unauthorized(&with_token(&srv, &join).await, "deleted bootstrap token").await;
}

#[tokio::test]
async fn service_account_tokens_from_token_requests() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    let sa = create(
        &admin,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
    )
    .await;
    let answer = token_request(&admin, "default", "robot", json!({})).await.unwrap();
    assert_eq!(answer["kind"], "TokenRequest");
    assert_eq!(answer["spec"]["expirationSeconds"], 3600);
    assert_eq!(answer["spec"]["audiences"], json!(["https://kubernetes.default.svc.cluster.local"]));
    let exp: jiff::Timestamp = answer["status"]["expirationTimestamp"].as_str().unwrap().parse().unwrap();
    let left = exp.as_second() - jiff::Timestamp::now().as_second();
    assert!((3590..=3601).contains(&left), "{left}");
    let token = answer["status"]["token"].as_str().unwrap().to_string();

    let robot = with_token(&srv, &token).await;
    let me = whoami(&robot).await;
    assert_eq!(me["username"], "system:serviceaccount:default:robot");
    assert_eq!(me["uid"], sa["metadata"]["uid"]);
    assert_eq!(
        me["groups"],
        json!(["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"])
    );
    assert!(me["extra"]["authentication.kubernetes.io/credential-id"][0].as_str().unwrap().starts_with("JTI="));
    assert_eq!(outcome(&robot, get("/api/v1/namespaces/default/pods")).await.0, 403);

    // TokenReview: valid for the API server's audience, not for another one.
    let review = |token: &str, auds: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": auds}});
    let ok: Value =
        admin.request(post("/apis/authentication.k8s.io/v1/tokenreviews", review(&token, json!([])))).await.unwrap();
    assert_eq!(ok["status"]["authenticated"], true);
    assert_eq!(ok["status"]["user"]["username"], "system:serviceaccount:default:robot");
    let wrong: Value = admin
        .request(post("/apis/authentication.k8s.io/v1/tokenreviews", review(&token, json!(["vault"]))))
        .await
        .unwrap();
    assert_ne!(wrong["status"]["authenticated"], true);
    assert!(wrong["status"]["error"].as_str().unwrap().contains("audiences"), "{wrong}");
    let (code, reason) =
        outcome(&admin, post("/apis/authentication.k8s.io/v1/tokenreviews", review("", json!([])))).await;
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));

    // A token for another audience is refused by the API server.
    let vault = token_for(&admin, "default", "robot", json!({"audiences": ["vault"]})).await;
    assert_unauthorized(&with_token(&srv, &vault).await, "wrong audience").await;
    let vault_review: Value = admin
        .request(post("/apis/authentication.k8s.io/v1/tokenreviews", review(&vault, json!(["vault"]))))
        .await
        .unwrap();
    assert_eq!(vault_review["status"]["audiences"], json!(["vault"]));

    // Tampered, malformed, foreign-key and expired tokens.
    let mut parts: Vec<String> = token.split('.').map(String::from).collect();
    let mut claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&parts[1]).unwrap()).unwrap();
    claims["kubernetes.io"]["serviceaccount"]["name"] = json!("default");
    claims["sub"] = json!("system:serviceaccount:default:default");
    parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
    assert_unauthorized(&with_token(&srv, &parts.join(".")).await, "tampered").await;
    for bad in ["a.b.c", "eyJhbGciOiJFUzI1NiJ9..", "x", "..."] {
        assert_unauthorized(&with_token(&srv, bad).await, bad).await;
    }
    let foreign = SigningKey::generate().unwrap();
    let mut forged = claims.clone();
    forged["sub"] = json!("system:serviceaccount:default:robot");
    forged["kubernetes.io"]["serviceaccount"] = json!({"name": "robot", "uid": sa["metadata"]["uid"]});
    assert_unauthorized(&with_token(&srv, &foreign.sign(&forged)).await, "another key").await;
    let ours = SigningKey::load_or_create(&srv.running.pki.dir.join("sa.key")).unwrap();
    assert_eq!(
        whoami(&with_token(&srv, &ours.sign(&forged)).await).await["username"],
        "system:serviceaccount:default:robot"
    );
    let now = jiff::Timestamp::now().as_second();
    let mut old = forged.clone();
    old["iat"] = json!(now - 7200);
    old["nbf"] = json!(now - 7200);
    old["exp"] = json!(now - 3600);
    assert_unauthorized(&with_token(&srv, &ours.sign(&old)).await, "expired").await;

    // Bad requests: too short, unknown account, bound to an unsupported kind.
    match token_request(&admin, "default", "robot", json!({"expirationSeconds": 60})).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            assert!(e.message.contains("may not specify a duration less than 10 minutes"), "{}", e.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }
    match token_request(&admin, "default", "nobody", json!({})).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }
    let ref_cm = json!({"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}});
    match token_request(&admin, "default", "robot", ref_cm).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 400, "{}", e.message),
        other => panic!("expected 400, got {other:?}"),
    }

    // Deleting the ServiceAccount ends its tokens.
    let del = http::Request::delete("/api/v1/namespaces/default/serviceaccounts/robot").body(vec![]).unwrap();
    let _: Value = admin.request(del).await.unwrap();
    eventually_unauthorized(&robot, "deleted service account").await;
}

#[tokio::test]
async fn pod_bound_tokens_end_with_the_pod() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    create(
        &admin,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "worker"}}),
    )
    .await;
    let pod = create(
        &admin,
        "/api/v1/namespaces/default/pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
               "spec": {"serviceAccountName": "worker", "containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let bound = json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "w"}});
    let token = token_for(&admin, "default", "worker", bound).await;
    let client = with_token(&srv, &token).await;
    let me = whoami(&client).await;
    assert_eq!(me["extra"]["authentication.kubernetes.io/pod-name"], json!(["w"]));
    assert_eq!(me["extra"]["authentication.kubernetes.io/pod-uid"], json!([pod["metadata"]["uid"]]));

    // A pod of another account (the namespace's "default", which the server creates), a
    // stale uid.
    let wrong_sa = json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "w"}});
    match token_request(&admin, "default", "default", wrong_sa).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 400);
            assert_eq!(
                e.message,
                "cannot bind token for serviceaccount \"default\" to pod running with different serviceaccount name."
            );
        }
        other => panic!("expected 400, got {other:?}"),
    }
    let stale = json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "w", "uid": "0000"}});
    match token_request(&admin, "default", "worker", stale).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 409, "{}", e.message),
        other => panic!("expected 409, got {other:?}"),
    }

    let del = http::Request::delete("/api/v1/namespaces/default/pods/w?gracePeriodSeconds=0").body(vec![]).unwrap();
    let _: Value = admin.request(del).await.unwrap();
    eventually_unauthorized(&client, "deleted pod").await;
}

#[tokio::test]
async fn legacy_secret_tokens_are_filled_and_tracked() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    create(
        &admin,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "old-style"}}),
    )
    .await;
    create(
        &admin,
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": "old-style-token", "annotations": {"kubernetes.io/service-account.name": "old-style"}}}),
    )
    .await;
    let path = "/api/v1/namespaces/default/secrets/old-style-token";
    let deadline = Instant::now() + Duration::from_secs(10);
    let secret = loop {
        let s: Value = admin.request(get(path)).await.unwrap();
        if s["data"]["token"].is_string() {
            break s;
        }
        assert!(Instant::now() < deadline, "the token secret was not filled: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let decode = |k: &str| String::from_utf8(B64.decode(secret["data"][k].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(decode("namespace"), "default");
    assert_eq!(decode("ca.crt"), srv.running.pki.ca.cert_pem);
    let token = decode("token");
    let client = with_token(&srv, &token).await;
    assert_eq!(whoami(&client).await["username"], "system:serviceaccount:default:old-style");

    // Its use is recorded, once a day.
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s: Value = admin.request(get(path)).await.unwrap();
        if s["metadata"]["labels"]["kubernetes.io/legacy-token-last-used"] == json!(today) {
            break;
        }
        assert!(Instant::now() < deadline, "last-used label not set: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let del = http::Request::delete(path).body(vec![]).unwrap();
    let _: Value = admin.request(del).await.unwrap();
    eventually_unauthorized(&client, "deleted token secret").await;
}

/// Polls `path` until `done` holds of the answer (None: 404).
async fn wait_for(admin: &kube::Client, path: &str, what: &str, done: impl Fn(Option<&Value>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = match admin.request::<Value>(get(path)).await {
            Ok(v) => Some(v),
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => panic!("GET {path}: {e}"),
        };
        if done(got.as_ref()) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn token_secrets_follow_their_service_accounts() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    let secret = |name: &str, sa: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": sa}}})
    };
    let secrets = "/api/v1/namespaces/default/secrets";
    // A token for an account that does not exist is deleted, as upstream's tokens controller does.
    create(&admin, secrets, secret("orphan-token", "nobody")).await;
    wait_for(&admin, &format!("{secrets}/orphan-token"), "orphan token deleted", |s| s.is_none()).await;

    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "doomed"},
                    "secrets": [{"name": "doomed-a"}, {"name": "doomed-b"}]});
    create(&admin, "/api/v1/namespaces/default/serviceaccounts", sa).await;
    create(&admin, secrets, secret("doomed-a", "doomed")).await;
    create(&admin, secrets, secret("doomed-b", "doomed")).await;
    create(&admin, secrets, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated"}})).await;
    for name in ["doomed-a", "doomed-b"] {
        wait_for(&admin, &format!("{secrets}/{name}"), "token filled", |s| {
            s.is_some_and(|s| s["data"]["token"].is_string())
        })
        .await;
    }
    // A deleted token leaves its account's secrets list.
    let del = http::Request::delete(format!("{secrets}/doomed-a")).body(vec![]).unwrap();
    let _: Value = admin.request(del).await.unwrap();
    wait_for(&admin, "/api/v1/namespaces/default/serviceaccounts/doomed", "reference removed", |sa| {
        sa.is_some_and(|sa| sa["secrets"] == json!([{"name": "doomed-b"}]))
    })
    .await;
    // A deleted account takes its tokens with it, and nothing else.
    let del = http::Request::delete("/api/v1/namespaces/default/serviceaccounts/doomed").body(vec![]).unwrap();
    let _: Value = admin.request(del).await.unwrap();
    wait_for(&admin, &format!("{secrets}/doomed-b"), "token of a deleted account deleted", |s| s.is_none()).await;
    let kept: Value = admin.request(get(&format!("{secrets}/unrelated"))).await.unwrap();
    assert_eq!(kept["metadata"]["name"], "unrelated");
}

#[tokio::test]
async fn oidc_discovery_is_public_and_names_the_signing_key() {
    let srv = TestServer::start().await;
    // Upstream's default RBAC opens discovery to service accounts, not to anonymous users.
    let refused = srv.anonymous().await.request::<Value>(get("/.well-known/openid-configuration")).await;
    assert!(matches!(refused, Err(kube::Error::Api(ref e)) if e.code == 403), "{refused:?}");
    let anon = srv.client().await;
    let conf: Value = anon.request(get("/.well-known/openid-configuration")).await.unwrap();
    assert_eq!(conf["issuer"], "https://kubernetes.default.svc.cluster.local");
    assert_eq!(conf["jwks_uri"], format!("{}/openid/v1/jwks", srv.running.url));
    assert_eq!(conf["response_types_supported"], json!(["id_token"]));
    assert_eq!(conf["subject_types_supported"], json!(["public"]));
    let jwks: Value = anon.request(get("/openid/v1/jwks")).await.unwrap();
    let key = SigningKey::load_or_create(&srv.running.pki.dir.join("sa.key")).unwrap();
    assert_eq!(jwks["keys"][0]["kid"], key.kid());
    assert_eq!(jwks["keys"][0]["alg"], "ES256");
}

#[tokio::test]
async fn without_anonymous_auth_requests_without_credentials_get_401() {
    let srv = TestServer::start_with(|o| o.anonymous_auth = false).await;
    let anon = srv.anonymous().await;
    for path in ["/version", "/healthz", "/api/v1/namespaces"] {
        match anon.request_text(get(path)).await {
            Err(kube::Error::Api(e)) => assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"), "{path}"),
            other => panic!("{path}: expected 401, got {other:?}"),
        }
    }
    let me = whoami(&srv.client().await).await;
    assert_eq!(me["username"], "system:admin");

    let srv = TestServer::start().await;
    let anon = srv.anonymous().await;
    assert_eq!(anon.request_text(get("/version")).await.map(|_| ()).ok(), Some(()));
    // Anonymous, not refused: forbidden as system:anonymous (upstream binds
    // system:basic-user to authenticated users only).
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    match anon.request::<Value>(post("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403);
            assert!(e.message.contains("User \"system:anonymous\""), "{}", e.message);
        }
        other => panic!("expected 403, got {other:?}"),
    }
}

#[tokio::test]
async fn impersonation_is_authorized_part_by_part() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let as_jane = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .header("Impersonate-User", "jane")
        .header("Impersonate-Group", "dev")
        .header("Impersonate-Group", "qa")
        .header("Impersonate-Uid", "u-1")
        .header("Impersonate-Extra-Scopes", "view")
        .body(review.to_string().into_bytes())
        .unwrap();
    let answer: Value = admin.request(as_jane).await.unwrap();
    let me = &answer["status"]["userInfo"];
    assert_eq!(me["username"], "jane");
    assert_eq!(me["uid"], "u-1");
    assert_eq!(me["groups"], json!(["dev", "qa", "system:authenticated"]));
    assert_eq!(me["extra"]["scopes"], json!(["view"]));

    // Impersonated users get their own rights, not the impersonator's.
    let list = http::Request::get("/api/v1/namespaces").header("Impersonate-User", "jane").body(vec![]).unwrap();
    match admin.request::<Value>(list).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("expected 403, got {other:?}"),
    }

    // A user who may not impersonate.
    let jane = srv.running.pki.issue_client("jane", &[]).unwrap();
    let client = with_cert(&srv, &jane.cert_pem, &jane.key_pem).await;
    let attempt =
        http::Request::get("/api/v1/namespaces").header("Impersonate-User", "system:admin").body(vec![]).unwrap();
    match client.request::<Value>(attempt).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                e.message,
                "users \"system:admin\" is forbidden: User \"jane\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let groups_only =
        http::Request::get("/version").header("Impersonate-Group", "system:masters").body(vec![]).unwrap();
    match admin.request_text(groups_only).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 400, "{}", e.message),
        other => panic!("expected 400, got {other:?}"),
    }
}

#[tokio::test]
async fn mutated_tokens_over_https_always_get_401() {
    let srv = TestServer::start().await;
    let admin = srv.client().await;
    create(
        &admin,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "fuzz"}}),
    )
    .await;
    let good = token_for(&admin, "default", "fuzz", json!({})).await;
    // One client per token is slow; the header is set per request instead.
    let anon = srv.anonymous().await;
    let alphabet = b"abcXYZ0189-_.";
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..200 {
        let mut bytes = good.clone().into_bytes();
        match round % 3 {
            0 => {
                for _ in 0..(1 + next() % 3) {
                    let i = (next() as usize) % bytes.len();
                    bytes[i] = alphabet[(next() as usize) % alphabet.len()];
                }
            }
            1 => bytes.truncate(1 + (next() as usize) % (bytes.len() - 1)),
            _ => bytes = (0..(1 + next() % 200)).map(|_| alphabet[(next() as usize) % alphabet.len()]).collect(),
        }
        let token = String::from_utf8(bytes).unwrap();
        if token == good {
            continue;
        }
        let req = http::Request::get("/api/v1/namespaces/default/configmaps")
            .header("authorization", format!("Bearer {token}"))
            .body(vec![])
            .unwrap();
        match anon.request::<Value>(req).await {
            Err(kube::Error::Api(e)) => assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"), "{token}"),
            other => panic!("token {token}: expected 401, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn token_lifetimes_are_capped_by_the_max_token_expiration() {
    let srv = TestServer::start_with(|o| {
        o.authn.service_account_max_token_expiration = Some(std::time::Duration::from_secs(7200));
    })
    .await;
    let admin = srv.client().await;
    create(
        &admin,
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
    )
    .await;
    let long = token_request(&admin, "default", "robot", json!({"expirationSeconds": 86400})).await.unwrap();
    assert_eq!(long["spec"]["expirationSeconds"], 7200, "granted the maximum, not refused");
    let exp: jiff::Timestamp = long["status"]["expirationTimestamp"].as_str().unwrap().parse().unwrap();
    let left = exp.as_second() - jiff::Timestamp::now().as_second();
    assert!((7190..=7201).contains(&left), "{left}");
    let short = token_request(&admin, "default", "robot", json!({"expirationSeconds": 1200})).await.unwrap();
    assert_eq!(short["spec"]["expirationSeconds"], 1200, "shorter requests are untouched");
}
