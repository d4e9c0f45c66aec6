//! The cluster's certificates: a CA made on first start and kept in the data dir, the
//! API server's serving certificate, the admin's client certificate, and the admin
//! kubeconfig that bundles them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: not a usable certificate or key: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// PEM-encoded certificate and key.
#[derive(Clone)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Everything the server serves and trusts with.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: CertKey,
    pub serving: CertKey,
    pub admin: CertKey,
    /// The API server's client certificate towards kubelets (upstream's
    /// apiserver-kubelet-client): nodes/proxy and the pods' log, exec, attach and
    /// port-forward go to the agents with it.
    pub kubelet_client: CertKey,
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io { path: path.into(), source }),
    }
}

/// Writes a file readable by its owner only (keys, kubeconfigs).
pub fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| PkiError::Io { path: path.into(), source };
    let tmp = path.with_extension("tmp");
    let mut f =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).map_err(io)?;
    f.write_all(contents.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn dn(cn: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    dn
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let now = jiff::Timestamp::now().as_second();
    p.distinguished_name = dn(&format!("krate-server-ca@{now}"), &[]);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    p
}

impl Pki {
    /// Loads the CA from `dir` (creating it on first start), issues a fresh serving
    /// certificate for `sans`, and keeps the admin certificate if one exists.
    pub fn ensure(dir: &Path, sans: &[String]) -> Result<Pki, PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Io { path: dir.into(), source })?;
        let (ca_crt, ca_key) = (dir.join("server-ca.crt"), dir.join("server-ca.key"));
        let ca = match (read(&ca_crt)?, read(&ca_key)?) {
            (Some(cert_pem), Some(key_pem)) => CertKey { cert_pem, key_pem },
            _ => {
                let key = KeyPair::generate()?;
                let cert = ca_params().self_signed(&key)?;
                let ca = CertKey { cert_pem: cert.pem(), key_pem: key.serialize_pem() };
                write_private(&ca_key, &ca.key_pem)?;
                write_private(&ca_crt, &ca.cert_pem)?;
                tracing::info!(path = %ca_crt.display(), "created the cluster CA");
                ca
            }
        };
        let ca_keypair = KeyPair::from_pem(&ca.key_pem)
            .map_err(|e| PkiError::Invalid { path: ca_key.clone(), reason: e.to_string() })?;
        let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, &ca_keypair)
            .map_err(|e| PkiError::Invalid { path: ca_crt.clone(), reason: e.to_string() })?;

        let serving = {
            let key = KeyPair::generate()?;
            let mut p = CertificateParams::new(Vec::<String>::new())?;
            p.distinguished_name = dn("kube-apiserver", &[]);
            p.subject_alt_names = san_list(sans)?;
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
            let cert = p.signed_by(&key, &issuer)?;
            let ck = CertKey { cert_pem: cert.pem(), key_pem: key.serialize_pem() };
            write_private(&dir.join("serving-kube-apiserver.key"), &ck.key_pem)?;
            write_private(&dir.join("serving-kube-apiserver.crt"), &ck.cert_pem)?;
            ck
        };

        let (admin_crt, admin_key) = (dir.join("client-admin.crt"), dir.join("client-admin.key"));
        let admin = match (read(&admin_crt)?, read(&admin_key)?) {
            (Some(cert_pem), Some(key_pem)) => CertKey { cert_pem, key_pem },
            _ => {
                let ck = issue_client(&issuer, "system:admin", &["system:masters"])?;
                write_private(&admin_key, &ck.key_pem)?;
                write_private(&admin_crt, &ck.cert_pem)?;
                ck
            }
        };
        let (kc_crt, kc_key) =
            (dir.join("client-kube-apiserver-kubelet.crt"), dir.join("client-kube-apiserver-kubelet.key"));
        let kubelet_client = match (read(&kc_crt)?, read(&kc_key)?) {
            (Some(cert_pem), Some(key_pem)) => CertKey { cert_pem, key_pem },
            _ => {
                let ck = issue_client(&issuer, KUBELET_CLIENT_USER, &[])?;
                write_private(&kc_key, &ck.key_pem)?;
                write_private(&kc_crt, &ck.cert_pem)?;
                ck
            }
        };
        Ok(Pki { dir: dir.into(), ca, serving, admin, kubelet_client })
    }

    /// A client certificate for `user` in `groups`, signed by the cluster CA.
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<CertKey, PkiError> {
        let key = KeyPair::from_pem(&self.ca.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca.cert_pem, &key)?;
        issue_client(&issuer, user, groups)
    }

    /// A serving certificate for `cn` in `orgs` naming `sans` (DNS names or IP
    /// addresses), signed by the cluster CA: the in-process agent's kubelet certificate.
    pub fn issue_serving(&self, cn: &str, orgs: &[&str], sans: &[String]) -> Result<CertKey, PkiError> {
        let ca_key = KeyPair::from_pem(&self.ca.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca.cert_pem, &ca_key)?;
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        p.distinguished_name = dn(cn, orgs);
        p.subject_alt_names = san_list(sans)?;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let cert = p.signed_by(&key, &issuer)?;
        Ok(CertKey { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A kubeconfig for `server` authenticating with `client`.
    pub fn kubeconfig(&self, server: &str, client: &CertKey, user: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: default
  cluster:
    server: {server}
    certificate-authority-data: {ca}
contexts:
- name: default
  context:
    cluster: default
    user: {user}
current-context: default
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
",
            ca = b64(&self.ca.cert_pem),
            cert = b64(&client.cert_pem),
            key = b64(&client.key_pem),
        )
    }
}

/// The user the API server is towards kubelets (bound to system:kubelet-api-admin).
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

fn san_list(sans: &[String]) -> Result<Vec<SanType>, rcgen::Error> {
    sans.iter()
        .map(|s| match s.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => s.clone().try_into().map(SanType::DnsName),
        })
        .collect()
}

fn issue_client(issuer: &Issuer<'_, impl rcgen::SigningKey>, user: &str, groups: &[&str]) -> Result<CertKey, PkiError> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name = dn(user, groups);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let cert = p.signed_by(&key, issuer)?;
    Ok(CertKey { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}
