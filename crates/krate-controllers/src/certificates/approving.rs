//! csrapproving: auto-approves kubelet client certificate requests (signer
//! kube-apiserver-client-kubelet, subject system:node:NAME in system:nodes) when a
//! SubjectAccessReview says the requester may: "create certificatesigningrequests/
//! selfnodeclient" for a node renewing its own certificate (requester = CN), else
//! "create certificatesigningrequests/nodeclient" (a bootstrap token in
//! system:bootstrappers, say), as upstream's sarApprover.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;

use super::request::{self, Request};
use super::{approval, is_issued};
use crate::{Clients, Error, Informer};

const CONTROLLER: &str = "csrapproving";
/// Not allowed now; RBAC may change, so look again later (upstream requeues too).
const RETRY: Duration = Duration::from_secs(30);

/// One kind of request the approver recognizes, and the permission that approves it.
#[derive(Debug, PartialEq)]
pub struct Recognized {
    pub subresource: &'static str,
    pub message: &'static str,
}

const SELF_NODE_CLIENT: Recognized = Recognized {
    subresource: "selfnodeclient",
    message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
};
const NODE_CLIENT: Recognized = Recognized {
    subresource: "nodeclient",
    message: "Auto approving kubelet client certificate after SubjectAccessReview.",
};

/// The recognizers matching this CSR, in upstream's order; empty when there is nothing
/// to decide (issued, already approved or denied, or not a node client request).
pub fn recognize(csr: &CertificateSigningRequest) -> Result<Vec<Recognized>, Error> {
    let (approved, denied) = approval(csr);
    if is_issued(csr) || approved || denied {
        return Ok(vec![]);
    }
    let parsed = Request::parse_pem(&csr.spec.request.0)
        .map_err(|e| Error::Other(format!("unable to parse csr {:?}: {e}", csr.name_any())))?;
    let usages = request::usages_of(csr.spec.usages.as_deref().unwrap_or_default());
    let node_client =
        csr.spec.signer_name == request::KUBELET_CLIENT && request::check_kubelet_client(&parsed, &usages).is_ok();
    let mut out = vec![];
    if node_client && csr.spec.username.as_deref() == Some(parsed.common_name.as_str()) {
        out.push(SELF_NODE_CLIENT);
    }
    if node_client {
        out.push(NODE_CLIENT);
    }
    Ok(out)
}

pub async fn run(clients: Clients, informer: Informer<CertificateSigningRequest>) {
    let client = clients.write;
    super::run(CONTROLLER, informer, move |csr| {
        let client = client.clone();
        async move { sync(&client, &csr).await }
    })
    .await
}

async fn sync(client: &kube::Client, csr: &CertificateSigningRequest) -> Result<Action, Error> {
    let recognized = recognize(csr)?;
    for r in &recognized {
        if !authorize(client, csr, r.subresource).await? {
            continue;
        }
        let mut approved = csr.clone();
        approved.status.get_or_insert_default().conditions.get_or_insert_default().push(
            CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("AutoApproved".into()),
                message: Some(r.message.into()),
                ..Default::default()
            },
        );
        let api: Api<CertificateSigningRequest> = Api::all(client.clone());
        return match api.replace_subresource("approval", &csr.name_any(), &PostParams::default(), &approved).await {
            Ok(_) => {
                tracing::info!(csr = %csr.name_any(), via = r.subresource, "CSR auto-approved");
                Ok(Action::await_change())
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
            Err(e) => Err(Error::Other(format!("error updating approval for csr: {e}"))),
        };
    }
    if !recognized.is_empty() {
        let tried: Vec<_> = recognized.iter().map(|r| r.subresource).collect();
        tracing::debug!(csr = %csr.name_any(), ?tried, "recognized csr but subject access review was not approved");
        return Ok(Action::requeue(RETRY));
    }
    Ok(Action::await_change())
}

/// Whether the requester may create certificatesigningrequests/`subresource`.
async fn authorize(client: &kube::Client, csr: &CertificateSigningRequest, subresource: &str) -> Result<bool, Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                verb: Some("create".into()),
                subresource: Some(subresource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::request::tests::request_pem;

    fn csr(signer: &str, cn: &str, orgs: &[&str], user: &str, usages: &[&str]) -> CertificateSigningRequest {
        let pem = request_pem(cn, orgs, vec![]);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"request": k8s_openapi::ByteString(pem.into_bytes()), "signerName": signer,
                     "usages": usages, "username": user},
        }))
        .unwrap()
    }

    #[test]
    fn node_client_requests_are_recognized_as_upstream() {
        let (kubelet, usages) = (request::KUBELET_CLIENT, ["digital signature", "client auth"]);
        let nodes = ["system:nodes"];
        // A renewal by the node itself: selfnodeclient first, then nodeclient.
        let own = csr(kubelet, "system:node:n1", &nodes, "system:node:n1", &usages);
        assert_eq!(recognize(&own).unwrap(), vec![SELF_NODE_CLIENT, NODE_CLIENT]);
        // A bootstrap token asking for a node's certificate: nodeclient only.
        let boot = csr(kubelet, "system:node:n1", &nodes, "system:bootstrap:abcdef", &usages);
        assert_eq!(recognize(&boot).unwrap(), vec![NODE_CLIENT]);
        // Not node client certificates: nothing to approve.
        let wrong_org = csr(kubelet, "system:node:n1", &["ops"], "system:node:n1", &usages);
        assert!(recognize(&wrong_org).unwrap().is_empty());
        let serving = csr(request::KUBELET_SERVING, "system:node:n1", &nodes, "system:node:n1", &usages);
        assert!(recognize(&serving).unwrap().is_empty());
        let client = csr(request::KUBE_APISERVER_CLIENT, "system:node:n1", &nodes, "system:node:n1", &usages);
        assert!(recognize(&client).unwrap().is_empty());
        // Already decided: left alone.
        let mut denied = own.clone();
        denied.status = Some(
            serde_json::from_value(serde_json::json!({"conditions": [{"type": "Denied", "status": "True"}]})).unwrap(),
        );
        assert!(recognize(&denied).unwrap().is_empty());
    }
}
