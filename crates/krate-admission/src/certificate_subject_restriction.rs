//! CertificateSubjectRestriction (upstream's admission plugin of that name): nobody may
//! ask the kube-apiserver-client signer for a certificate in group system:masters, which
//! would bypass authorization altogether.

use async_trait::async_trait;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::kinds::certificates::request_organizations;
use krate_api::{ApiError, ApiResult, Target};

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const MASTERS: &str = "system:masters";

pub struct CertificateSubjectRestriction;

#[async_trait]
impl Admission for CertificateSubjectRestriction {
    async fn validate(&self, attrs: &Attributes<'_>, csr: Option<&Value>, _old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        if !(r.group == "certificates.k8s.io"
            && r.plural == "certificatesigningrequests"
            && attrs.subresource.is_none()
            && attrs.operation == Operation::Create)
        {
            return Ok(());
        }
        let Some(csr) = csr else { return Ok(()) };
        if csr.pointer("/spec/signerName").and_then(Value::as_str) != Some(CLIENT_SIGNER) {
            return Ok(());
        }
        if request_organizations(csr).iter().any(|o| o == MASTERS) {
            let name = if attrs.name.is_empty() { krate_api::object::name(csr) } else { attrs.name };
            let target = Target::new(&r.group, &r.plural, &r.kind, name);
            let why = format!("use of {CLIENT_SIGNER} signer with {MASTERS} group is not allowed");
            return Err(ApiError::forbidden_on(&target, &why));
        }
        Ok(())
    }
}
