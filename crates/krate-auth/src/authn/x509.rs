//! x509 client certificates: CN is the user, O the groups. The TLS handshake accepts
//! any certificate (it only proves the client holds the key), so that a certificate
//! from another CA, or an expired one, gets upstream's 401 rather than a failed
//! handshake; the chain is verified here, against the cluster CA, at the request's time.

use async_trait::async_trait;
use krate_api::user::UserInfo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};
use x509_parser::prelude::*;

use super::{Authenticated, Authenticator, AuthnError, Credentials};

/// The user a verified client certificate names.
pub fn user_from_cert(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    if name.is_empty() {
        return None;
    }
    let mut groups: Vec<String> =
        subject.iter_organization().filter_map(|o| o.as_str().ok()).map(String::from).collect();
    groups.push("system:authenticated".into());
    Some(UserInfo { name, groups, ..Default::default() })
}

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("the client CA bundle holds no usable certificate: {0}")]
    Invalid(String),
}

/// Chains remembered as verified; past this many, the memory starts over.
const CACHE_MAX: usize = 4096;

/// Verifies client certificates against the cluster CA (upstream's --client-ca-file).
pub struct X509 {
    /// The CA certificates (DER); trust anchors borrow from them at each check.
    roots: Vec<CertificateDer<'static>>,
    /// Verified chains (by SHA-256) → their user and the end of their validity (Unix
    /// seconds): a client sends the same certificate with every request, and the CA
    /// does not change while the server runs, so one signature check per certificate.
    verified: parking_lot::Mutex<std::collections::HashMap<Vec<u8>, (UserInfo, i64)>>,
}

impl X509 {
    /// From a PEM bundle of CA certificates.
    pub fn from_ca_pem(pem: &str) -> Result<X509, CaError> {
        let roots: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| CaError::Invalid(e.to_string()))?;
        // Each must make a trust anchor; found now, not at the first request.
        for r in &roots {
            webpki::anchor_from_trusted_cert(r).map_err(|e| CaError::Invalid(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(CaError::Invalid("no certificate in the bundle".into()));
        }
        Ok(X509 { roots, verified: Default::default() })
    }

    /// Checks `chain` (leaf first) against the CA at `now`: signature path, validity
    /// period, client-auth usage.
    pub fn verify(&self, chain: &[Vec<u8>], now: UnixTime) -> Result<UserInfo, AuthnError> {
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        for c in chain {
            digest.update(&(c.len() as u64).to_be_bytes());
            digest.update(c);
        }
        let key = digest.finish().as_ref().to_vec();
        let secs = now.as_secs() as i64;
        if let Some((user, until)) = self.verified.lock().get(&key)
            && secs <= *until
        {
            return Ok(user.clone());
        }
        let user = self.verify_uncached(chain, now)?;
        let until = chain
            .first()
            .and_then(|leaf| X509Certificate::from_der(leaf).ok())
            .map(|(_, c)| c.validity().not_after.timestamp())
            .unwrap_or(secs);
        let mut verified = self.verified.lock();
        if verified.len() >= CACHE_MAX {
            verified.clear();
        }
        verified.insert(key, (user.clone(), until));
        Ok(user)
    }

    fn verify_uncached(&self, chain: &[Vec<u8>], now: UnixTime) -> Result<UserInfo, AuthnError> {
        let leaf = chain.first().ok_or_else(|| AuthnError::Invalid("no client certificate".into()))?;
        let anchors: Vec<TrustAnchor<'_>> =
            self.roots.iter().filter_map(|r| webpki::anchor_from_trusted_cert(r).ok()).collect();
        let leaf_der = CertificateDer::from(leaf.as_slice());
        let intermediates: Vec<CertificateDer<'_>> =
            chain[1..].iter().map(|c| CertificateDer::from(c.as_slice())).collect();
        let ee = webpki::EndEntityCert::try_from(&leaf_der)
            .map_err(|e| AuthnError::Invalid(format!("client certificate cannot be parsed: {e}")))?;
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &intermediates,
            now,
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(|e| AuthnError::Invalid(format!("verifying certificate: {e}")))?;
        user_from_cert(leaf).ok_or_else(|| AuthnError::Invalid("client certificate without a common name".into()))
    }
}

#[async_trait]
impl Authenticator for X509 {
    async fn authenticate(&self, creds: &Credentials<'_>) -> Result<Option<Authenticated>, AuthnError> {
        if creds.client_certs.is_empty() {
            return Ok(None);
        }
        let user = self.verify(creds.client_certs, UnixTime::now())?;
        Ok(Some(Authenticated { user, audiences: vec![] }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    struct Ca {
        pem: String,
        key: KeyPair,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Ca { pem: p.self_signed(&key).unwrap().pem(), key }
    }

    fn client(ca: &Ca, cn: &str, orgs: &[&str], expired: bool) -> Vec<u8> {
        let issuer = Issuer::from_ca_cert_pem(&ca.pem, &ca.key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = DistinguishedName::new();
        for o in orgs {
            dn.push(DnType::OrganizationName, *o);
        }
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        p.signed_by(&key, &issuer).unwrap().der().to_vec()
    }

    #[test]
    fn a_certificate_of_the_cluster_ca_names_user_and_groups() {
        let ca = ca("test-ca");
        let x = X509::from_ca_pem(&ca.pem).unwrap();
        // (rcgen keeps one value per attribute type: one O here.)
        let user = x.verify(&[client(&ca, "jane", &["dev"], false)], UnixTime::now()).unwrap();
        assert_eq!(user.name, "jane");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
    }

    #[test]
    fn another_ca_or_an_expired_certificate_is_refused() {
        let (ours, theirs, same_name) = (ca("test-ca"), ca("other-ca"), ca("test-ca"));
        let x = X509::from_ca_pem(&ours.pem).unwrap();
        let err = x.verify(&[client(&theirs, "jane", &[], false)], UnixTime::now()).unwrap_err();
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");
        // A CA that only copies our CA's name signs with another key.
        let err = x.verify(&[client(&same_name, "jane", &[], false)], UnixTime::now()).unwrap_err();
        assert!(err.to_string().contains("Signature"), "{err}");
        let err = x.verify(&[client(&ours, "jane", &[], true)], UnixTime::now()).unwrap_err();
        assert!(err.to_string().contains("Expired"), "{err}");
    }

    #[test]
    fn a_remembered_certificate_still_expires() {
        let ca = ca("test-ca");
        let x = X509::from_ca_pem(&ca.pem).unwrap();
        let cert = client(&ca, "jane", &[], true); // valid through 2000
        let at = |secs: u64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
        let mid_2000 = 962_409_600;
        assert!(x.verify(std::slice::from_ref(&cert), at(mid_2000)).is_ok());
        assert!(x.verify(std::slice::from_ref(&cert), at(mid_2000 + 1)).is_ok());
        assert!(x.verify(&[cert], at(1_100_000_000)).is_err(), "valid after its end");
    }

    #[test]
    fn mutated_certificates_never_panic_and_are_refused() {
        let ca = ca("test-ca");
        let x = X509::from_ca_pem(&ca.pem).unwrap();
        let good = client(&ca, "jane", &["dev"], false);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2000 {
            let mut bad = good.clone();
            match round % 3 {
                // Flip a few bytes anywhere (signature, subject, lengths).
                0 => {
                    for _ in 0..(1 + next() % 4) {
                        let i = (next() as usize) % bad.len();
                        bad[i] ^= 1 << (next() % 8);
                    }
                }
                // Cut it short.
                1 => bad.truncate((next() as usize) % bad.len()),
                // Random bytes.
                _ => bad = (0..(next() % 600)).map(|_| next() as u8).collect(),
            }
            if bad == good {
                continue;
            }
            // A flipped bit in an unsigned outer field can leave a valid certificate;
            // what matters is no panic and, when accepted, the same identity.
            if let Ok(user) = x.verify(&[bad], UnixTime::now()) {
                assert_eq!(user.name, "jane");
            }
        }
    }
}
