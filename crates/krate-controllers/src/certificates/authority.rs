//! Issuing certificates with the cluster signing CA, as upstream's certificates
//! authority with its PermissiveSigningPolicy: the requested usages, no CA bit, a
//! lifetime of spec.expirationSeconds within [10 min, --cluster-signing-duration],
//! backdated 5 minutes for clock skew (short certificates keep their full end time),
//! and never past the CA's own expiry.

use std::time::Duration;

use rcgen::{CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use super::request::Usages;

/// Upstream's --cluster-signing-duration default: one year.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
const MIN_DURATION: Duration = Duration::from_secs(600);
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Below this lifetime the end time is not moved back with the start.
const SHORT: Duration = Duration::from_secs(8 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("the signing CA: {0}")]
    Ca(String),
    #[error("{0}")]
    Request(String),
    #[error("signing failed: {0}")]
    Sign(#[from] rcgen::Error),
    #[error("copying the request's subject failed: {0}")]
    Subject(#[from] super::subject::SubjectError),
}

/// The signing CA (certificate and key PEM) and its limits.
pub struct Authority {
    cert_pem: String,
    key: KeyPair,
    not_after: i64,
    max_duration: Duration,
}

impl Authority {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Authority, AuthorityError> {
        let bad = |e: &dyn std::fmt::Display| AuthorityError::Ca(e.to_string());
        let block = x509_parser::pem::Pem::iter_from_buffer(cert_pem.as_bytes())
            .next()
            .ok_or_else(|| bad(&"no certificate"))?
            .map_err(|e| bad(&e))?;
        let not_after = block.parse_x509().map_err(|e| bad(&e))?.validity().not_after.timestamp();
        let key = KeyPair::from_pem(key_pem).map_err(|e| bad(&e))?;
        Ok(Authority { cert_pem: cert_pem.to_string(), key, not_after, max_duration: DEFAULT_DURATION })
    }

    /// The lifetime for a request asking for `expiration_seconds` (upstream's duration()).
    pub fn duration(&self, expiration_seconds: Option<i32>) -> Duration {
        match expiration_seconds {
            None => self.max_duration,
            Some(secs) => Duration::from_secs(secs.max(0) as u64).clamp(MIN_DURATION, self.max_duration),
        }
    }

    /// (notBefore, notAfter) in Unix seconds for a certificate issued at `now`.
    pub fn boundaries(&self, now: i64, ttl: Duration) -> (i64, i64) {
        let not_before = now - BACKDATE.as_secs() as i64;
        let not_after = if ttl < SHORT { now + ttl.as_secs() as i64 } else { not_before + ttl.as_secs() as i64 };
        (not_before, not_after.min(self.not_after))
    }

    /// A PEM certificate for the DER request `der`.
    pub fn sign(&self, der: &[u8], usages: &Usages, expiration_seconds: Option<i32>) -> Result<String, AuthorityError> {
        let now = jiff::Timestamp::now().as_second();
        if now >= self.not_after {
            return Err(AuthorityError::Ca("the signer has expired".into()));
        }
        let (not_before, not_after) = self.boundaries(now, self.duration(expiration_seconds));
        let time =
            |t: i64| time::OffsetDateTime::from_unix_timestamp(t).map_err(|e| AuthorityError::Request(e.to_string()));
        let mut params = CertificateSigningRequestParams::from_der(&der.to_vec().into())?;
        let p = &mut params.params;
        p.not_before = time(not_before)?;
        p.not_after = time(not_after)?;
        p.is_ca = IsCa::ExplicitNoCa;
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&random_serial()));
        p.key_usages = usages.iter().filter_map(|u| key_usage(u)).collect();
        p.extended_key_usages = usages.iter().filter_map(|u| extended_key_usage(u)).collect();
        p.use_authority_key_identifier_extension = true;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key)?;
        let issued = params.signed_by(&issuer)?;
        // rcgen keeps one value per attribute type: the request's subject goes in whole.
        use x509_parser::prelude::FromDer;
        let (_, request) = x509_parser::certification_request::X509CertificationRequest::from_der(der)
            .map_err(|e| AuthorityError::Request(e.to_string()))?;
        let subject = request.certification_request_info.subject.as_raw();
        let cert = super::subject::with_subject(issued.der(), subject, &self.key)?;
        Ok(krate_api::pem::encode("CERTIFICATE", &cert))
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
        "email protection" | "s/mime" => ExtendedKeyUsagePurpose::EmailProtection,
        "timestamping" => ExtendedKeyUsagePurpose::TimeStamping,
        "ocsp signing" => ExtendedKeyUsagePurpose::OcspSigning,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::request::{Request, tests::request_pem};

    fn ca_expiring_in(secs: i64) -> Authority {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "test-ca");
        let now = jiff::Timestamp::now().as_second();
        ca.not_after = time::OffsetDateTime::from_unix_timestamp(now + secs).unwrap();
        let cert = ca.self_signed(&ca_key).unwrap();
        Authority::new(&cert.pem(), &ca_key.serialize_pem()).unwrap()
    }

    #[test]
    fn durations_follow_upstreams_bounds() {
        let ca = ca_expiring_in(10 * 365 * 86400);
        assert_eq!(ca.duration(None), DEFAULT_DURATION);
        assert_eq!(ca.duration(Some(60)), Duration::from_secs(600), "at least ten minutes");
        assert_eq!(ca.duration(Some(3600)), Duration::from_secs(3600));
        assert_eq!(ca.duration(Some(i32::MAX)), DEFAULT_DURATION, "at most the signing duration");
        // Short certificates keep their end time; long ones move with the backdated start.
        assert_eq!(ca.boundaries(1_000_000, Duration::from_secs(3600)), (1_000_000 - 300, 1_003_600));
        let day = Duration::from_secs(86_400);
        assert_eq!(ca.boundaries(1_000_000, day), (1_000_000 - 300, 1_000_000 - 300 + 86_400));
    }

    #[test]
    fn certificates_never_outlive_the_ca() {
        let ca = ca_expiring_in(7200);
        let pem = request_pem("jane", &["dev"], vec![]);
        let req = Request::parse_pem(pem.as_bytes()).unwrap();
        let usages: Usages = ["client auth".to_string()].into();
        let now = jiff::Timestamp::now().as_second();
        let life = |secs| {
            let cert = ca.sign(&req.der, &usages, secs).unwrap();
            let block = x509_parser::pem::Pem::iter_from_buffer(cert.as_bytes()).next().unwrap().unwrap();
            let parsed = block.parse_x509().unwrap();
            assert!(!parsed.is_ca());
            assert!(parsed.extended_key_usage().unwrap().unwrap().value.client_auth);
            parsed.validity().not_after.timestamp() - now
        };
        assert!((600..=602).contains(&life(Some(60))));
        assert!((3600..=3602).contains(&life(Some(3600))));
        assert!((7199..=7200).contains(&life(Some(86_400))), "never past the CA");
        assert!((7199..=7200).contains(&life(None)));
    }

    #[test]
    fn the_whole_request_subject_is_issued_and_signed_by_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let csr = dir.path().join("r.csr");
        let out = std::process::Command::new("openssl")
            .args(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-subj", "/O=dev/O=qa/CN=jane", "-keyout"])
            .arg(dir.path().join("r.key"))
            .arg("-out")
            .arg(&csr)
            .output()
            .expect("openssl (scripts/install-deps.sh installs it)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let req = Request::parse_pem(&std::fs::read(&csr).unwrap()).unwrap();
        let ca = ca_expiring_in(86_400);
        let cert = ca.sign(&req.der, &["client auth".to_string()].into(), None).unwrap();
        let block = x509_parser::pem::Pem::iter_from_buffer(cert.as_bytes()).next().unwrap().unwrap();
        let parsed = block.parse_x509().unwrap();
        let orgs: Vec<&str> = parsed.subject().iter_organization().map(|o| o.as_str().unwrap()).collect();
        assert_eq!(orgs, ["dev", "qa"]);
        assert_eq!(parsed.subject().iter_common_name().next().unwrap().as_str().unwrap(), "jane");
        let ca_block = x509_parser::pem::Pem::iter_from_buffer(ca.cert_pem.as_bytes()).next().unwrap().unwrap();
        let ca_cert = ca_block.parse_x509().unwrap();
        parsed.verify_signature(Some(ca_cert.public_key())).expect("signed by the CA");
    }
}
