//! Asking for a certificate through the certificates.k8s.io API: a fresh key, a PKCS#10
//! request, a CertificateSigningRequest for the signer, then waiting (bounded) for its
//! approval and certificate — or its denial or failure, said clearly.

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::files::CertKey;

pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// The group of nodes' networking identities (csrapproving approves them for the node
/// that asks).
pub const NODE_NETWORK: &str = "krate:node-network";
/// How long to wait for approval and signing before giving up.
pub const WAIT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("making the key or request: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("creating the CertificateSigningRequest: {0}")]
    Create(kube::Error),
    #[error("CertificateSigningRequest {name} was denied: {message}")]
    Denied { name: String, message: String },
    #[error("CertificateSigningRequest {name} failed: {message}")]
    Failed { name: String, message: String },
    #[error(
        "CertificateSigningRequest {name} was not approved and signed within {seconds} s (is the controller manager running?)"
    )]
    Timeout { name: String, seconds: u64 },
}

/// What to ask for.
pub struct Ask {
    pub signer: &'static str,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub sans: Vec<String>,
    pub usages: Vec<&'static str>,
    pub generate_name: &'static str,
}

impl Ask {
    /// The node's client certificate (ECDSA keys need no key encipherment).
    pub fn client(node: &str) -> Ask {
        Ask {
            signer: KUBELET_CLIENT,
            common_name: format!("system:node:{node}"),
            organizations: vec!["system:nodes".into()],
            sans: vec![],
            usages: vec!["digital signature", "client auth"],
            generate_name: "node-csr-",
        }
    }

    /// The node's serving certificate for `names` (DNS names or IP addresses).
    pub fn serving(node: &str, names: &[String]) -> Ask {
        Ask {
            signer: KUBELET_SERVING,
            common_name: format!("system:node:{node}"),
            organizations: vec!["system:nodes".into()],
            sans: names.to_vec(),
            usages: vec!["digital signature", "server auth"],
            generate_name: "csr-",
        }
    }

    /// The identity the node's service proxy, routes and policy enforcement read with:
    /// they list Services, EndpointSlices, Nodes, pods and policies cluster-wide, more
    /// than the Node authorizer lets a node identity do.
    pub fn node_network(node: &str) -> Ask {
        Ask {
            signer: KUBE_APISERVER_CLIENT,
            common_name: format!("{NODE_NETWORK}:{node}"),
            organizations: vec![NODE_NETWORK.into()],
            sans: vec![],
            usages: vec!["digital signature", "client auth"],
            generate_name: "node-network-csr-",
        }
    }

    /// A fresh key and the PEM request for it.
    pub fn request_pem(&self) -> Result<(String, rcgen::KeyPair), CsrError> {
        let key = rcgen::KeyPair::generate()?;
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
        let mut dn = rcgen::DistinguishedName::new();
        for o in &self.organizations {
            dn.push(rcgen::DnType::OrganizationName, o.as_str());
        }
        dn.push(rcgen::DnType::CommonName, self.common_name.as_str());
        p.distinguished_name = dn;
        p.subject_alt_names = self
            .sans
            .iter()
            .map(|s| match s.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(rcgen::SanType::IpAddress(ip)),
                Err(_) => s.clone().try_into().map(rcgen::SanType::DnsName),
            })
            .collect::<Result<_, _>>()?;
        Ok((p.serialize_request(&key)?.pem()?, key))
    }
}

/// Creates the request and waits for its certificate.
pub async fn request(client: &kube::Client, ask: &Ask) -> Result<CertKey, CsrError> {
    let (pem, key) = ask.request_pem()?;
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"generateName": ask.generate_name},
        "spec": {"request": k8s_openapi::ByteString(pem.into_bytes()), "signerName": ask.signer, "usages": ask.usages},
    }))
    .expect("csr literal");
    let created = csrs.create(&PostParams::default(), &csr).await.map_err(CsrError::Create)?;
    let name = created.metadata.name.unwrap_or_default();
    tracing::info!(csr = %name, signer = ask.signer, "waiting for the certificate signing request to be approved and signed");
    let started = Instant::now();
    loop {
        match csrs.get(&name).await {
            Ok(csr) => {
                let status = csr.status.unwrap_or_default();
                for c in status.conditions.unwrap_or_default() {
                    let message = c.message.unwrap_or_default();
                    match c.type_.as_str() {
                        "Denied" => return Err(CsrError::Denied { name, message }),
                        "Failed" => return Err(CsrError::Failed { name, message }),
                        _ => {}
                    }
                }
                if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
                    let cert_pem = String::from_utf8_lossy(&cert.0).into_owned();
                    return Ok(CertKey { cert_pem, key_pem: key.serialize_pem() });
                }
            }
            Err(error) => tracing::debug!(csr = %name, %error, "reading the certificate signing request failed"),
        }
        if started.elapsed() >= WAIT {
            return Err(CsrError::Timeout { name, seconds: WAIT.as_secs() });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_node_subject_and_names() {
        let (pem, _) = Ask::serving("n1", &["host1".into(), "10.0.0.5".into()]).request_pem().unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        let der = super::super::files::pem_ders(&pem, "CERTIFICATE REQUEST").remove(0);
        use x509_parser::prelude::FromDer;
        let (_, req) = x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        let subject = &req.certification_request_info.subject;
        assert_eq!(subject.iter_common_name().next().unwrap().as_str().unwrap(), "system:node:n1");
        assert_eq!(subject.iter_organization().next().unwrap().as_str().unwrap(), "system:nodes");
        let client = Ask::client("n1");
        assert_eq!(
            (client.signer, client.usages.as_slice()),
            (KUBELET_CLIENT, &["digital signature", "client auth"][..])
        );
    }
}
