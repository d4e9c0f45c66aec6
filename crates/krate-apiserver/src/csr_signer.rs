//! The built-in CSR signers, as upstream's csrsigning controller: approved
//! CertificateSigningRequests for kubernetes.io/kube-apiserver-client,
//! kubernetes.io/kube-apiserver-client-kubelet and kubernetes.io/kubelet-serving are
//! signed with the cluster CA, after each signer's checks; a request that fails them gets
//! the Failed condition. It watches the registry from inside the server for now; it is
//! a controller's work and may move to krate-controllers as a kube-rs client.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use rcgen::{
    CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use serde_json::{Value, json};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use krate_api::admission::Admission;
use krate_api::kinds::certificates::{LEGACY_UNKNOWN_SIGNER, request_der};
use krate_api::registry::{Context, ListOptions, Scope, WatchOptions};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};

use crate::pki::CertKey;

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// Upstream's --cluster-signing-duration default (one year): the longest a signed
/// certificate lives.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// Upstream backdates certificates a little so clocks slightly behind accept them.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("{0}")]
    Invalid(String),
    #[error("signing failed: {0}")]
    Sign(#[from] rcgen::Error),
}

/// Signs with the cluster CA.
pub struct Signer {
    ca: CertKey,
    ca_not_after: i64,
}

impl Signer {
    pub fn new(ca: CertKey) -> Result<Signer, SignError> {
        let bad = |e: &dyn std::fmt::Display| SignError::Invalid(format!("the cluster CA: {e}"));
        let block = x509_parser::pem::Pem::iter_from_buffer(ca.cert_pem.as_bytes())
            .next()
            .ok_or_else(|| bad(&"no certificate"))?
            .map_err(|e| bad(&e))?;
        let cert = block.parse_x509().map_err(|e| bad(&e))?;
        let ca_not_after = cert.validity().not_after.timestamp();
        Ok(Signer { ca, ca_not_after })
    }

    /// The PEM certificate for an approved CSR of one of the built-in signers, or why it
    /// may not be signed (the Failed condition's message).
    pub fn sign(&self, csr: &Value) -> Result<String, SignError> {
        let signer = csr.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
        let usages: BTreeSet<String> = csr
            .pointer("/spec/usages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect();
        let der = request_der(csr).map_err(SignError::Invalid)?;
        let request = Request::parse(&der)?;
        match signer {
            KUBE_APISERVER_CLIENT => check_client_usages(&usages)?,
            KUBELET_CLIENT => check_kubelet_client(&request, &usages)?,
            KUBELET_SERVING => check_kubelet_serving(&request, &usages)?,
            other => return Err(SignError::Invalid(format!("signer {other:?} is not a built-in signer"))),
        }
        let requested = csr.pointer("/spec/expirationSeconds").and_then(Value::as_u64).map(Duration::from_secs);
        let ttl = requested.map_or(MAX_DURATION, |d| d.clamp(Duration::from_secs(600), MAX_DURATION));
        let now = jiff::Timestamp::now().as_second();
        let not_after = (now + ttl.as_secs() as i64).min(self.ca_not_after);
        let not_before = now - BACKDATE.as_secs() as i64;

        let mut params = CertificateSigningRequestParams::from_der(&der.into())?;
        let p = &mut params.params;
        p.not_before =
            time::OffsetDateTime::from_unix_timestamp(not_before).map_err(|e| SignError::Invalid(e.to_string()))?;
        p.not_after =
            time::OffsetDateTime::from_unix_timestamp(not_after).map_err(|e| SignError::Invalid(e.to_string()))?;
        p.is_ca = IsCa::ExplicitNoCa;
        p.serial_number = Some(SerialNumber::from_slice(&random_serial()));
        p.key_usages = usages.iter().filter_map(|u| key_usage(u)).collect();
        p.extended_key_usages = usages.iter().filter_map(|u| extended_key_usage(u)).collect();
        p.use_authority_key_identifier_extension = true;
        let key = KeyPair::from_pem(&self.ca.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca.cert_pem, &key)?;
        Ok(params.signed_by(&issuer)?.pem())
    }
}

fn random_serial() -> [u8; 16] {
    use ring::rand::SecureRandom;
    let mut serial = [0u8; 16];
    let _ = ring::rand::SystemRandom::new().fill(&mut serial);
    serial[0] &= 0x7f; // a positive integer
    serial
}

fn key_usage(u: &str) -> Option<KeyUsagePurpose> {
    Some(match u {
        "digital signature" | "signing" => KeyUsagePurpose::DigitalSignature,
        "content commitment" => KeyUsagePurpose::ContentCommitment,
        "key encipherment" => KeyUsagePurpose::KeyEncipherment,
        "key agreement" => KeyUsagePurpose::KeyAgreement,
        "data encipherment" => KeyUsagePurpose::DataEncipherment,
        "cert sign" => KeyUsagePurpose::KeyCertSign,
        "crl sign" => KeyUsagePurpose::CrlSign,
        "encipher only" => KeyUsagePurpose::EncipherOnly,
        "decipher only" => KeyUsagePurpose::DecipherOnly,
        _ => return None,
    })
}

fn extended_key_usage(u: &str) -> Option<ExtendedKeyUsagePurpose> {
    Some(match u {
        "any" => ExtendedKeyUsagePurpose::Any,
        "server auth" => ExtendedKeyUsagePurpose::ServerAuth,
        "client auth" => ExtendedKeyUsagePurpose::ClientAuth,
        "code signing" => ExtendedKeyUsagePurpose::CodeSigning,
        "email protection" => ExtendedKeyUsagePurpose::EmailProtection,
        "timestamping" => ExtendedKeyUsagePurpose::TimeStamping,
        "ocsp signing" => ExtendedKeyUsagePurpose::OcspSigning,
        _ => return None,
    })
}

/// What the signers check in a request.
#[derive(Debug, Default)]
struct Request {
    common_name: String,
    organizations: Vec<String>,
    dns: usize,
    ips: usize,
    emails: usize,
    uris: usize,
}

impl Request {
    fn parse(der: &[u8]) -> Result<Request, SignError> {
        let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(der)
            .map_err(|e| SignError::Invalid(e.to_string()))?;
        let subject = &csr.certification_request_info.subject;
        let text = |a: &x509_parser::x509::AttributeTypeAndValue| a.as_str().unwrap_or("").to_string();
        let mut r = Request {
            common_name: subject.iter_common_name().next().map(text).unwrap_or_default(),
            organizations: subject.iter_organization().map(text).collect(),
            ..Default::default()
        };
        for ext in csr.requested_extensions().into_iter().flatten() {
            if let ParsedExtension::SubjectAlternativeName(san) = ext {
                for name in &san.general_names {
                    match name {
                        GeneralName::DNSName(_) => r.dns += 1,
                        GeneralName::IPAddress(_) => r.ips += 1,
                        GeneralName::RFC822Name(_) => r.emails += 1,
                        GeneralName::URI(_) => r.uris += 1,
                        _ => {}
                    }
                }
            }
        }
        Ok(r)
    }
}

fn invalid(msg: impl Into<String>) -> SignError {
    SignError::Invalid(msg.into())
}

fn check_client_usages(usages: &BTreeSet<String>) -> Result<(), SignError> {
    for u in usages {
        if !matches!(u.as_str(), "digital signature" | "key encipherment" | "client auth") {
            return Err(invalid(format!("invalid usage for client certificate: {u}")));
        }
    }
    if !usages.contains("client auth") {
        return Err(invalid("missing required usage for client certificate: client auth"));
    }
    Ok(())
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn check_node_subject(r: &Request) -> Result<(), SignError> {
    if r.organizations != ["system:nodes"] {
        return Err(invalid("subject organization is not system:nodes"));
    }
    if !r.common_name.starts_with("system:node:") {
        return Err(invalid("subject common name does not begin with system:node:"));
    }
    Ok(())
}

fn check_kubelet_client(r: &Request, usages: &BTreeSet<String>) -> Result<(), SignError> {
    check_node_subject(r)?;
    if r.dns > 0 {
        return Err(invalid("DNS subjectAltNames are not allowed"));
    }
    if r.emails > 0 {
        return Err(invalid("Email subjectAltNames are not allowed"));
    }
    if r.ips > 0 {
        return Err(invalid("IP subjectAltNames are not allowed"));
    }
    if r.uris > 0 {
        return Err(invalid("URI subjectAltNames are not allowed"));
    }
    let (rsa, no_rsa) =
        (set(&["key encipherment", "digital signature", "client auth"]), set(&["digital signature", "client auth"]));
    if *usages != rsa && *usages != no_rsa {
        return Err(invalid(format!("usages did not match {:?}", rsa.iter().collect::<Vec<_>>())));
    }
    Ok(())
}

fn check_kubelet_serving(r: &Request, usages: &BTreeSet<String>) -> Result<(), SignError> {
    check_node_subject(r)?;
    if r.dns == 0 && r.ips == 0 {
        return Err(invalid("DNS or IP subjectAltName is required"));
    }
    if r.emails > 0 {
        return Err(invalid("Email subjectAltNames are not allowed"));
    }
    if r.uris > 0 {
        return Err(invalid("URI subjectAltNames are not allowed"));
    }
    let (rsa, no_rsa) =
        (set(&["key encipherment", "digital signature", "server auth"]), set(&["digital signature", "server auth"]));
    if *usages != rsa && *usages != no_rsa {
        return Err(invalid(format!("usages did not match {:?}", rsa.iter().collect::<Vec<_>>())));
    }
    Ok(())
}

fn has_condition(csr: &Value, t: &str) -> bool {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
}

/// Whether the loop has anything to do with this CSR.
fn wants_signing(csr: &Value) -> bool {
    let signer = csr.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
    // legacy-unknown never signs; other signers are someone else's.
    let ours =
        matches!(signer, KUBE_APISERVER_CLIENT | KUBELET_CLIENT | KUBELET_SERVING) && signer != LEGACY_UNKNOWN_SIGNER;
    let issued = csr.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
    ours && !issued && has_condition(csr, "Approved") && !has_condition(csr, "Denied") && !has_condition(csr, "Failed")
}

/// Runs the signing loop until the task is dropped: a list, then a watch, again after
/// any interruption.
pub fn spawn(
    registry: Arc<Registry>,
    admission: Arc<dyn Admission>,
    ca: CertKey,
) -> Result<tokio::task::JoinHandle<()>, SignError> {
    let signer = Arc::new(Signer::new(ca)?);
    Ok(tokio::spawn(async move {
        loop {
            if let Err(e) = run(&registry, admission.as_ref(), &signer).await {
                tracing::warn!(error = %e, "the CSR signer's watch ended; restarting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }))
}

async fn run(registry: &Registry, admission: &dyn Admission, signer: &Signer) -> Result<(), ApiError> {
    let resource = registry
        .table
        .lookup("certificates.k8s.io", "v1", "certificatesigningrequests")
        .ok_or_else(ApiError::not_found_path)?;
    let scope = Scope { resource, namespace: None };
    let list = registry.list(&scope, &ListOptions::default()).await?;
    for item in &list.items {
        if let Ok(csr) = serde_json::from_slice::<Value>(item) {
            handle(registry, admission, signer, &scope, csr).await;
        }
    }
    let opts = WatchOptions { resource_version: Some(list.revision.to_string()), ..Default::default() };
    let mut events = Box::pin(registry.watch(&scope, &opts).await?);
    while let Some(item) = events.next().await {
        if !matches!(item.kind, "ADDED" | "MODIFIED") {
            continue;
        }
        if let Ok(csr) = serde_json::from_slice::<Value>(&item.object) {
            handle(registry, admission, signer, &scope, csr).await;
        }
    }
    Ok(())
}

async fn handle(registry: &Registry, admission: &dyn Admission, signer: &Signer, scope: &Scope, mut csr: Value) {
    if !wants_signing(&csr) {
        return;
    }
    let name = krate_api::object::name(&csr).to_string();
    match signer.sign(&csr) {
        Ok(pem) => {
            csr["status"]["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
        }
        Err(e) => {
            tracing::info!(csr = name, error = %e, "CSR failed the signer's checks");
            let now = krate_api::object::now_rfc3339();
            let failed = json!({
                "type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                "message": e.to_string(), "lastUpdateTime": now, "lastTransitionTime": now,
            });
            match csr["status"]["conditions"].as_array_mut() {
                Some(cs) => cs.push(failed),
                None => csr["status"]["conditions"] = json!([failed]),
            }
        }
    }
    let user = UserInfo { name: "system:kube-controller-manager".into(), ..Default::default() };
    let ctx = Context::internal(&user, admission);
    // A conflict means a newer version is on its way through the watch.
    if let Err(e) = registry.update(scope, &name, csr, Some("status"), &ctx).await {
        tracing::debug!(csr = name, error = %e, "updating the CSR's status failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, orgs: &[&str], sans: Vec<rcgen::SanType>) -> Request {
        let key = KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
        }
        p.subject_alt_names = sans;
        let der = p.serialize_request(&key).unwrap().der().to_vec();
        Request::parse(&der).unwrap()
    }

    #[test]
    fn kubelet_signers_check_subject_sans_and_usages() {
        let node = request("system:node:n1", &["system:nodes"], vec![]);
        let client = set(&["digital signature", "client auth"]);
        assert!(check_kubelet_client(&node, &client).is_ok());
        assert!(
            check_kubelet_client(&node, &set(&["client auth"]))
                .unwrap_err()
                .to_string()
                .contains("usages did not match")
        );
        let jane = request("jane", &["system:nodes"], vec![]);
        assert!(check_kubelet_client(&jane, &client).unwrap_err().to_string().contains("system:node:"));
        let wrong_org = request("system:node:n1", &["ops"], vec![]);
        assert!(check_kubelet_client(&wrong_org, &client).unwrap_err().to_string().contains("organization"));
        let serving = set(&["digital signature", "key encipherment", "server auth"]);
        assert!(check_kubelet_serving(&node, &serving).unwrap_err().to_string().contains("DNS or IP"));
        let with_ip =
            request("system:node:n1", &["system:nodes"], vec![rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap())]);
        assert!(check_kubelet_serving(&with_ip, &serving).is_ok());
        assert!(check_kubelet_client(&with_ip, &client).unwrap_err().to_string().contains("IP subjectAltNames"));
        assert!(
            check_client_usages(&set(&["client auth", "server auth"]))
                .unwrap_err()
                .to_string()
                .contains("invalid usage")
        );
        assert!(
            check_client_usages(&set(&["digital signature"]))
                .unwrap_err()
                .to_string()
                .contains("missing required usage")
        );
    }

    #[test]
    fn lifetimes_are_at_least_ten_minutes_and_capped_by_the_ca() {
        // A CA that expires in two hours.
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "short-ca");
        let now = jiff::Timestamp::now().as_second();
        ca.not_after = time::OffsetDateTime::from_unix_timestamp(now + 7200).unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let signer = Signer::new(CertKey { cert_pem: ca_cert.pem(), key_pem: ca_key.serialize_pem() }).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, "jane");
        let pem = p.serialize_request(&key).unwrap().pem().unwrap();
        let csr = |secs: u64| {
            json!({"spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(&pem),
                "signerName": KUBE_APISERVER_CLIENT, "usages": ["client auth"], "expirationSeconds": secs,
            }})
        };
        let not_after = |secs| {
            let pem = signer.sign(&csr(secs)).unwrap();
            let block = x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()).next().unwrap().unwrap();
            block.parse_x509().unwrap().validity().not_after.timestamp() - now
        };
        assert!((600..=602).contains(&not_after(60)), "at least ten minutes");
        assert!((3600..=3602).contains(&not_after(3600)));
        assert!((7199..=7200).contains(&not_after(86_400)), "never past the CA");
    }

    #[test]
    fn only_approved_unissued_builtin_csrs_are_signed() {
        let approved = json!({"type": "Approved", "status": "True"});
        let mk = |signer: &str, conds: Value| json!({"spec": {"signerName": signer}, "status": {"conditions": conds}});
        assert!(wants_signing(&mk(KUBE_APISERVER_CLIENT, json!([approved]))));
        assert!(!wants_signing(&mk(KUBE_APISERVER_CLIENT, json!([]))));
        assert!(!wants_signing(&mk(LEGACY_UNKNOWN_SIGNER, json!([approved]))));
        assert!(!wants_signing(&mk("example.com/other", json!([approved]))));
        assert!(!wants_signing(&mk(KUBELET_SERVING, json!([approved, {"type": "Failed", "status": "True"}]))));
    }
}
