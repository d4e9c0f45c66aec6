//! The admission plugins on a real registry (SQLite): NodeRestriction, ServiceAccount
//! and PodSecurity decide on the objects the registry holds. NodeRestriction is tested
//! here rather than over HTTPS because node identities are refused by authorization
//! until the Node authorizer lands.

use std::sync::Arc;

use serde_json::{Value, json};

use krate_admission::{AdmissionConfig, Chain};
use krate_api::admission::{AuditAnnotations, NoAdmission};
use krate_api::fieldvalidation::Warnings;
use krate_api::registry::{Context, DeleteOptions, Scope};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry, ResourceTable};
use krate_store::sqlite::{SqliteConfig, SqliteStore};

struct Fixture {
    registry: Arc<Registry>,
    chain: Chain,
    _dir: tempfile::TempDir,
}

fn admin() -> UserInfo {
    UserInfo { name: "admin".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

fn node(name: &str) -> UserInfo {
    UserInfo { name: format!("system:node:{name}"), groups: vec!["system:nodes".into()], ..Default::default() }
}

impl Fixture {
    async fn new(config: AdmissionConfig) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteConfig::new(dir.path().join("state.db"))).await.unwrap();
        let registry = Arc::new(Registry::new(Arc::new(store), Arc::new(ResourceTable::builtin())));
        let chain = Chain::standard(&registry, &config, vec![]).unwrap();
        let f = Fixture { registry, chain, _dir: dir };
        for ns in ["default", "kube-node-lease"] {
            f.seed("", "namespaces", None, json!({"metadata": {"name": ns}})).await;
            f.seed("", "serviceaccounts", Some(ns), json!({"metadata": {"name": "default"}})).await;
        }
        f
    }

    fn scope(&self, group: &str, plural: &str, ns: Option<&str>) -> Scope {
        // Every resource used here is served at v1 of its group.
        let resource = self.registry.table.lookup(group, "v1", plural).expect("resource");
        Scope { resource, namespace: ns.map(String::from) }
    }

    /// Writes as the administrator, past admission.
    async fn seed(&self, group: &str, plural: &str, ns: Option<&str>, obj: Value) -> Value {
        let user = admin();
        let mut obj = obj;
        if let Some(ns) = ns {
            obj["metadata"]["namespace"] = json!(ns);
        }
        self.registry
            .create(&self.scope(group, plural, ns), obj, &Context::internal(&user, &NoAdmission))
            .await
            .unwrap()
    }

    async fn create(
        &self,
        user: &UserInfo,
        group: &str,
        plural: &str,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let ctx = Context::internal(user, &self.chain);
        self.registry.create(&self.scope(group, plural, ns), obj, &ctx).await
    }

    async fn update(
        &self,
        user: &UserInfo,
        group: &str,
        plural: &str,
        ns: Option<&str>,
        obj: Value,
        sub: Option<&str>,
    ) -> Result<Value, ApiError> {
        let ctx = Context::internal(user, &self.chain);
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        self.registry.update(&self.scope(group, plural, ns), &name, obj, sub, &ctx).await.map(|(o, _)| o)
    }
}

fn pod_on(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}})
}

#[tokio::test]
async fn node_restriction_limits_a_node_to_its_own_node_object() {
    let f = Fixture::new(AdmissionConfig::default()).await;
    let n1 = node("n1");
    // A node registers itself with kubelet labels, but not with steering labels.
    let refused = f
        .create(
            &n1,
            "",
            "nodes",
            None,
            json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/master": ""}}}),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code, 403);
    assert_eq!(
        refused.message,
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: node-role.kubernetes.io/master"
    );
    let created = f
        .create(&n1, "", "nodes", None, json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}))
        .await
        .unwrap();
    let other = f.create(&n1, "", "nodes", None, json!({"metadata": {"name": "n2"}})).await.unwrap_err();
    assert_eq!(other.message, "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"");

    let mut relabel = created.clone();
    relabel["metadata"]["labels"]["node-restriction.kubernetes.io/pool"] = json!("gold");
    let e = f.update(&n1, "", "nodes", None, relabel, None).await.unwrap_err();
    assert_eq!(
        e.message,
        "nodes \"n1\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool"
    );

    let mut untaint = created.clone();
    untaint["spec"]["taints"] = json!([]);
    let e = f.update(&n1, "", "nodes", None, untaint, None).await.unwrap_err();
    assert_eq!(e.message, "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints");

    let mut fine = created.clone();
    fine["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!("z1");
    fine["metadata"]["labels"]["example.com/team"] = json!("a");
    f.update(&n1, "", "nodes", None, fine, None).await.unwrap();
    // An administrator is not restricted.
    let mut taint = f.registry.get(&f.scope("", "nodes", None), "n1").await.unwrap();
    taint["spec"]["taints"] = json!([]);
    f.update(&admin(), "", "nodes", None, taint, None).await.unwrap();
}

#[tokio::test]
async fn node_restriction_limits_leases_pods_and_status() {
    let f = Fixture::new(AdmissionConfig::default()).await;
    let n1 = node("n1");
    let e = f
        .create(&n1, "coordination.k8s.io", "leases", Some("default"), json!({"metadata": {"name": "n1"}}))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "leases.coordination.k8s.io \"n1\" is forbidden: can only access leases in the \"kube-node-lease\" system namespace"
    );
    let e = f
        .create(&n1, "coordination.k8s.io", "leases", Some("kube-node-lease"), json!({"metadata": {"name": "n2"}}))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same name as the requesting node"
    );
    f.create(&n1, "coordination.k8s.io", "leases", Some("kube-node-lease"), json!({"metadata": {"name": "n1"}}))
        .await
        .unwrap();

    // Only mirror pods, bound to the node and owned by it.
    let e = f.create(&n1, "", "pods", Some("default"), pod_on("plain", "n1")).await.unwrap_err();
    assert_eq!(
        e.message,
        "pods \"plain\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
    );
    let node_obj = f.seed("", "nodes", None, json!({"metadata": {"name": "n1"}})).await;
    let uid = node_obj["metadata"]["uid"].clone();
    let mirror = |name: &str, bound: &str| {
        let mut p = pod_on(name, bound);
        p["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
        p["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid, "controller": true}]);
        p
    };
    let e = f.create(&n1, "", "pods", Some("default"), mirror("elsewhere", "n2")).await.unwrap_err();
    assert_eq!(
        e.message,
        "pods \"elsewhere\" is forbidden: node \"n1\" can only create pods with spec.nodeName set to itself"
    );
    f.create(&n1, "", "pods", Some("default"), mirror("static", "n1")).await.unwrap();

    // Status only of pods bound to the node.
    let mine = f.seed("", "pods", Some("default"), pod_on("mine", "n1")).await;
    let theirs = f.seed("", "pods", Some("default"), pod_on("theirs", "n2")).await;
    let mut status = mine.clone();
    status["status"] = json!({"phase": "Running"});
    f.update(&n1, "", "pods", Some("default"), status, Some("status")).await.unwrap();
    let mut status = theirs.clone();
    status["status"] = json!({"phase": "Running"});
    let e = f.update(&n1, "", "pods", Some("default"), status, Some("status")).await.unwrap_err();
    assert_eq!(
        e.message,
        "pods \"theirs\" is forbidden: node \"n1\" can only update pod status for pods with spec.nodeName set to itself"
    );

    // Deleting: only pods bound to the node.
    let ctx = Context::internal(&n1, &f.chain);
    let e = f
        .registry
        .delete(&f.scope("", "pods", Some("default")), "theirs", &DeleteOptions::default(), &ctx)
        .await
        .err()
        .unwrap();
    assert_eq!(
        e.message,
        "pods \"theirs\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
    );
    assert!(
        f.registry.delete(&f.scope("", "pods", Some("default")), "mine", &DeleteOptions::default(), &ctx).await.is_ok()
    );
}

#[tokio::test]
async fn service_account_defaults_refuses_missing_accounts_and_mounts_the_token() {
    let f = Fixture::new(AdmissionConfig::default()).await;
    let pod = f.create(&admin(), "", "pods", Some("default"), json!({"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": "i", "image": "busybox"}],
        "containers": [{"name": "c", "image": "nginx"}, {"name": "own", "image": "nginx", "volumeMounts": [{"name": "x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
        "volumes": [{"name": "x", "emptyDir": {}}]
    }})).await.unwrap();
    assert_eq!(pod["spec"]["serviceAccountName"], "default");
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str().unwrap().starts_with("kube-api-access-"))
        .unwrap();
    let name = volume["name"].as_str().unwrap();
    assert_eq!(name.len(), "kube-api-access-".len() + 5);
    assert_eq!(volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
    assert_eq!(volume["projected"]["sources"][1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(
        volume["projected"]["sources"][2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    let mount = json!({"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"});
    assert_eq!(pod["spec"]["initContainers"][0]["volumeMounts"], json!([mount]));
    assert_eq!(pod["spec"]["containers"][0]["volumeMounts"], json!([mount]));
    // A container with its own mount at the path keeps it.
    assert_eq!(pod["spec"]["containers"][1]["volumeMounts"].as_array().unwrap().len(), 1);

    let e = f
        .create(&admin(), "", "pods", Some("default"), json!({"metadata": {"name": "q"}, "spec": {"serviceAccountName": "ghost", "containers": [{"name": "c", "image": "nginx"}]}}))
        .await
        .unwrap_err();
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "pods \"q\" is forbidden: error looking up service account default/ghost: serviceaccount \"ghost\" not found"
    );

    // No token when the pod or its account opts out.
    f.seed(
        "",
        "serviceaccounts",
        Some("default"),
        json!({"metadata": {"name": "quiet"}, "automountServiceAccountToken": false}),
    )
    .await;
    let quiet = f
        .create(&admin(), "", "pods", Some("default"), json!({"metadata": {"name": "r"}, "spec": {"serviceAccountName": "quiet", "containers": [{"name": "c", "image": "nginx"}]}}))
        .await
        .unwrap();
    assert!(quiet["spec"].get("volumes").is_none());
    let opted_out = f
        .create(&admin(), "", "pods", Some("default"), json!({"metadata": {"name": "s"}, "spec": {"automountServiceAccountToken": false, "containers": [{"name": "c", "image": "nginx"}]}}))
        .await
        .unwrap();
    assert!(opted_out["spec"].get("volumes").is_none());

    // Mirror pods may not reference accounts.
    let e = f
        .create(&admin(), "", "pods", Some("default"), json!({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}}, "spec": {"serviceAccountName": "default", "containers": [{"name": "c", "image": "nginx"}]}}))
        .await
        .unwrap_err();
    assert_eq!(e.message, "pods \"m\" is forbidden: a mirror pod may not reference service accounts");
}

#[tokio::test]
async fn pod_security_enforces_warns_and_audits_through_the_registry() {
    let f = Fixture::new(AdmissionConfig::default()).await;
    f.seed(
        "",
        "namespaces",
        None,
        json!({"metadata": {"name": "locked", "labels": {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/audit": "restricted"
        }}}),
    )
    .await;
    f.seed("", "serviceaccounts", Some("locked"), json!({"metadata": {"name": "default"}})).await;
    let user = admin();
    let warnings = Warnings::default();
    let annotations = AuditAnnotations::default();
    let ctx = Context {
        warnings: Some(&warnings),
        audit_annotations: Some(&annotations),
        ..Context::internal(&user, &f.chain)
    };
    let scope = f.scope("", "pods", Some("locked"));
    let plain = json!({"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    f.registry.create(&scope, plain, &ctx).await.unwrap();
    let w = warnings.take();
    assert_eq!(w.len(), 1);
    assert!(
        w[0].starts_with("would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"),
        "{w:?}"
    );
    let a = annotations.take();
    assert_eq!(a["pod-security.kubernetes.io/enforce-policy"], "baseline:latest");
    assert!(
        a["pod-security.kubernetes.io/audit-violations"].starts_with("would violate PodSecurity \"restricted:latest\"")
    );

    let privileged = json!({"metadata": {"name": "priv"}, "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]}});
    let e = f.registry.create(&scope, privileged.clone(), &ctx).await.unwrap_err();
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "pods \"priv\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
    );
    assert!(warnings.take().is_empty(), "no warnings on a refused request");
    let denied = krate_admission::metrics::POD_SECURITY_EVALUATIONS
        .with_label_values(&["deny", "enforce", "baseline", "latest", "create", "pods", ""])
        .get();
    assert!(denied >= 1, "the refusal is counted");

    // Workloads only warn.
    let deployment = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": privileged["spec"]}}});
    f.registry.create(&f.scope("apps", "deployments", Some("locked")), deployment, &ctx).await.unwrap();
    let w = warnings.take();
    assert!(w[0].starts_with("would violate PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"), "{w:?}");
}

/// Token requests and evictions are computed creates: the server passes them through
/// the chain's validate with the request body, as done here.
#[tokio::test]
async fn node_restriction_limits_token_requests_and_evictions_to_its_pods() {
    use krate_api::admission::{Admission, Attributes, Operation};
    let f = Fixture::new(AdmissionConfig::default()).await;
    let n1 = node("n1");
    let mine = f.seed("", "pods", Some("default"), pod_on("mine", "n1")).await;
    let theirs = f.seed("", "pods", Some("default"), pod_on("theirs", "n2")).await;
    let accounts = f.scope("", "serviceaccounts", Some("default")).resource;
    let pods = f.scope("", "pods", Some("default")).resource;
    let attrs = |resource, sub: &'static str, name: &'static str| Attributes {
        operation: Operation::Create,
        resource,
        subresource: Some(sub),
        namespace: Some("default"),
        name,
        user: &n1,
        dry_run: false,
        warnings: None,
        audit_annotations: None,
    };
    let token = |pod: &Value| {
        json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "spec": {"audiences": [], "boundObjectRef":
            {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}})
    };
    let a = attrs(&accounts, "token", "default");
    f.chain.validate(&a, Some(&token(&mine)), None).await.unwrap();
    let e = f.chain.validate(&a, Some(&token(&theirs)), None).await.unwrap_err();
    assert_eq!(
        e.message,
        "serviceaccounts \"default\" is forbidden: node requested token bound to a pod scheduled on a different node"
    );
    let unbound = json!({"kind": "TokenRequest", "spec": {"audiences": []}});
    let e = f.chain.validate(&a, Some(&unbound), None).await.unwrap_err();
    assert_eq!(e.message, "serviceaccounts \"default\" is forbidden: node requested token not bound to a pod");
    let mut stale = token(&mine);
    stale["spec"]["boundObjectRef"]["uid"] = json!("0000");
    let e = f.chain.validate(&a, Some(&stale), None).await.unwrap_err();
    assert!(
        e.message.contains("the UID in the bound object reference (0000) does not match the UID in record"),
        "{}",
        e.message
    );

    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "x"}});
    f.chain.validate(&attrs(&pods, "eviction", "mine"), Some(&eviction), None).await.unwrap();
    let e = f.chain.validate(&attrs(&pods, "eviction", "theirs"), Some(&eviction), None).await.unwrap_err();
    assert_eq!(e.message, "pods \"theirs\" is forbidden: node n1 can only evict pods with spec.nodeName set to itself");
    let e = f.chain.validate(&attrs(&pods, "exec", "mine"), Some(&eviction), None).await.unwrap_err();
    assert_eq!(
        e.message,
        "pods \"mine\" is forbidden: unexpected pod subresource \"exec\", only 'status' and 'eviction' are allowed"
    );
}

#[tokio::test]
async fn node_restriction_limits_claim_status_csinodes_and_resource_slices() {
    let f = Fixture::new(AdmissionConfig::default()).await;
    let n1 = node("n1");

    // Claim status: capacity and conditions only.
    let pvc = f
        .seed(
            "",
            "persistentvolumeclaims",
            Some("default"),
            json!({"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
    let mut resized = pvc.clone();
    resized["status"]["capacity"] = json!({"storage": "2Gi"});
    resized["status"]["conditions"] = json!([{"type": "Resizing", "status": "True"}]);
    let resized = f.update(&n1, "", "persistentvolumeclaims", Some("default"), resized, Some("status")).await.unwrap();
    assert_eq!(resized["status"]["capacity"]["storage"], "2Gi");
    let mut phase = resized.clone();
    phase["status"]["phase"] = json!("Lost");
    let e = f.update(&n1, "", "persistentvolumeclaims", Some("default"), phase, Some("status")).await.unwrap_err();
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "persistentvolumeclaims \"data\" is forbidden: node \"n1\" is not allowed to update fields other than status.capacity and status.conditions: status.phase"
    );
    let e = f.update(&n1, "", "persistentvolumeclaims", Some("default"), resized, None).await.unwrap_err();
    assert_eq!(e.message, "persistentvolumeclaims \"data\" is forbidden: may only update PVC status");

    // CSINode: only the node's own.
    let csinode = |name: &str| json!({"metadata": {"name": name}, "spec": {"drivers": []}});
    f.create(&n1, "storage.k8s.io", "csinodes", None, csinode("n1")).await.unwrap();
    let e = f.create(&n1, "storage.k8s.io", "csinodes", None, csinode("n2")).await.unwrap_err();
    assert_eq!(
        e.message,
        "csinodes.storage.k8s.io \"n2\" is forbidden: can only access CSINode with the same name as the requesting node"
    );

    // ResourceSlices: created and deleted only for the node itself.
    let slice = |name: &str, node: &str| {
        json!({"metadata": {"name": name}, "spec": {"driver": "gpu.example.com", "nodeName": node,
            "pool": {"name": "pool", "generation": 1, "resourceSliceCount": 1}}})
    };
    f.create(&n1, "resource.k8s.io", "resourceslices", None, slice("mine", "n1")).await.unwrap();
    let e = f.create(&n1, "resource.k8s.io", "resourceslices", None, slice("theirs", "n2")).await.unwrap_err();
    assert_eq!(
        e.message,
        "resourceslices.resource.k8s.io \"theirs\" is forbidden: can only create ResourceSlice with the same NodeName as the requesting node"
    );
    f.seed("resource.k8s.io", "resourceslices", None, slice("theirs", "n2")).await;
    let ctx = Context::internal(&n1, &f.chain);
    let scope = f.scope("resource.k8s.io", "resourceslices", None);
    assert!(f.registry.delete(&scope, "theirs", &DeleteOptions::default(), &ctx).await.is_err());
    assert!(f.registry.delete(&scope, "mine", &DeleteOptions::default(), &ctx).await.is_ok());
}

#[tokio::test]
async fn ingresses_without_a_class_get_the_newest_default() {
    let f = Fixture::new(AdmissionConfig::default()).await;
    let class = |name: &str, default: bool| {
        json!({"metadata": {"name": name,
            "annotations": {"ingressclass.kubernetes.io/is-default-class": if default { "true" } else { "false" }}},
            "spec": {"controller": "example.com/ingress"}})
    };
    let ingress = |name: &str, extra: Value| {
        let mut i = json!({"metadata": {"name": name}, "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}});
        for (k, v) in extra.as_object().unwrap() {
            i[k] = v.clone();
        }
        i
    };
    let net = "networking.k8s.io";
    let made = f.create(&admin(), net, "ingresses", Some("default"), ingress("none-yet", json!({}))).await.unwrap();
    assert!(made.pointer("/spec/ingressClassName").is_none(), "no default class yet: {made}");
    f.seed(net, "ingressclasses", None, class("old", true)).await;
    f.seed(net, "ingressclasses", None, class("plain", false)).await;
    // Creation timestamps have second precision: the newer default comes a second later.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    f.seed(net, "ingressclasses", None, class("new", true)).await;
    let made = f.create(&admin(), net, "ingresses", Some("default"), ingress("a", json!({}))).await.unwrap();
    assert_eq!(made["spec"]["ingressClassName"], "new");
    // A class named in the spec or by the old annotation is kept.
    let named = ingress(
        "b",
        json!({"spec": {"ingressClassName": "plain", "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
    );
    let made = f.create(&admin(), net, "ingresses", Some("default"), named).await.unwrap();
    assert_eq!(made["spec"]["ingressClassName"], "plain");
    let annotated =
        ingress("c", json!({"metadata": {"name": "c", "annotations": {"kubernetes.io/ingress.class": "legacy"}}}));
    let made = f.create(&admin(), net, "ingresses", Some("default"), annotated).await.unwrap();
    assert!(made.pointer("/spec/ingressClassName").is_none(), "{made}");
}

#[tokio::test]
async fn client_certificates_for_system_masters_are_not_requested() {
    let f = Fixture::new(AdmissionConfig::default()).await;
    let request = |orgs: &[&str]| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, "mallory");
        for o in orgs {
            p.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
        }
        let pem = p.serialize_request(&key).unwrap().pem().unwrap();
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem)
    };
    let csr = |name: &str, orgs: &[&str], signer: &str| json!({"metadata": {"name": name}, "spec": {"request": request(orgs), "signerName": signer, "usages": ["client auth"]}});
    let client = "kubernetes.io/kube-apiserver-client";
    let e = f
        .create(
            &admin(),
            "certificates.k8s.io",
            "certificatesigningrequests",
            None,
            csr("m", &["system:masters"], client),
        )
        .await
        .unwrap_err();
    assert_eq!((e.code, e.reason), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "certificatesigningrequests.certificates.k8s.io \"m\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
    );
    f.create(&admin(), "certificates.k8s.io", "certificatesigningrequests", None, csr("dev", &["dev"], client))
        .await
        .unwrap();
    // Other signers decide for themselves.
    let other = csr("other", &["system:masters"], "example.com/signer");
    f.create(&admin(), "certificates.k8s.io", "certificatesigningrequests", None, other).await.unwrap();
}
