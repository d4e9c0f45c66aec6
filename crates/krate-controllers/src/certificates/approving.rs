//! csrapproving: auto-approves kubelet client certificate requests (signer
//! kube-apiserver-client-kubelet, subject system:node:NAME in system:nodes) when a
//! SubjectAccessReview says the requester may: "create certificatesigningrequests/
//! selfnodeclient" for a node renewing its own certificate (requester = CN), else
//! "create certificatesigningrequests/nodeclient" (a bootstrap token in
//! system:bootstrappers, say), as upstream's sarApprover.
//!
//! Unlike upstream, which leaves kubelet serving certificates (signer kubelet-serving)
//! to an external approver, it also approves those a node asks for itself
//! (requester = CN = system:node:NAME, in system:nodes) whose DNS and IP names are all
//! among that Node's status.addresses, so `krate agent`'s HTTPS endpoint gets a
//! certificate without an operator; and a node's request for its networking identity
//! (signer kube-apiserver-client, subject `krate:node-network:NAME` in group
//! `krate:node-network`, asked by system:node:NAME itself), which the agent's service
//! proxy, routes and policy enforcement read with (as k3s hands its agents a kube-proxy
//! certificate). Anything else is left pending for a person.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::api::core::v1::Node;
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

const SERVING_MESSAGE: &str = "Auto approving kubelet serving certificate: its names are the node's addresses.";
/// A node's serving CSR may arrive before the informer holds the Node.
const NODE_RETRY: Duration = Duration::from_secs(2);

/// Upstream's reasons a serving request is not approved by us (pending, for a person).
#[derive(Debug, PartialEq)]
pub enum Serving {
    /// Not ours to judge (another signer, decided, issued, or not from the node itself).
    NotApplicable,
    /// A node's own serving request: approve if its names are among these addresses.
    Node { name: String, dns: Vec<String>, ips: Vec<std::net::IpAddr> },
}

pub fn recognize_serving(csr: &CertificateSigningRequest) -> Serving {
    let (approved, denied) = approval(csr);
    if csr.spec.signer_name != request::KUBELET_SERVING || is_issued(csr) || approved || denied {
        return Serving::NotApplicable;
    }
    let Ok(parsed) = Request::parse_pem(&csr.spec.request.0) else { return Serving::NotApplicable };
    let usages = request::usages_of(csr.spec.usages.as_deref().unwrap_or_default());
    let from_node = csr.spec.username.as_deref() == Some(parsed.common_name.as_str())
        && csr.spec.groups.as_deref().unwrap_or_default().iter().any(|g| g == "system:nodes");
    if request::check_kubelet_serving(&parsed, &usages).is_err() || !from_node {
        return Serving::NotApplicable;
    }
    let name = parsed.common_name.trim_start_matches("system:node:").to_string();
    Serving::Node { name, dns: parsed.dns_names, ips: parsed.ip_addresses }
}

/// The group, and the prefix of the user, of nodes' networking identities.
pub const NODE_NETWORK: &str = "krate:node-network";
const NODE_NETWORK_MESSAGE: &str = "Auto approving node network certificate: requested by the node it names.";

/// Whether this CSR is a node asking for its own networking identity: exactly that
/// subject, no other names, client usages only.
pub fn recognize_node_network(csr: &CertificateSigningRequest) -> bool {
    let (approved, denied) = approval(csr);
    if csr.spec.signer_name != request::KUBE_APISERVER_CLIENT || is_issued(csr) || approved || denied {
        return false;
    }
    let Ok(parsed) = Request::parse_pem(&csr.spec.request.0) else { return false };
    let usages = request::usages_of(csr.spec.usages.as_deref().unwrap_or_default());
    let Some(node) = parsed.common_name.strip_prefix(&format!("{NODE_NETWORK}:")) else { return false };
    let requester_is_that_node = csr.spec.username.as_deref() == Some(format!("system:node:{node}").as_str())
        && csr.spec.groups.as_deref().unwrap_or_default().iter().any(|g| g == "system:nodes");
    !node.is_empty()
        && requester_is_that_node
        && parsed.organizations == [NODE_NETWORK]
        && parsed.dns + parsed.ips + parsed.emails + parsed.uris == 0
        && request::check_client_usages(&usages).is_ok()
}

/// Whether every name of a serving request is one of the node's addresses.
pub fn names_match_node(node: &Node, dns: &[String], ips: &[std::net::IpAddr]) -> bool {
    let addresses: Vec<&str> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|a| a.address.as_str())
        .collect();
    dns.iter().all(|d| addresses.contains(&d.as_str()))
        && ips.iter().all(|ip| addresses.iter().any(|a| a.parse::<std::net::IpAddr>().ok() == Some(*ip)))
}

pub async fn run(clients: Clients, informer: Informer<CertificateSigningRequest>, nodes: Informer<Node>) {
    let client = clients.write;
    super::run(CONTROLLER, informer, move |csr| {
        let (client, nodes) = (client.clone(), nodes.clone());
        async move { sync(&client, &csr, &nodes).await }
    })
    .await
}

async fn approve(client: &kube::Client, csr: &CertificateSigningRequest, message: &str) -> Result<Action, Error> {
    let mut approved = csr.clone();
    approved.status.get_or_insert_default().conditions.get_or_insert_default().push(
        CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("AutoApproved".into()),
            message: Some(message.into()),
            ..Default::default()
        },
    );
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    match api.replace_subresource("approval", &csr.name_any(), &PostParams::default(), &approved).await {
        Ok(_) => {
            tracing::info!(csr = %csr.name_any(), message, "CSR auto-approved");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
        Err(e) => Err(Error::Other(format!("error updating approval for csr: {e}"))),
    }
}

async fn sync(client: &kube::Client, csr: &CertificateSigningRequest, nodes: &Informer<Node>) -> Result<Action, Error> {
    if let Serving::Node { name, dns, ips } = recognize_serving(csr) {
        let Some(node) = nodes.store().get(&kube::runtime::reflector::ObjectRef::new(&name)) else {
            return Ok(Action::requeue(NODE_RETRY));
        };
        if !names_match_node(&node, &dns, &ips) {
            // The node may not have reported its addresses yet.
            return Ok(Action::requeue(RETRY));
        }
        return approve(client, csr, SERVING_MESSAGE).await;
    }
    if recognize_node_network(csr) {
        return approve(client, csr, NODE_NETWORK_MESSAGE).await;
    }
    let recognized = recognize(csr)?;
    for r in &recognized {
        if !authorize(client, csr, r.subresource).await? {
            continue;
        }
        return approve(client, csr, r.message).await;
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

    fn network_csr(cn: &str, orgs: &[&str], user: &str, sans: Vec<rcgen::SanType>) -> CertificateSigningRequest {
        let pem = request_pem(cn, orgs, sans);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "net"},
            "spec": {"request": k8s_openapi::ByteString(pem.into_bytes()), "signerName": request::KUBE_APISERVER_CLIENT,
                     "usages": ["digital signature", "client auth"], "username": user, "groups": ["system:nodes"]},
        }))
        .unwrap()
    }

    #[test]
    fn node_network_identities_are_approved_only_for_the_node_itself() {
        let net = [NODE_NETWORK];
        assert!(recognize_node_network(&network_csr("krate:node-network:n1", &net, "system:node:n1", vec![])));
        // Another node asking for n1's identity, another group, extra names, or an empty name.
        assert!(!recognize_node_network(&network_csr("krate:node-network:n1", &net, "system:node:n2", vec![])));
        assert!(!recognize_node_network(&network_csr(
            "krate:node-network:n1",
            &["system:masters"],
            "system:node:n1",
            vec![]
        )));
        let dns = vec![rcgen::SanType::DnsName("x".try_into().unwrap())];
        assert!(!recognize_node_network(&network_csr("krate:node-network:n1", &net, "system:node:n1", dns)));
        assert!(!recognize_node_network(&network_csr("krate:node-network:", &net, "system:node:", vec![])));
        assert!(!recognize_node_network(&network_csr("system:kube-proxy", &net, "system:node:n1", vec![])));
        // A user who is not in system:nodes.
        let mut not_node = network_csr("krate:node-network:n1", &net, "system:node:n1", vec![]);
        not_node.spec.groups = Some(vec!["system:authenticated".into()]);
        assert!(!recognize_node_network(&not_node));
    }

    fn serving_csr(cn: &str, user: &str, groups: &[&str], sans: Vec<rcgen::SanType>) -> CertificateSigningRequest {
        let pem = request_pem(cn, &["system:nodes"], sans);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"},
            "spec": {"request": k8s_openapi::ByteString(pem.into_bytes()), "signerName": request::KUBELET_SERVING,
                     "usages": ["digital signature", "server auth"], "username": user, "groups": groups},
        }))
        .unwrap()
    }

    #[test]
    fn serving_requests_are_approved_only_for_the_nodes_own_addresses() {
        let ip = std::net::IpAddr::from([10, 0, 0, 5]);
        let sans = || vec![rcgen::SanType::DnsName("host1".try_into().unwrap()), rcgen::SanType::IpAddress(ip)];
        let own = serving_csr("system:node:n1", "system:node:n1", &["system:nodes"], sans());
        let Serving::Node { name, dns, ips } = recognize_serving(&own) else { panic!("recognized") };
        assert_eq!((name.as_str(), dns.as_slice(), ips.as_slice()), ("n1", &["host1".to_string()][..], &[ip][..]));
        let node: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "host1"}]}}))
            .unwrap();
        assert!(names_match_node(&node, &dns, &ips));
        assert!(!names_match_node(&node, &["other".into()], &ips));
        assert!(!names_match_node(&node, &dns, &[std::net::IpAddr::from([10, 0, 0, 6])]));
        // Someone else asking for the node's serving certificate is left to a person.
        let other = serving_csr("system:node:n1", "system:node:n2", &["system:nodes"], sans());
        assert_eq!(recognize_serving(&other), Serving::NotApplicable);
        let not_node = serving_csr("system:node:n1", "system:node:n1", &["ops"], sans());
        assert_eq!(recognize_serving(&not_node), Serving::NotApplicable);
    }
}
