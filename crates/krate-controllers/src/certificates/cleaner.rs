//! csrcleaner: every hour (and at start) deletes CertificateSigningRequests that are
//! done with, as upstream's CSRCleanerController: approved and issued more than an
//! hour ago, denied or failed more than an hour ago, pending for more than 24 hours,
//! or issued with a certificate that has expired.

use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

use super::{conditions, is_issued};
use crate::{Clients, Informer};

const POLLING_INTERVAL: Duration = Duration::from_secs(3600);
const APPROVED_EXPIRATION: i64 = 3600;
const DENIED_EXPIRATION: i64 = 3600;
const PENDING_EXPIRATION: i64 = 24 * 3600;

pub async fn run(clients: Clients, informer: Informer<CertificateSigningRequest>) {
    let api: Api<CertificateSigningRequest> = Api::all(clients.write);
    informer.ready().await;
    let mut tick = tokio::time::interval(POLLING_INTERVAL);
    loop {
        tick.tick().await;
        let now = jiff::Timestamp::now().as_second();
        for csr in informer.store().state() {
            let Some(why) = why_clean(&csr, now) else { continue };
            tracing::info!(csr = %csr.name_any(), why, "cleaning CSR");
            match api.delete(&csr.name_any(), &DeleteParams::default()).await {
                Ok(_) => crate::metrics::record("csrcleaner", true),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(error) => {
                    crate::metrics::record("csrcleaner", false);
                    tracing::warn!(csr = %csr.name_any(), %error, "unable to delete CSR");
                }
            }
        }
    }
}

fn older_than(t: Option<&Time>, now: i64, secs: i64) -> bool {
    t.is_some_and(|t| now - t.0.as_second() > secs)
}

/// Why the CSR is to be deleted at `now` (Unix seconds), if it is.
pub fn why_clean(csr: &CertificateSigningRequest, now: i64) -> Option<&'static str> {
    for c in conditions(csr) {
        let updated = c.last_update_time.as_ref();
        match c.type_.as_str() {
            "Approved" if is_issued(csr) && older_than(updated, now, APPROVED_EXPIRATION) => {
                return Some("more than an hour old and approved");
            }
            "Denied" if older_than(updated, now, DENIED_EXPIRATION) => return Some("more than an hour old and denied"),
            "Failed" if older_than(updated, now, DENIED_EXPIRATION) => return Some("more than an hour old and failed"),
            _ => {}
        }
    }
    if conditions(csr).next().is_none() && older_than(csr.metadata.creation_timestamp.as_ref(), now, PENDING_EXPIRATION)
    {
        return Some("more than 24 hours old and unhandled");
    }
    let approved = conditions(csr).any(|c| c.type_ == "Approved");
    if approved && certificate_expired(csr, now) {
        return Some("the associated certificate is expired");
    }
    None
}

fn certificate_expired(csr: &CertificateSigningRequest, now: i64) -> bool {
    let Some(pem) = csr.status.as_ref().and_then(|s| s.certificate.as_ref()) else { return false };
    let Some(Ok(block)) = x509_parser::pem::Pem::iter_from_buffer(&pem.0).next() else { return false };
    block.parse_x509().is_ok_and(|cert| now > cert.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn at(secs_ago: i64) -> String {
        jiff::Timestamp::from_second(NOW - secs_ago).unwrap().to_string()
    }

    fn csr(created_ago: i64, conditions: serde_json::Value, certificate: Option<&str>) -> CertificateSigningRequest {
        let mut v = serde_json::json!({
            "metadata": {"name": "x", "creationTimestamp": at(created_ago)},
            "spec": {"request": "", "signerName": "kubernetes.io/kube-apiserver-client"},
            "status": {"conditions": conditions},
        });
        if let Some(c) = certificate {
            v["status"]["certificate"] = serde_json::json!(k8s_openapi::ByteString(c.as_bytes().to_vec()));
        }
        serde_json::from_value(v).unwrap()
    }

    fn cert_expiring(at: i64) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.not_before = time::OffsetDateTime::from_unix_timestamp(at - 7200).unwrap();
        p.not_after = time::OffsetDateTime::from_unix_timestamp(at).unwrap();
        p.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn upstreams_deadlines() {
        let cond = |t: &str, ago: i64| serde_json::json!([{"type": t, "status": "True", "lastUpdateTime": at(ago)}]);
        let valid = cert_expiring(NOW + 86_400);
        let expired = cert_expiring(NOW - 10);
        // Approved and issued: kept for an hour after approval.
        assert_eq!(why_clean(&csr(7200, cond("Approved", 3500), Some(&valid)), NOW), None);
        assert!(why_clean(&csr(7200, cond("Approved", 3700), Some(&valid)), NOW).is_some());
        // Approved but not issued yet: kept.
        assert_eq!(why_clean(&csr(7200, cond("Approved", 3700), None), NOW), None);
        // Issued with an expired certificate: cleaned at once.
        assert_eq!(
            why_clean(&csr(60, cond("Approved", 30), Some(&expired)), NOW),
            Some("the associated certificate is expired")
        );
        // Denied or failed: an hour.
        assert_eq!(why_clean(&csr(7200, cond("Denied", 3500), None), NOW), None);
        assert!(why_clean(&csr(7200, cond("Denied", 3700), None), NOW).is_some());
        assert!(why_clean(&csr(7200, cond("Failed", 3700), None), NOW).is_some());
        // Pending: a day from creation.
        let pending = serde_json::json!([]);
        assert_eq!(why_clean(&csr(23 * 3600, pending.clone(), None), NOW), None);
        assert_eq!(why_clean(&csr(25 * 3600, pending, None), NOW), Some("more than 24 hours old and unhandled"));
    }
}
