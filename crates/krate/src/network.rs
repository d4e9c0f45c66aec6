//! Service networking in the krate binary: the cluster DNS server `krate server` runs
//! (behind the kube-dns Service, as CoreDNS is in k3s), and the service proxy each node
//! runs (kube-proxy's nftables mode).

use std::net::{IpAddr, SocketAddr};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Service;
use krate_agent::runtime::PodRuntime;
use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::Running;
use krate_net::dns::{DnsConfig, DnsServer};
use krate_net::netpol::{self, NetpolConfig, NetpolHandle};
use krate_net::podnet::{self, PodNetConfig, PodNetHandle};
use krate_net::proxy::{self, Ipv4Cidr, ProxyConfig, ProxyHandle};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::cli::ServerArgs;

const KUBE_SYSTEM: &str = "kube-system";
const DNS_SERVICE: &str = "kube-dns";
/// The identity the DNS server reads as: kubeadm's CoreDNS service account.
const DNS_ACCOUNT: &str = "coredns";
/// Field manager of the objects written here.
const MANAGER: &str = "krate-network";

fn in_process(running: &Running, user: UserInfo) -> kube::Client {
    kube::Client::new(InProcess::new(running.server.clone(), user), "default")
}

fn apiserver() -> UserInfo {
    UserInfo {
        name: "system:apiserver".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
        ..Default::default()
    }
}

/// Starts the cluster DNS server on `node_ip` and publishes it as kube-system/kube-dns
/// at `--cluster-dns`, with its reader's RBAC (kubeadm's system:coredns role).
pub async fn start_dns(running: &Running, args: &ServerArgs, node: &str, node_ip: IpAddr) -> anyhow::Result<DnsServer> {
    let admin = in_process(running, apiserver());
    publish_dns_rbac(&admin).await.context("publishing the cluster DNS server's RBAC")?;
    let client = in_process(running, UserInfo::service_account(KUBE_SYSTEM, DNS_ACCOUNT));
    let config = DnsConfig {
        listen: SocketAddr::new(node_ip, args.cluster_dns_port),
        zone: args.node.cluster_domain.clone(),
        ..Default::default()
    };
    let server = DnsServer::start(client, config).await?;
    let port = server.local_addr().port();
    publish_dns_service(&admin, args.node.cluster_dns, node, node_ip, port)
        .await
        .context("publishing the kube-dns Service")?;
    tracing::info!(listen = %server.local_addr(), cluster_ip = %args.node.cluster_dns, "cluster DNS serving");
    Ok(server)
}

fn dynamic(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn apply(api: &Api<DynamicObject>, name: &str, body: serde_json::Value) -> kube::Result<()> {
    api.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(body)).await.map(|_| ())
}

async fn publish_dns_rbac(admin: &kube::Client) -> kube::Result<()> {
    let rbac = "rbac.authorization.k8s.io/v1";
    let accounts = dynamic(admin, "", "v1", "ServiceAccount", "serviceaccounts", Some(KUBE_SYSTEM));
    apply(
        &accounts,
        DNS_ACCOUNT,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DNS_ACCOUNT, "namespace": KUBE_SYSTEM}}),
    )
    .await?;
    let role = json!({
        "apiVersion": rbac, "kind": "ClusterRole",
        "metadata": {"name": "system:coredns", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    });
    apply(
        &dynamic(admin, "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", None),
        "system:coredns",
        role,
    )
    .await?;
    let binding = json!({
        "apiVersion": rbac, "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:coredns", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
        "subjects": [{"kind": "ServiceAccount", "name": DNS_ACCOUNT, "namespace": KUBE_SYSTEM}],
    });
    let bindings = dynamic(admin, "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", None);
    apply(&bindings, "system:coredns", binding).await
}

/// The kube-dns Service (no selector: its endpoints are the DNS servers krate runs) and
/// this server's EndpointSlice in it.
async fn publish_dns_service(
    admin: &kube::Client,
    cluster_ip: IpAddr,
    node: &str,
    node_ip: IpAddr,
    port: u16,
) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(admin.clone(), KUBE_SYSTEM);
    let existing = services.get_opt(DNS_SERVICE).await?;
    let current_ip = existing.as_ref().and_then(|s| s.spec.as_ref()).and_then(|s| s.cluster_ip.clone());
    match current_ip {
        // A cluster IP cannot change; a Service made by hand with another one is kept.
        Some(ip) if ip != cluster_ip.to_string() => {
            tracing::warn!(%ip, wanted = %cluster_ip, "kube-system/kube-dns exists with another cluster IP; pods are told --cluster-dns")
        }
        _ => {
            let body = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": DNS_SERVICE, "namespace": KUBE_SYSTEM,
                             "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", "kubernetes.io/cluster-service": "true"}},
                "spec": {
                    "clusterIP": cluster_ip.to_string(),
                    "ports": [
                        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    ],
                },
            });
            let api = dynamic(admin, "", "v1", "Service", "services", Some(KUBE_SYSTEM));
            apply(&api, DNS_SERVICE, body).await?;
        }
    }
    let address_type = if node_ip.is_ipv4() { "IPv4" } else { "IPv6" };
    let name = format!("{DNS_SERVICE}-{node}");
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": KUBE_SYSTEM,
                     "labels": {"kubernetes.io/service-name": DNS_SERVICE, "endpointslice.kubernetes.io/managed-by": "krate"}},
        "addressType": address_type,
        "endpoints": [{"addresses": [node_ip.to_string()], "nodeName": node,
                       "conditions": {"ready": true, "serving": true, "terminating": false}}],
        "ports": [
            {"name": "dns", "port": port, "protocol": "UDP"},
            {"name": "dns-tcp", "port": port, "protocol": "TCP"},
        ],
    });
    let slices = dynamic(admin, "discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", Some(KUBE_SYSTEM));
    apply(&slices, &name, slice).await?;
    Ok(())
}

/// The first IPv4 range of a comma list of CIDRs.
fn first_ipv4(cidrs: &[String]) -> Option<Ipv4Cidr> {
    cidrs.iter().find_map(|c| c.trim().parse::<Ipv4Cidr>().ok())
}

/// What the service proxy of a node needs to know of the cluster.
pub struct ProxySettings<'a> {
    pub node: &'a str,
    pub node_ip: IpAddr,
    pub cluster_cidr: &'a [String],
    pub service_cidr: &'a str,
}

/// Starts this node's service proxy with the given client (it lists Services and
/// EndpointSlices cluster-wide: system:node-proxier's rights).
pub fn start_proxy(client: kube::Client, settings: ProxySettings<'_>) -> ProxyHandle {
    let mut config = ProxyConfig::new(settings.node);
    config.cluster_cidr = first_ipv4(settings.cluster_cidr);
    config.service_cidrs = first_ipv4(&[settings.service_cidr.to_string()]).into_iter().collect();
    config.node_ip = match settings.node_ip {
        IpAddr::V4(ip) => Some(ip),
        IpAddr::V6(_) => None,
    };
    proxy::start(client, config)
}

/// The in-process client the proxy of `krate server`'s own node reads with.
pub fn proxy_client(running: &Running) -> kube::Client {
    in_process(running, UserInfo::component("system:kube-proxy"))
}

/// Starts this node's part of the pod network (host-gw routes to the other nodes'
/// podCIDRs, masquerade of traffic leaving the cluster), and points the runtime's CNI
/// config at the node's podCIDR once node IPAM has given it one. None when no IPv4
/// cluster CIDR is configured.
pub fn start_pod_network(
    client: kube::Client,
    node: &str,
    cluster_cidr: &[String],
    runtime: Option<PodRuntime>,
) -> Option<PodNetHandle> {
    let Some(cidr) = first_ipv4(cluster_cidr) else {
        tracing::warn!(?cluster_cidr, "no IPv4 cluster CIDR: no routes between nodes' pods");
        return None;
    };
    let config = PodNetConfig::new(node, cidr);
    Some(podnet::start(client, config, move |pod_cidr: String| {
        let runtime = runtime.clone();
        async move {
            match runtime {
                Some(rt) => rt.set_pod_cidr(&pod_cidr).await,
                None => Ok(()),
            }
        }
    }))
}

/// The account NetworkPolicy enforcement reads as: every pod is a possible peer, so it
/// lists pods, namespaces and policies cluster-wide (more than a node may), as a CNI's
/// daemonset account does.
const NETPOL_ACCOUNT: &str = "krate-network-policy";

/// Starts NetworkPolicy enforcement for this node's pods, after publishing its reader's
/// RBAC (ClusterRole and binding krate:network-policy).
pub async fn start_network_policy(running: &Running, node: &str) -> anyhow::Result<NetpolHandle> {
    let admin = in_process(running, apiserver());
    let accounts = dynamic(&admin, "", "v1", "ServiceAccount", "serviceaccounts", Some(KUBE_SYSTEM));
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": NETPOL_ACCOUNT, "namespace": KUBE_SYSTEM}});
    apply(&accounts, NETPOL_ACCOUNT, account).await?;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "krate:network-policy"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]},
        ],
    });
    let roles = dynamic(&admin, "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", None);
    apply(&roles, "krate:network-policy", role).await?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "krate:network-policy"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "krate:network-policy"},
        "subjects": [{"kind": "ServiceAccount", "name": NETPOL_ACCOUNT, "namespace": KUBE_SYSTEM}],
    });
    let bindings =
        dynamic(&admin, "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", None);
    apply(&bindings, "krate:network-policy", binding).await?;
    let client = in_process(running, UserInfo::service_account(KUBE_SYSTEM, NETPOL_ACCOUNT));
    Ok(netpol::start(client, NetpolConfig::new(node)))
}
