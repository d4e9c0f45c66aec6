//! What a node needs to join with the join token, as kubeadm's bootstrap-token phase
//! and upstream's bootstrap signer set it up:
//! - kube-public/cluster-info, a ConfigMap anyone may read, holding a kubeconfig with
//!   the cluster CA and, per signing bootstrap token, `jws-kubeconfig-<id>`: the
//!   kubeconfig signed with that token, so a node holding only the token trusts the CA;
//! - ClusterRoleBindings letting system:bootstrappers create CSRs that csrapproving
//!   approves (nodeclient) and nodes renew their own (selfnodeclient);
//! - the API server's kubelet client user bound to system:kubelet-api-admin.

use base64::Engine;
use serde_json::{Value, json};

use krate_api::admission::NoAdmission;
use krate_api::registry::{Context, Scope};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};
use krate_auth::authn::bootstrap_jws;

pub const CLUSTER_INFO: &str = "cluster-info";
const PUBLIC: &str = "kube-public";

fn apiserver() -> UserInfo {
    UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

/// The kubeconfig cluster-info carries: the server and the CA, no credentials.
pub fn cluster_info_kubeconfig(server: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts: []\nusers: []\npreferences: {{}}\n"
    )
}

/// Creates or refreshes everything above. `tokens` are the signing tokens (id, secret).
pub async fn publish(
    registry: &Registry,
    server: &str,
    ca_pem: &str,
    tokens: &[(String, String)],
) -> Result<(), ApiError> {
    let user = apiserver();
    let ctx = Context::internal(&user, &NoAdmission);
    let kubeconfig = cluster_info_kubeconfig(server, ca_pem);
    let mut data = serde_json::Map::new();
    data.insert("kubeconfig".into(), json!(kubeconfig));
    for (id, secret) in tokens {
        data.insert(
            bootstrap_jws::signature_key(id),
            json!(bootstrap_jws::detached_signature(&kubeconfig, id, secret)),
        );
    }
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": CLUSTER_INFO, "namespace": PUBLIC},
        "data": data,
    });
    put(registry, &ctx, "", "configmaps", Some(PUBLIC), cm).await?;

    let rbac = "rbac.authorization.k8s.io";
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "krate:bootstrap-signer-clusterinfo", "namespace": PUBLIC},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CLUSTER_INFO], "verbs": ["get"]}],
    });
    put(registry, &ctx, rbac, "roles", Some(PUBLIC), role).await?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "krate:bootstrap-signer-clusterinfo", "namespace": PUBLIC},
        "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "krate:bootstrap-signer-clusterinfo"},
        "subjects": [{"apiGroup": rbac, "kind": "User", "name": "system:anonymous"}],
    });
    put(registry, &ctx, rbac, "rolebindings", Some(PUBLIC), binding).await?;
    for (name, role, kind, subject) in cluster_role_bindings() {
        let b = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": rbac, "kind": kind, "name": subject}],
        });
        put(registry, &ctx, rbac, "clusterrolebindings", None, b).await?;
    }
    Ok(())
}

/// (binding, cluster role, subject kind, subject), kubeadm's node bindings under krate's name.
pub fn cluster_role_bindings() -> [(&'static str, &'static str, &'static str, &'static str); 4] {
    [
        ("krate:kubelet-bootstrap", "system:node-bootstrapper", "Group", "system:bootstrappers"),
        (
            "krate:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "Group",
            "system:bootstrappers",
        ),
        (
            "krate:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "Group",
            "system:nodes",
        ),
        ("krate:kube-apiserver-kubelet-admin", "system:kubelet-api-admin", "User", crate::pki::KUBELET_CLIENT_USER),
    ]
}

/// Creates `obj`, or replaces what is there when it differs (these are ours to keep).
async fn put(
    registry: &Registry,
    ctx: &Context<'_>,
    group: &str,
    plural: &str,
    namespace: Option<&str>,
    obj: Value,
) -> Result<(), ApiError> {
    let r = registry.table.lookup(group, "v1", plural).expect("built-in resource");
    let scope = Scope { resource: r, namespace: namespace.map(String::from) };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    match registry.get(&scope, &name).await {
        Ok(current) => {
            let same = ["data", "rules", "roleRef", "subjects"].iter().all(|k| current.get(*k) == obj.get(*k));
            if same {
                return Ok(());
            }
            let mut next = obj;
            next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            registry.update(&scope, &name, next, None, ctx).await.map(|_| ())
        }
        Err(e) if e.code == 404 => match registry.create(&scope, obj, ctx).await {
            Ok(_) | Err(ApiError { code: 409, .. }) => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_names_the_server_and_ca_and_signs_verifiably() {
        let k = cluster_info_kubeconfig("https://10.0.0.1:6443", "PEM");
        assert!(k.contains("server: https://10.0.0.1:6443"));
        assert!(k.contains(&base64::engine::general_purpose::STANDARD.encode("PEM")));
        let sig = bootstrap_jws::detached_signature(&k, "abcdef", "0123456789abcdef");
        assert!(bootstrap_jws::verify(&k, &sig, "abcdef", "0123456789abcdef"));
    }
}
