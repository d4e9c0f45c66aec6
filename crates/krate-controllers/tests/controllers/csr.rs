//! CertificateSigningRequests end to end: validation, approval and denial through the
//! approval subresource, the csrsigning controller issuing certificates from the cluster
//! CA, and the issued certificate authenticating against the server.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Namespace;
use krate_testkit::TestCluster;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use x509_parser::prelude::FromDer;

/// A private key and a PEM CSR for `cn` in `orgs`.
fn csr_pem(cn: &str, orgs: &[&str], sans: Vec<rcgen::SanType>) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::default();
    for o in orgs {
        p.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
    }
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.subject_alt_names = sans;
    (key.serialize_pem(), p.serialize_request(&key).unwrap().pem().unwrap())
}

fn csr(name: &str, pem: &str, signer: &str, usages: &[&str], expiration: Option<i64>) -> CertificateSigningRequest {
    let mut spec = json!({
        "request": base64::engine::general_purpose::STANDARD.encode(pem),
        "signerName": signer,
        "usages": usages,
    });
    if let Some(e) = expiration {
        spec["expirationSeconds"] = json!(e);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn api_err<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Adds a condition through the approval subresource, as `kubectl certificate approve|deny`.
async fn decide(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    kind: &str,
) -> Result<CertificateSigningRequest, kube::Error> {
    let mut current = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
    let condition =
        json!({"type": kind, "status": "True", "reason": "TestDecision", "message": format!("{kind} by the test")});
    match current["status"]["conditions"].as_array_mut() {
        Some(cs) => cs.push(condition),
        None => current["status"] = json!({"conditions": [condition]}),
    }
    api.replace_subresource("approval", name, &PostParams::default(), &current).await
}

/// The CSR once `done` holds (the signer works asynchronously), within 10 s.
async fn wait_for(api: &Api<CertificateSigningRequest>, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let v = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        if done(&v) {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting on CSR {name}: {v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn has_condition(v: &Value, t: &str) -> bool {
    v["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == t))
}

async fn client_with(srv: &TestCluster, cert_pem: &str, key_pem: &str, user: &str) -> kube::Client {
    let ck = krate_apiserver::pki::CertKey { cert_pem: cert_pem.into(), key_pem: key_pem.into() };
    let path = srv.dir.path().join(format!("{user}.kubeconfig"));
    std::fs::write(&path, srv.running.pki.kubeconfig(&srv.running.url, &ck, user)).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap()
}

#[tokio::test]
async fn an_approved_client_csr_is_signed_by_the_cluster_ca_and_authenticates() {
    let mut srv = TestCluster::start().await;
    srv.controllers(&["csrsigning"]);
    let api: Api<CertificateSigningRequest> = Api::all(srv.admin().await);

    // Nobody may ask this signer for system:masters (CertificateSubjectRestriction).
    let (_, masters) = csr_pem("mallory", &["system:masters"], vec![]);
    let usages = ["digital signature", "client auth"];
    let refused = api
        .create(&PostParams::default(), &csr("mallory", &masters, "kubernetes.io/kube-apiserver-client", &usages, None))
        .await;
    assert!(matches!(refused, Err(kube::Error::Api(ref e)) if e.code == 403), "{refused:?}");

    let (key, pem) = csr_pem("alice", &["admins"], vec![]);
    let created = api
        .create(&PostParams::default(), &csr("alice", &pem, "kubernetes.io/kube-apiserver-client", &usages, Some(3600)))
        .await
        .unwrap();
    // The requester is whoever created it.
    assert_eq!(created.spec.username.as_deref(), Some("system:admin"));
    assert!(created.spec.groups.as_ref().unwrap().contains(&"system:masters".to_string()));
    assert!(created.status.is_none_or(|s| s.certificate.is_none()), "not signed before approval");

    // Not approved: never signed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(api.get("alice").await.unwrap().status.and_then(|s| s.certificate).is_none());

    let approved = decide(&api, "alice", "Approved").await.unwrap();
    let conds = approved.status.unwrap().conditions.unwrap();
    assert_eq!((conds[0].type_.as_str(), conds[0].reason.as_deref()), ("Approved", Some("TestDecision")));
    assert!(
        conds[0].last_update_time.is_some() && conds[0].last_transition_time.is_some(),
        "the server stamps conditions"
    );
    let signed = wait_for(&api, "alice", |v| v["status"]["certificate"].is_string()).await;
    let cert_pem = String::from_utf8(
        base64::engine::general_purpose::STANDARD.decode(signed["status"]["certificate"].as_str().unwrap()).unwrap(),
    )
    .unwrap();

    // It chains to the cluster CA, names the requested subject, and lives the asked time.
    let ca_block =
        x509_parser::pem::Pem::iter_from_buffer(srv.running.pki.ca.cert_pem.as_bytes()).next().unwrap().unwrap();
    let ca = ca_block.parse_x509().unwrap();
    let block = x509_parser::pem::Pem::iter_from_buffer(cert_pem.as_bytes()).next().unwrap().unwrap();
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&block.contents).unwrap();
    assert_eq!(cert.issuer(), ca.subject());
    cert.verify_signature(Some(ca.public_key())).expect("signed by the cluster CA");
    assert_eq!(cert.subject().iter_common_name().next().unwrap().as_str().unwrap(), "alice");
    let now = jiff::Timestamp::now().as_second();
    let lifetime = cert.validity().not_after.timestamp() - now;
    assert!((3600 - 60..=3600).contains(&lifetime), "expirationSeconds honoured: {lifetime}");
    assert!(cert.validity().not_before.timestamp() <= now);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    assert!(!cert.is_ca());

    // The certificate authenticates as alice in group admins, which a binding makes
    // cluster admins.
    let binding = serde_json::json!({"metadata": {"name": "admins"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "admins"}]});
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(srv.admin().await)
        .create(&PostParams::default(), &serde_json::from_value(binding).unwrap())
        .await
        .unwrap();
    let alice = Api::<Namespace>::all(client_with(&srv, &cert_pem, &key, "alice").await);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Err(e) = alice.list(&ListParams::default()).await {
        assert!(std::time::Instant::now() < deadline, "group admins may list: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A certificate for carol in group dev authenticates as carol (and is refused).
    let (carol_key, carol_pem) = csr_pem("carol", &["dev"], vec![]);
    api.create(
        &PostParams::default(),
        &csr("carol", &carol_pem, "kubernetes.io/kube-apiserver-client", &["client auth"], None),
    )
    .await
    .unwrap();
    decide(&api, "carol", "Approved").await.unwrap();
    let signed = wait_for(&api, "carol", |v| v["status"]["certificate"].is_string()).await;
    let carol_cert = String::from_utf8(
        base64::engine::general_purpose::STANDARD.decode(signed["status"]["certificate"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    let carol = client_with(&srv, &carol_cert, &carol_key, "carol").await;
    let e = api_err(Api::<Namespace>::all(carol).list(&ListParams::default()).await);
    assert_eq!(e.code, 403);
    assert!(e.message.contains("User \"carol\""), "{}", e.message);
    // Without expirationSeconds: the signer's longest (a year).
    let block = x509_parser::pem::Pem::iter_from_buffer(carol_cert.as_bytes()).next().unwrap().unwrap();
    let life = block.parse_x509().unwrap().validity().not_after.timestamp() - now;
    assert!(life > 364 * 86400 && life <= 365 * 86400 + 60, "{life}");

    // The certificate is set once, by the signer: a client may not replace it.
    let mut tampered = api.get("carol").await.unwrap();
    tampered.status.as_mut().unwrap().certificate =
        Some(k8s_openapi::ByteString(srv.running.pki.ca.cert_pem.as_bytes().to_vec()));
    let e = api_err(api.replace_status("carol", &PostParams::default(), &tampered).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.contains("updates may not modify existing certificate content"), "{}", e.message);
}

#[tokio::test]
async fn denied_failed_and_invalid_csrs() {
    let mut srv = TestCluster::start().await;
    srv.controllers(&["csrsigning"]);
    let api: Api<CertificateSigningRequest> = Api::all(srv.admin().await);
    let client = "kubernetes.io/kube-apiserver-client";

    // Denied: never signed; Approved may not join it; Denied may not be removed.
    let (_, pem) = csr_pem("dave", &[], vec![]);
    api.create(&PostParams::default(), &csr("dave", &pem, client, &["client auth"], None)).await.unwrap();
    decide(&api, "dave", "Denied").await.unwrap();
    let e = api_err(decide(&api, "dave", "Approved").await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.contains("Approved and Denied conditions are mutually exclusive"), "{}", e.message);
    let mut cleared = api.get("dave").await.unwrap();
    cleared.status.as_mut().unwrap().conditions = Some(vec![]);
    let e = api_err(api.replace_subresource("approval", "dave", &PostParams::default(), &cleared).await);
    assert!(e.message.contains("updates may not remove a condition of type \"Denied\""), "{}", e.message);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let v = serde_json::to_value(api.get("dave").await.unwrap()).unwrap();
    assert!(v["status"].get("certificate").is_none(), "a denied CSR is not signed: {v:#}");

    // Approval goes through /approval only: /status may not add it.
    let (_, pem) = csr_pem("erin", &[], vec![]);
    let mut erin =
        api.create(&PostParams::default(), &csr("erin", &pem, client, &["client auth"], None)).await.unwrap();
    erin.status =
        Some(serde_json::from_value(json!({"conditions": [{"type": "Approved", "status": "True"}]})).unwrap());
    let e = api_err(api.replace_status("erin", &PostParams::default(), &erin).await);
    assert!(e.message.contains("updates may not add a condition of type \"Approved\""), "{}", e.message);

    // The kubelet client signer's checks: a CN outside system:node: fails the CSR.
    let (_, pem) = csr_pem("not-a-node", &["system:nodes"], vec![]);
    let usages = ["digital signature", "client auth"];
    api.create(
        &PostParams::default(),
        &csr("fake-node", &pem, "kubernetes.io/kube-apiserver-client-kubelet", &usages, None),
    )
    .await
    .unwrap();
    decide(&api, "fake-node", "Approved").await.unwrap();
    let v = wait_for(&api, "fake-node", |v| has_condition(v, "Failed")).await;
    let failed = v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Failed").unwrap().clone();
    assert_eq!(failed["reason"], "SignerValidationFailure");
    assert!(failed["message"].as_str().unwrap().contains("system:node:"), "{failed}");
    assert!(v["status"].get("certificate").is_none());

    // A proper node CSR for the serving signer is signed, with its IP SAN.
    let (_, pem) =
        csr_pem("system:node:n1", &["system:nodes"], vec![rcgen::SanType::IpAddress("10.0.0.7".parse().unwrap())]);
    let usages = ["digital signature", "key encipherment", "server auth"];
    api.create(&PostParams::default(), &csr("n1-serving", &pem, "kubernetes.io/kubelet-serving", &usages, Some(600)))
        .await
        .unwrap();
    decide(&api, "n1-serving", "Approved").await.unwrap();
    let v = wait_for(&api, "n1-serving", |v| v["status"]["certificate"].is_string()).await;
    let pem = base64::engine::general_purpose::STANDARD.decode(v["status"]["certificate"].as_str().unwrap()).unwrap();
    let block = x509_parser::pem::Pem::iter_from_buffer(&pem).next().unwrap().unwrap();
    let cert = block.parse_x509().unwrap();
    assert!(cert.extended_key_usage().unwrap().unwrap().value.server_auth);
    let life = cert.validity().not_after.timestamp() - jiff::Timestamp::now().as_second();
    assert!((540..=600).contains(&life), "{life}");

    // Invalid requests: 422 with upstream's fields.
    let mut bad = csr("bad", "not a csr", "", &[], Some(60));
    bad.spec.usages = None;
    let e = api_err(api.create(&PostParams::default(), &bad).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    for want in [
        "spec.request",
        "PEM block type must be CERTIFICATE REQUEST",
        "spec.usages: Required value",
        "spec.signerName: Required value",
        "spec.expirationSeconds",
    ] {
        assert!(e.message.contains(want), "{want} in {}", e.message);
    }
    let (_, pem) = csr_pem("x", &[], vec![]);
    let e = api_err(
        api.create(
            &PostParams::default(),
            &csr("legacy", &pem, "kubernetes.io/legacy-unknown", &["client auth"], None),
        )
        .await,
    );
    assert!(e.message.contains("the legacy signerName is not allowed via this API version"), "{}", e.message);
    let e = api_err(
        api.create(&PostParams::default(), &csr("usage", &pem, client, &["client auth", "flying"], None)).await,
    );
    assert!(e.message.contains("spec.usages[1]: Unsupported value: \"flying\""), "{}", e.message);
}

fn user(name: &str, groups: &[&str]) -> krate_api::user::UserInfo {
    let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    groups.push("system:authenticated".into());
    krate_api::user::UserInfo { name: name.into(), groups, ..Default::default() }
}

/// A ClusterRoleBinding of `role` to `subjects` (kind, name), as kubeadm makes for
/// bootstrap and rotation.
async fn bind(client: &kube::Client, name: &str, role: &str, subjects: &[(&str, &str)]) {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, name)| json!({"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}))
        .collect();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone()).create(&PostParams::default(), &binding).await.unwrap();
}

fn condition(v: &Value, t: &str) -> Option<Value> {
    v["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == t).cloned()
}

#[tokio::test]
async fn node_client_csrs_are_auto_approved_after_subject_access_reviews_and_then_signed() {
    let mut srv = TestCluster::start().await;
    srv.controllers(&["csrapproving", "csrsigning"]);
    let admin = srv.admin().await;
    let g = "Group";
    bind(&admin, "bootstrap", "system:node-bootstrapper", &[(g, "system:bootstrappers"), ("User", "jane")]).await;
    bind(
        &admin,
        "autoapprove-bootstrap",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        &[(g, "system:bootstrappers")],
    )
    .await;
    bind(
        &admin,
        "autoapprove-rotation",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        &[(g, "system:nodes")],
    )
    .await;
    let kubelet = "kubernetes.io/kube-apiserver-client-kubelet";
    let usages = ["digital signature", "key encipherment", "client auth"];

    // A bootstrap token asks for node n1's first certificate: nodeclient allows it.
    let bootstrap = srv.client_as(user("system:bootstrap:abcdef", &["system:bootstrappers"]));
    let (_, pem) = csr_pem("system:node:n1", &["system:nodes"], vec![]);
    Api::<CertificateSigningRequest>::all(bootstrap)
        .create(&PostParams::default(), &csr("node-csr-n1", &pem, kubelet, &usages, None))
        .await
        .unwrap();
    // Node n2 renews its own certificate: selfnodeclient allows it.
    let node = srv.client_as(user("system:node:n2", &["system:nodes"]));
    let (_, pem) = csr_pem("system:node:n2", &["system:nodes"], vec![]);
    Api::<CertificateSigningRequest>::all(node)
        .create(&PostParams::default(), &csr("node-csr-n2", &pem, kubelet, &usages, None))
        .await
        .unwrap();
    // Jane may create CSRs but not have node certificates approved.
    let jane = srv.client_as(user("jane", &[]));
    let (_, pem) = csr_pem("system:node:n3", &["system:nodes"], vec![]);
    Api::<CertificateSigningRequest>::all(jane)
        .create(&PostParams::default(), &csr("node-csr-n3", &pem, kubelet, &usages, None))
        .await
        .unwrap();

    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let n1 = wait_for(&api, "node-csr-n1", |v| v["status"]["certificate"].is_string()).await;
    let approved = condition(&n1, "Approved").unwrap();
    assert_eq!(approved["reason"], "AutoApproved");
    assert_eq!(approved["message"], "Auto approving kubelet client certificate after SubjectAccessReview.");
    let n2 = wait_for(&api, "node-csr-n2", |v| v["status"]["certificate"].is_string()).await;
    assert_eq!(
        condition(&n2, "Approved").unwrap()["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    let n3 = serde_json::to_value(api.get("node-csr-n3").await.unwrap()).unwrap();
    assert!(v_pending(&n3), "jane's request is left for a person to decide: {n3:#}");
}

fn v_pending(v: &Value) -> bool {
    v["status"]["conditions"].as_array().is_none_or(|c| c.is_empty()) && v["status"].get("certificate").is_none()
}

#[tokio::test]
async fn the_cleaner_removes_csrs_decided_more_than_an_hour_ago() {
    let mut srv = TestCluster::start().await;
    let api: Api<CertificateSigningRequest> = Api::all(srv.admin().await);
    let client = "kubernetes.io/kube-apiserver-client";
    let two_hours_ago = jiff::Timestamp::now().checked_sub(jiff::SignedDuration::from_hours(2)).unwrap().to_string();
    for (name, when) in [("old-denial", Some(two_hours_ago.as_str())), ("new-denial", None), ("pending", None)] {
        let (_, pem) = csr_pem(name, &[], vec![]);
        api.create(&PostParams::default(), &csr(name, &pem, client, &["client auth"], None)).await.unwrap();
        if name == "pending" {
            continue;
        }
        let mut current = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        let mut denied = json!({"type": "Denied", "status": "True", "reason": "TestDecision", "message": "no"});
        if let Some(when) = when {
            denied["lastUpdateTime"] = json!(when);
        }
        current["status"] = json!({"conditions": [denied]});
        api.replace_subresource("approval", name, &PostParams::default(), &current).await.unwrap();
    }
    // The cleaner looks at start, then hourly.
    srv.controllers(&["csrcleaner"]);
    krate_testkit::eventually("the old denial to be removed", Duration::from_secs(10), || async {
        api.get_opt("old-denial").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(api.get_opt("new-denial").await.unwrap().is_some(), "denied less than an hour ago: kept");
    assert!(api.get_opt("pending").await.unwrap().is_some(), "pending less than a day: kept");
}
