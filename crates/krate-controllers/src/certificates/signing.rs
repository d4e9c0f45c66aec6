//! csrsigning: approved CertificateSigningRequests of the built-in signers
//! (kube-apiserver-client, kube-apiserver-client-kubelet, kubelet-serving and
//! legacy-unknown) get a certificate from the cluster signing CA once each signer's
//! checks pass; a request that fails them gets the Failed condition with reason
//! SignerValidationFailure, as upstream's csrsigning controllers do.

use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;

use super::authority::Authority;
use super::request::{self, Request};
use super::{has_true_condition, is_issued};
use crate::{Clients, Error, Informer};

const CONTROLLER: &str = "csrsigning";

pub async fn run(clients: Clients, informer: Informer<CertificateSigningRequest>, authority: Arc<Authority>) {
    let api: Api<CertificateSigningRequest> = Api::all(clients.write);
    super::run(CONTROLLER, informer, move |csr| {
        let (api, authority) = (api.clone(), authority.clone());
        async move { sync(&api, &authority, &csr).await }
    })
    .await
}

/// What the signer does with a CSR.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Not approved, denied, failed, already issued, or another signer's.
    Skip,
    Fail(String),
    Sign(Request),
}

pub fn judge(csr: &CertificateSigningRequest) -> Result<Verdict, Error> {
    let approved = has_true_condition(csr, "Approved") && !has_true_condition(csr, "Denied");
    if !approved || has_true_condition(csr, "Failed") || is_issued(csr) {
        return Ok(Verdict::Skip);
    }
    let signer = csr.spec.signer_name.as_str();
    if !matches!(
        signer,
        request::KUBE_APISERVER_CLIENT | request::KUBELET_CLIENT | request::KUBELET_SERVING | request::LEGACY_UNKNOWN
    ) {
        return Ok(Verdict::Skip);
    }
    let parsed = Request::parse_pem(&csr.spec.request.0)
        .map_err(|e| Error::Other(format!("unable to parse csr {:?}: {e}", csr.name_any())))?;
    let usages = request::usages_of(csr.spec.usages.as_deref().unwrap_or_default());
    Ok(match request::check(signer, &parsed, &usages) {
        Err(message) => Verdict::Fail(message),
        Ok(false) => Verdict::Skip,
        Ok(true) => Verdict::Sign(parsed),
    })
}

async fn sync(
    api: &Api<CertificateSigningRequest>,
    authority: &Authority,
    csr: &CertificateSigningRequest,
) -> Result<Action, Error> {
    let mut updated = csr.clone();
    let status = updated.status.get_or_insert_default();
    match judge(csr)? {
        Verdict::Skip => return Ok(Action::await_change()),
        Verdict::Fail(message) => {
            tracing::info!(csr = %csr.name_any(), %message, "CSR failed its signer's checks");
            status.conditions.get_or_insert_default().push(CertificateSigningRequestCondition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: Some("SignerValidationFailure".into()),
                message: Some(message),
                last_update_time: Some(Time(jiff::Timestamp::now())),
                ..Default::default()
            });
        }
        Verdict::Sign(request) => {
            let usages = request::usages_of(csr.spec.usages.as_deref().unwrap_or_default());
            let pem = authority
                .sign(&request.der, &usages, csr.spec.expiration_seconds)
                .map_err(|e| Error::Other(format!("error auto signing csr: {e}")))?;
            status.certificate = Some(ByteString(pem.into_bytes()));
        }
    }
    match api.replace_status(&csr.name_any(), &PostParams::default(), &updated).await {
        Ok(_) => Ok(Action::await_change()),
        // Gone, or changed meanwhile: the informer brings the newer version.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::request::tests::request_pem;

    fn csr(signer: &str, conditions: &[(&str, &str)], usages: &[&str]) -> CertificateSigningRequest {
        let pem = request_pem("jane", &[], vec![]);
        let conds: Vec<_> = conditions.iter().map(|(t, s)| serde_json::json!({"type": t, "status": s})).collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"request": k8s_openapi::ByteString(pem.into_bytes()), "signerName": signer, "usages": usages},
            "status": {"conditions": conds},
        }))
        .unwrap()
    }

    #[test]
    fn only_approved_unissued_unfailed_builtin_csrs_are_signed() {
        let client = request::KUBE_APISERVER_CLIENT;
        let ok = ["client auth"];
        assert!(matches!(judge(&csr(client, &[("Approved", "True")], &ok)).unwrap(), Verdict::Sign(_)));
        assert_eq!(judge(&csr(client, &[], &ok)).unwrap(), Verdict::Skip);
        assert_eq!(judge(&csr(client, &[("Approved", "False")], &ok)).unwrap(), Verdict::Skip);
        assert_eq!(judge(&csr(client, &[("Approved", "True"), ("Failed", "True")], &ok)).unwrap(), Verdict::Skip);
        assert_eq!(judge(&csr("example.com/mine", &[("Approved", "True")], &ok)).unwrap(), Verdict::Skip);
        assert_eq!(
            judge(&csr(client, &[("Approved", "True")], &["server auth"])).unwrap(),
            Verdict::Fail("invalid usage for client certificate: server auth".into())
        );
        let mut issued = csr(client, &[("Approved", "True")], &ok);
        issued.status.as_mut().unwrap().certificate = Some(ByteString(b"cert".to_vec()));
        assert_eq!(judge(&issued).unwrap(), Verdict::Skip);
    }
}
