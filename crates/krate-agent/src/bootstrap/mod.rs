//! Kubelet TLS bootstrap. A node joining with a bootstrap token:
//! 1. learns the cluster CA from kube-public/cluster-info, read without trusting the
//!    server yet, and believes it only if the ConfigMap's `jws-kubeconfig-<token id>`
//!    is the token's signature of its kubeconfig (kubeadm's discovery by token);
//! 2. as the token's user (system:bootstrappers) asks for a client certificate through
//!    a CertificateSigningRequest for kubernetes.io/kube-apiserver-client-kubelet with
//!    subject CN=system:node:NAME, O=system:nodes, which csrapproving approves and
//!    csrsigning signs;
//! 3. keeps CA, key and certificate in DATA_DIR/agent/ and reuses them on restart,
//!    asking again (as the node itself, a self-node renewal) once 70% of the
//!    certificate's life has passed, as upstream rotates.
//!
//! The serving certificate of the agent's HTTPS API is asked for the same way, as the
//! node, for kubernetes.io/kubelet-serving (`serving_certificate`).

pub mod csr;
pub mod files;

use std::path::{Path, PathBuf};

use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

pub use files::CertKey;

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("the join token is not a bootstrap token (ID.SECRET, 6 and 16 characters of [a-z0-9])")]
    BadToken,
    #[error("reading cluster-info from {server}: {source}")]
    ClusterInfo { server: String, source: kube::Error },
    #[error(
        "cluster-info from {0} is not signed with this join token: the token is wrong or expired, or the server is not the cluster's"
    )]
    Unsigned(String),
    #[error("cluster-info holds no usable kubeconfig: {0}")]
    BadClusterInfo(String),
    #[error("client configuration: {0}")]
    Config(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("certificate signing request: {0}")]
    Csr(#[from] csr::CsrError),
}

/// How the agent reaches the API server as the node.
#[derive(Clone)]
pub struct NodeCredentials {
    pub ca_pem: String,
    pub client: CertKey,
}

/// The join token's (id, secret).
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.trim().split_once('.')?;
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// A kube-rs configuration for `server` trusting `ca_pem`, without credentials yet.
pub fn config(server: &str, ca_pem: Option<&str>) -> Result<kube::Config, BootstrapError> {
    let url = server.parse().map_err(|e| BootstrapError::Config(format!("--server {server}: {e}")))?;
    let mut c = kube::Config::new(url);
    match ca_pem {
        Some(pem) => c.root_cert = Some(files::pem_ders(pem, "CERTIFICATE")),
        // Only to read cluster-info, whose signature is checked instead.
        None => c.accept_invalid_certs = true,
    }
    c.connect_timeout = Some(std::time::Duration::from_secs(10));
    c.read_timeout = Some(std::time::Duration::from_secs(60));
    Ok(c)
}

/// A client acting as the node with its certificate.
pub fn node_client(server: &str, creds: &NodeCredentials) -> Result<kube::Client, BootstrapError> {
    let mut c = config(server, Some(&creds.ca_pem))?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    c.auth_info.client_certificate_data = Some(b64(&creds.client.cert_pem));
    c.auth_info.client_key_data = Some(b64(&creds.client.key_pem).into());
    kube::Client::try_from(c).map_err(|e| BootstrapError::Config(e.to_string()))
}

/// The cluster CA (PEM), from cluster-info checked against the token's signature.
pub async fn discover_ca(server: &str, token: &str) -> Result<String, BootstrapError> {
    let (id, secret) = parse_token(token).ok_or(BootstrapError::BadToken)?;
    let client = kube::Client::try_from(config(server, None)?).map_err(|e| BootstrapError::Config(e.to_string()))?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "kube-public");
    let cm = cms
        .get("cluster-info")
        .await
        .map_err(|source| BootstrapError::ClusterInfo { server: server.into(), source })?;
    let data = cm.data.unwrap_or_default();
    let kubeconfig = data.get("kubeconfig").ok_or_else(|| BootstrapError::BadClusterInfo("no kubeconfig".into()))?;
    let signature = data.get(&format!("jws-kubeconfig-{id}")).ok_or_else(|| BootstrapError::Unsigned(server.into()))?;
    if !krate_auth::authn::bootstrap_jws::verify(kubeconfig, signature, id, secret) {
        return Err(BootstrapError::Unsigned(server.into()));
    }
    ca_of_kubeconfig(kubeconfig)
}

/// certificate-authority-data of the kubeconfig's first cluster, as PEM.
pub fn ca_of_kubeconfig(kubeconfig: &str) -> Result<String, BootstrapError> {
    let bad = |m: String| BootstrapError::BadClusterInfo(m);
    let k = kube::config::Kubeconfig::from_yaml(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let data = k
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
        .ok_or_else(|| bad("no certificate-authority-data".into()))?;
    let pem = base64::engine::general_purpose::STANDARD.decode(data.trim()).map_err(|e| bad(e.to_string()))?;
    let pem = String::from_utf8(pem).map_err(|e| bad(e.to_string()))?;
    if files::pem_ders(&pem, "CERTIFICATE").is_empty() {
        return Err(bad("certificate-authority-data holds no certificate".into()));
    }
    Ok(pem)
}

/// Where the agent keeps its credentials.
pub fn agent_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("agent")
}

/// The node's client credentials: reused from DATA_DIR/agent when still good, renewed
/// as the node near the end of their life, else obtained with the join token.
pub async fn node_credentials(
    server: &str,
    token: &str,
    node: &str,
    data_dir: &Path,
) -> Result<NodeCredentials, BootstrapError> {
    let dir = agent_dir(data_dir);
    let ca_path = dir.join("server-ca.crt");
    let ca_pem = match files::read(&ca_path).await? {
        Some(pem) => pem,
        None => {
            let pem = discover_ca(server, token).await?;
            files::write(&ca_path, &pem).await?;
            tracing::info!(path = %ca_path.display(), "trusting the cluster CA from cluster-info");
            pem
        }
    };
    let subject = format!("system:node:{node}");
    let (cert_path, key_path) = (dir.join("client-kubelet.crt"), dir.join("client-kubelet.key"));
    if let Some(existing) = files::read_pair(&cert_path, &key_path).await? {
        match files::lifetime(&existing.cert_pem, &subject, &[]) {
            files::Lifetime::Fresh => {
                tracing::info!(path = %cert_path.display(), "reusing the node client certificate");
                return Ok(NodeCredentials { ca_pem, client: existing });
            }
            files::Lifetime::Renew => {
                let creds = NodeCredentials { ca_pem: ca_pem.clone(), client: existing.clone() };
                match renew_client(server, &creds, node, &cert_path, &key_path).await {
                    Ok(renewed) => return Ok(NodeCredentials { ca_pem, client: renewed }),
                    // Still valid: keep using it; the next start tries again.
                    Err(error) => {
                        tracing::warn!(%error, "renewing the node client certificate failed; using the current one");
                        return Ok(creds);
                    }
                }
            }
            files::Lifetime::Unusable(why) => tracing::info!(why, "requesting a new node client certificate"),
        }
    }
    let mut c = config(server, Some(&ca_pem))?;
    c.auth_info.token = Some(token.trim().to_string().into());
    let client = kube::Client::try_from(c).map_err(|e| BootstrapError::Config(e.to_string()))?;
    let issued = csr::request(&client, &csr::Ask::client(node)).await?;
    files::write_pair(&cert_path, &key_path, &issued).await?;
    tracing::info!(node, path = %cert_path.display(), "obtained the node client certificate");
    Ok(NodeCredentials { ca_pem, client: issued })
}

async fn renew_client(
    server: &str,
    creds: &NodeCredentials,
    node: &str,
    cert_path: &Path,
    key_path: &Path,
) -> Result<CertKey, BootstrapError> {
    let client = node_client(server, creds)?;
    let issued = csr::request(&client, &csr::Ask::client(node)).await?;
    files::write_pair(cert_path, key_path, &issued).await?;
    tracing::info!(node, "renewed the node client certificate");
    Ok(issued)
}

/// The agent's serving certificate for `names` (the node's hostname and addresses):
/// reused when still good and naming them all, else asked for as the node.
pub async fn serving_certificate(
    client: &kube::Client,
    node: &str,
    names: &[String],
    data_dir: &Path,
) -> Result<CertKey, BootstrapError> {
    let dir = agent_dir(data_dir);
    let (cert_path, key_path) = (dir.join("serving-kubelet.crt"), dir.join("serving-kubelet.key"));
    let subject = format!("system:node:{node}");
    if let Some(existing) = files::read_pair(&cert_path, &key_path).await?
        && files::lifetime(&existing.cert_pem, &subject, names) == files::Lifetime::Fresh
    {
        return Ok(existing);
    }
    let issued = csr::request(client, &csr::Ask::serving(node, names)).await?;
    files::write_pair(&cert_path, &key_path, &issued).await?;
    tracing::info!(node, path = %cert_path.display(), "obtained the serving certificate");
    Ok(issued)
}

/// The node's networking identity (`krate:node-network:NODE`): reused while fresh,
/// else asked for as the node.
pub async fn network_certificate(
    client: &kube::Client,
    node: &str,
    data_dir: &Path,
) -> Result<CertKey, BootstrapError> {
    let dir = agent_dir(data_dir);
    let (cert_path, key_path) = (dir.join("client-network.crt"), dir.join("client-network.key"));
    let subject = format!("{}:{node}", csr::NODE_NETWORK);
    if let Some(existing) = files::read_pair(&cert_path, &key_path).await?
        && files::lifetime(&existing.cert_pem, &subject, &[]) == files::Lifetime::Fresh
    {
        return Ok(existing);
    }
    let issued = csr::request(client, &csr::Ask::node_network(node)).await?;
    files::write_pair(&cert_path, &key_path, &issued).await?;
    tracing::info!(node, path = %cert_path.display(), "obtained the node's networking certificate");
    Ok(issued)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_as_bootstrap_tokens() {
        assert_eq!(parse_token("abcdef.0123456789abcdef\n"), Some(("abcdef", "0123456789abcdef")));
        assert_eq!(parse_token("abcdef:0123456789abcdef"), None);
        assert_eq!(parse_token("Abcdef.0123456789abcdef"), None);
    }

    #[test]
    fn the_ca_comes_from_the_kubeconfigs_first_cluster() {
        let ca = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(ca);
        let k = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: https://x:6443\n    certificate-authority-data: {b64}\ncontexts: []\nusers: []\n"
        );
        assert_eq!(ca_of_kubeconfig(&k).unwrap(), ca);
        assert!(ca_of_kubeconfig("apiVersion: v1\nkind: Config\nclusters: []\n").is_err());
    }
}
