//! The agent's certificate files: PEM key and certificate pairs written owner-only and
//! atomically, and whether a kept certificate is still good to use.

use std::path::{Path, PathBuf};

use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

use super::BootstrapError;

/// PEM-encoded certificate and key.
#[derive(Clone, Debug, PartialEq)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The DER blocks of `label` in a PEM text.
pub fn pem_ders(pem: &str, label: &str) -> Vec<Vec<u8>> {
    x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .filter_map(Result::ok)
        .filter(|p| p.label == label)
        .map(|p| p.contents)
        .collect()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BootstrapError + '_ {
    move |source| BootstrapError::Io { path: path.into(), source }
}

pub async fn read(path: &Path) -> Result<Option<String>, BootstrapError> {
    match tokio::fs::read_to_string(path).await {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

pub async fn read_pair(cert: &Path, key: &Path) -> Result<Option<CertKey>, BootstrapError> {
    Ok(match (read(cert).await?, read(key).await?) {
        (Some(cert_pem), Some(key_pem)) => Some(CertKey { cert_pem, key_pem }),
        _ => None,
    })
}

/// Writes `contents` readable by the owner only, replacing the file atomically.
pub async fn write(path: &Path, contents: &str) -> Result<(), BootstrapError> {
    let (path, contents): (PathBuf, String) = (path.into(), contents.into());
    let p = path.clone();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = p.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &p)
    })
    .await
    .map_err(|e| io(&path)(std::io::Error::other(e)))?
    .map_err(io(&path))
}

/// The key first: a certificate is never left beside a key it does not match for longer
/// than the two renames.
pub async fn write_pair(cert: &Path, key: &Path, pair: &CertKey) -> Result<(), BootstrapError> {
    write(key, &pair.key_pem).await?;
    write(cert, &pair.cert_pem).await
}

#[derive(Debug, PartialEq)]
pub enum Lifetime {
    /// Valid, for the right subject and names, with more than 30% of its life left.
    Fresh,
    /// Valid but past 70% of its life: time to ask for a new one.
    Renew,
    /// Expired, unparseable, or for another subject or other names.
    Unusable(String),
}

/// Whether a kept certificate can be used for `subject` naming all of `names`.
pub fn lifetime(cert_pem: &str, subject: &str, names: &[String]) -> Lifetime {
    lifetime_at(cert_pem, subject, names, jiff::Timestamp::now().as_second())
}

pub fn lifetime_at(cert_pem: &str, subject: &str, names: &[String], now: i64) -> Lifetime {
    let Some(der) = pem_ders(cert_pem, "CERTIFICATE").into_iter().next() else {
        return Lifetime::Unusable("no certificate".into());
    };
    let Ok((_, cert)) = X509Certificate::from_der(&der) else {
        return Lifetime::Unusable("unparseable certificate".into());
    };
    let cn = cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok()).unwrap_or_default();
    if cn != subject {
        return Lifetime::Unusable(format!("the certificate is for {cn}, not {subject}"));
    }
    let mut sans: Vec<String> = vec![];
    for ext in cert.extensions() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
            for n in &san.general_names {
                match n {
                    GeneralName::DNSName(d) => sans.push(d.to_string()),
                    GeneralName::IPAddress(b) => {
                        let ip = match b.len() {
                            4 => <[u8; 4]>::try_from(*b).ok().map(std::net::IpAddr::from),
                            16 => <[u8; 16]>::try_from(*b).ok().map(std::net::IpAddr::from),
                            _ => None,
                        };
                        sans.extend(ip.map(|ip| ip.to_string()));
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(missing) = names.iter().find(|n| !sans.contains(n)) {
        return Lifetime::Unusable(format!("the certificate does not name {missing}"));
    }
    let (from, until) = (cert.validity().not_before.timestamp(), cert.validity().not_after.timestamp());
    if now >= until || now < from {
        return Lifetime::Unusable("the certificate has expired or is not yet valid".into());
    }
    if now >= from + (until - from) * 7 / 10 { Lifetime::Renew } else { Lifetime::Fresh }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, sans: &[&str], days: i64) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(days);
        p.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn kept_certificates_are_reused_renewed_or_replaced() {
        let now = jiff::Timestamp::now().as_second();
        let c = cert("system:node:n1", &["n1", "10.0.0.5"], 365);
        assert_eq!(lifetime_at(&c, "system:node:n1", &[], now), Lifetime::Fresh);
        assert_eq!(lifetime_at(&c, "system:node:n1", &["n1".into(), "10.0.0.5".into()], now), Lifetime::Fresh);
        assert!(matches!(lifetime_at(&c, "system:node:n1", &["10.0.0.6".into()], now), Lifetime::Unusable(_)));
        assert!(matches!(lifetime_at(&c, "system:node:n2", &[], now), Lifetime::Unusable(_)));
        assert_eq!(lifetime_at(&c, "system:node:n1", &[], now + 300 * 86400), Lifetime::Renew);
        assert!(matches!(lifetime_at(&c, "system:node:n1", &[], now + 400 * 86400), Lifetime::Unusable(_)));
        assert!(matches!(lifetime_at("junk", "system:node:n1", &[], now), Lifetime::Unusable(_)));
    }
}
