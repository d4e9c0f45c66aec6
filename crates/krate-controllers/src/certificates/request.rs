//! What the built-in signers and the approver read from a CertificateSigningRequest's
//! PKCS#10 request, and each built-in signer's checks (upstream's
//! pkg/apis/certificates helpers: ValidateKubeletClientCSR, ValidateKubeletServingCSR,
//! and the kube-apiserver-client usages check), with upstream's messages.

use std::collections::BTreeSet;

use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// The parts of a certificate request the checks look at, and its DER for signing.
#[derive(Debug, Default, PartialEq)]
pub struct Request {
    pub der: Vec<u8>,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns: usize,
    pub ips: usize,
    pub emails: usize,
    pub uris: usize,
    /// The DNS and IP subjectAltNames themselves (the serving approver matches them
    /// against the node's addresses).
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<std::net::IpAddr>,
}

impl Request {
    /// Parses spec.request (PEM) as upstream's ParseCSR does.
    pub fn parse_pem(pem: &[u8]) -> Result<Request, String> {
        let block = x509_parser::pem::Pem::iter_from_buffer(pem)
            .next()
            .ok_or_else(|| "PEM block type must be CERTIFICATE REQUEST".to_string())?
            .map_err(|e| e.to_string())?;
        if block.label != "CERTIFICATE REQUEST" {
            return Err("PEM block type must be CERTIFICATE REQUEST".into());
        }
        Request::parse_der(block.contents)
    }

    pub fn parse_der(der: Vec<u8>) -> Result<Request, String> {
        let (_, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).map_err(|e| e.to_string())?;
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
                        GeneralName::DNSName(name) => {
                            r.dns += 1;
                            r.dns_names.push(name.to_string());
                        }
                        GeneralName::IPAddress(bytes) => {
                            r.ips += 1;
                            if let Some(ip) = ip_of(bytes) {
                                r.ip_addresses.push(ip);
                            }
                        }
                        GeneralName::RFC822Name(_) => r.emails += 1,
                        GeneralName::URI(_) => r.uris += 1,
                        _ => {}
                    }
                }
            }
        }
        drop(csr);
        r.der = der;
        Ok(r)
    }
}

fn ip_of(bytes: &[u8]) -> Option<std::net::IpAddr> {
    match bytes.len() {
        4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

pub type Usages = BTreeSet<String>;

pub fn usages_of(list: &[String]) -> Usages {
    list.iter().cloned().collect()
}

fn set(items: &[&str]) -> Usages {
    items.iter().map(|s| s.to_string()).collect()
}

/// Go's `%v` of a sorted string list, as upstream's messages print sets.
fn go_list(s: &Usages) -> String {
    format!("[{}]", s.iter().map(String::as_str).collect::<Vec<_>>().join(" "))
}

/// The signer's verdict on a request: Ok(true) to sign, Ok(false) for a signer name no
/// built-in signer handles, Err(message) for the Failed condition.
pub fn check(signer: &str, r: &Request, usages: &Usages) -> Result<bool, String> {
    match signer {
        KUBE_APISERVER_CLIENT => check_client_usages(usages).map(|()| true),
        KUBELET_CLIENT => check_kubelet_client(r, usages).map(|()| true),
        KUBELET_SERVING => check_kubelet_serving(r, usages).map(|()| true),
        // Upstream keeps legacy-unknown unrestricted; v1 refuses to create such CSRs.
        LEGACY_UNKNOWN => Ok(true),
        _ => Ok(false),
    }
}

pub fn check_client_usages(usages: &Usages) -> Result<(), String> {
    for u in usages {
        if !matches!(u.as_str(), "digital signature" | "key encipherment" | "client auth") {
            return Err(format!("invalid usage for client certificate: {u}"));
        }
    }
    if !usages.contains("client auth") {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

fn check_organization(r: &Request) -> Result<(), String> {
    if r.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    Ok(())
}

fn check_common_name(r: &Request) -> Result<(), String> {
    if !r.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

pub fn check_kubelet_client(r: &Request, usages: &Usages) -> Result<(), String> {
    check_organization(r)?;
    if r.dns > 0 {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if r.emails > 0 {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if r.ips > 0 {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if r.uris > 0 {
        return Err("URI subjectAltNames are not allowed".into());
    }
    check_common_name(r)?;
    let rsa = set(&["key encipherment", "digital signature", "client auth"]);
    if *usages != rsa && *usages != set(&["digital signature", "client auth"]) {
        return Err(format!("usages did not match {}", go_list(&rsa)));
    }
    Ok(())
}

pub fn check_kubelet_serving(r: &Request, usages: &Usages) -> Result<(), String> {
    check_organization(r)?;
    if r.dns == 0 && r.ips == 0 {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if r.emails > 0 {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if r.uris > 0 {
        return Err("URI subjectAltNames are not allowed".into());
    }
    let rsa = set(&["key encipherment", "digital signature", "server auth"]);
    if *usages != rsa && *usages != set(&["digital signature", "server auth"]) {
        return Err(format!("usages did not match {}", go_list(&rsa)));
    }
    check_common_name(r)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn request_pem(cn: &str, orgs: &[&str], sans: Vec<rcgen::SanType>) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
        }
        p.subject_alt_names = sans;
        p.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn request(cn: &str, orgs: &[&str], sans: Vec<rcgen::SanType>) -> Request {
        Request::parse_pem(request_pem(cn, orgs, sans).as_bytes()).unwrap()
    }

    #[test]
    fn kubelet_signers_check_subject_sans_and_usages() {
        let node = request("system:node:n1", &["system:nodes"], vec![]);
        let client = set(&["digital signature", "client auth"]);
        assert_eq!(check(KUBELET_CLIENT, &node, &client), Ok(true));
        assert_eq!(
            check_kubelet_client(&node, &set(&["client auth"])).unwrap_err(),
            "usages did not match [client auth digital signature key encipherment]"
        );
        let jane = request("jane", &["system:nodes"], vec![]);
        assert_eq!(
            check_kubelet_client(&jane, &client).unwrap_err(),
            "subject common name does not begin with system:node:"
        );
        let wrong_org = request("system:node:n1", &["ops"], vec![]);
        assert_eq!(check_kubelet_client(&wrong_org, &client).unwrap_err(), "subject organization is not system:nodes");
        let serving = set(&["digital signature", "key encipherment", "server auth"]);
        assert_eq!(check_kubelet_serving(&node, &serving).unwrap_err(), "DNS or IP subjectAltName is required");
        let with_ip =
            request("system:node:n1", &["system:nodes"], vec![rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap())]);
        assert_eq!(check(KUBELET_SERVING, &with_ip, &serving), Ok(true));
        assert_eq!(check_kubelet_client(&with_ip, &client).unwrap_err(), "IP subjectAltNames are not allowed");
        assert_eq!(
            check_kubelet_serving(&with_ip, &client).unwrap_err(),
            "usages did not match [digital signature key encipherment server auth]"
        );
        let dns = request("system:node:n1", &["system:nodes"], vec![rcgen::SanType::DnsName("n1".try_into().unwrap())]);
        assert_eq!(check_kubelet_client(&dns, &client).unwrap_err(), "DNS subjectAltNames are not allowed");
    }

    #[test]
    fn the_client_signer_checks_usages_and_unknown_signers_are_not_ours() {
        let any = request("jane", &[], vec![]);
        assert_eq!(
            check(KUBE_APISERVER_CLIENT, &any, &set(&["client auth", "server auth"])).unwrap_err(),
            "invalid usage for client certificate: server auth"
        );
        assert_eq!(
            check(KUBE_APISERVER_CLIENT, &any, &set(&["digital signature"])).unwrap_err(),
            "missing required usage for client certificate: client auth"
        );
        assert_eq!(check(KUBE_APISERVER_CLIENT, &any, &set(&["client auth", "key encipherment"])), Ok(true));
        assert_eq!(check("example.com/other", &any, &set(&["server auth"])), Ok(false));
        assert_eq!(check(LEGACY_UNKNOWN, &any, &set(&["server auth"])), Ok(true));
        assert!(Request::parse_pem(b"not pem").is_err());
    }
}
