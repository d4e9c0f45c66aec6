//! The certificates controllers of upstream's kube-controller-manager: csrsigning (the
//! built-in signers, with the cluster signing CA), csrapproving (auto-approval of node
//! client certificates after SubjectAccessReviews) and csrcleaner (removal of old
//! CertificateSigningRequests).

pub mod approving;
pub mod authority;
pub mod cleaner;
pub mod request;
pub mod signing;
mod subject;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};

use crate::{Error, Informer};

pub fn has_true_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    conditions(csr).any(|c| c.type_ == kind && c.status == "True")
}

pub fn conditions(csr: &CertificateSigningRequest) -> impl Iterator<Item = &CertificateSigningRequestCondition> {
    csr.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default().iter()
}

/// Upstream's GetCertApprovalCondition: (approved, denied), whatever the status value.
pub fn approval(csr: &CertificateSigningRequest) -> (bool, bool) {
    (conditions(csr).any(|c| c.type_ == "Approved"), conditions(csr).any(|c| c.type_ == "Denied"))
}

pub fn is_issued(csr: &CertificateSigningRequest) -> bool {
    csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty())
}

/// Runs `handle` for every CSR, on each change, from the shared CSR informer (upstream's
/// CertificateController); failures are retried with a delay.
pub async fn run<F, Fut>(controller: &'static str, informer: Informer<CertificateSigningRequest>, handle: F)
where
    F: Fn(Arc<CertificateSigningRequest>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    Controller::for_shared_stream(informer.subscribe(), informer.store())
        .run(
            move |csr, handle: Arc<F>| async move {
                let result = handle(csr).await;
                crate::metrics::record(controller, result.is_ok());
                result
            },
            move |csr, error: &Error, _| {
                tracing::warn!(controller, csr = %csr.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            Arc::new(handle),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}
