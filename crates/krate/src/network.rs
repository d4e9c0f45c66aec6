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

use crate::cli::{FlannelBackend, NodeArgs, ServerArgs};

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
/// at `--cluster-dns` (its RBAC comes from `publish_rbac`).
pub async fn start_dns(running: &Running, args: &ServerArgs, node: &str, node_ip: IpAddr) -> anyhow::Result<DnsServer> {
    let admin = in_process(running, apiserver());
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

const RBAC: &str = "rbac.authorization.k8s.io";

async fn cluster_role(admin: &kube::Client, name: &str, rules: serde_json::Value) -> kube::Result<()> {
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": {"name": name}, "rules": rules});
    apply(&dynamic(admin, RBAC, "v1", "ClusterRole", "clusterroles", None), name, role).await
}

async fn cluster_binding(admin: &kube::Client, name: &str, role: &str, subject: serde_json::Value) -> kube::Result<()> {
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                         "metadata": {"name": name},
                         "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
                         "subjects": [subject]});
    apply(&dynamic(admin, RBAC, "v1", "ClusterRoleBinding", "clusterrolebindings", None), name, binding).await
}

async fn service_account(admin: &kube::Client, name: &str) -> kube::Result<()> {
    let accounts = dynamic(admin, "", "v1", "ServiceAccount", "serviceaccounts", Some(KUBE_SYSTEM));
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": KUBE_SYSTEM}});
    apply(&accounts, name, account).await
}

/// The group of nodes' networking identities (`krate:node-network:NAME`, approved by
/// csrapproving for the node itself).
const NODE_NETWORK: &str = "krate:node-network";

/// The networking readers' RBAC: the cluster DNS server's (kubeadm's system:coredns),
/// NetworkPolicy enforcement's (krate:network-policy: every pod is a possible peer), and
/// nodes' networking identities, which get both system:node-proxier and
/// krate:network-policy.
pub async fn publish_rbac(running: &Running) -> anyhow::Result<()> {
    let admin = in_process(running, apiserver());
    let publish = async {
        service_account(&admin, DNS_ACCOUNT).await?;
        let dns_rules = json!([
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ]);
        cluster_role(&admin, "system:coredns", dns_rules).await?;
        let dns_account = json!({"kind": "ServiceAccount", "name": DNS_ACCOUNT, "namespace": KUBE_SYSTEM});
        cluster_binding(&admin, "system:coredns", "system:coredns", dns_account).await?;

        service_account(&admin, NETPOL_ACCOUNT).await?;
        let netpol_rules = json!([
            {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch"]},
        ]);
        cluster_role(&admin, "krate:network-policy", netpol_rules).await?;
        let netpol_account = json!({"kind": "ServiceAccount", "name": NETPOL_ACCOUNT, "namespace": KUBE_SYSTEM});
        cluster_binding(&admin, "krate:network-policy", "krate:network-policy", netpol_account).await?;

        let nodes = json!({"apiGroup": RBAC, "kind": "Group", "name": NODE_NETWORK});
        cluster_binding(&admin, "krate:node-network-proxier", "system:node-proxier", nodes.clone()).await?;
        cluster_binding(&admin, "krate:node-network-policy", "krate:network-policy", nodes).await
    };
    publish.await.context("publishing the networking components' RBAC")
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

/// The account NetworkPolicy enforcement reads as: every pod is a possible peer, so it
/// lists pods, namespaces and policies cluster-wide (more than a node may), as a CNI's
/// daemonset account does.
const NETPOL_ACCOUNT: &str = "krate-network-policy";

/// This node's part of the pod network (host-gw routes to the other nodes' podCIDRs,
/// masquerade of traffic leaving the cluster); the runtime's CNI config follows the
/// node's podCIDR once node IPAM has given it one. None without an IPv4 cluster CIDR.
fn start_pod_network(
    client: kube::Client,
    node: &str,
    cluster_cidr: &[String],
    runtime: Option<PodRuntime>,
) -> Option<PodNetHandle> {
    let Some(cidr) = first_ipv4(cluster_cidr) else {
        tracing::warn!(?cluster_cidr, "no IPv4 cluster CIDR: no routes between nodes' pods");
        return None;
    };
    Some(podnet::start(client, PodNetConfig::new(node, cidr), move |pod_cidr: String| {
        let runtime = runtime.clone();
        async move {
            match runtime {
                Some(rt) => rt.set_pod_cidr(&pod_cidr).await,
                None => Ok(()),
            }
        }
    }))
}

/// What a node's networking needs to know of the cluster and which parts run.
pub struct NodeNetworkSettings {
    pub node: String,
    pub node_ip: IpAddr,
    pub cluster_cidr: Vec<String>,
    pub service_cidr: String,
    pub proxy: bool,
    pub pod_network: bool,
    pub network_policy: bool,
}

impl NodeNetworkSettings {
    pub fn new(node: &str, node_ip: IpAddr, args: &NodeArgs, cluster_cidr: &[String], service_cidr: &str) -> Self {
        NodeNetworkSettings {
            node: node.to_string(),
            node_ip,
            cluster_cidr: cluster_cidr.to_vec(),
            service_cidr: service_cidr.to_string(),
            proxy: !args.disable_kube_proxy,
            pod_network: args.flannel_backend == FlannelBackend::HostGw,
            network_policy: !args.disable_network_policy,
        }
    }

    fn any(&self) -> bool {
        self.proxy || self.pod_network || self.network_policy
    }
}

/// A node's networking loops: the service proxy, the pod network's routes and rules,
/// and NetworkPolicy enforcement; stopping them removes what they put on the node.
#[derive(Default)]
pub struct NodeNetwork {
    proxy: Option<ProxyHandle>,
    podnet: Option<PodNetHandle>,
    netpol: Option<NetpolHandle>,
}

impl NodeNetwork {
    /// Starts the parts `settings` asks for: the proxy and the pod network read with
    /// `reader` (system:node-proxier's rights), policies with `policy_reader`
    /// (krate:network-policy's).
    pub fn start(
        reader: kube::Client,
        policy_reader: kube::Client,
        settings: &NodeNetworkSettings,
        runtime: Option<PodRuntime>,
    ) -> NodeNetwork {
        let proxy = settings.proxy.then(|| {
            let mut config = ProxyConfig::new(&settings.node);
            config.cluster_cidr = first_ipv4(&settings.cluster_cidr);
            config.service_cidrs = first_ipv4(std::slice::from_ref(&settings.service_cidr)).into_iter().collect();
            config.node_ip = match settings.node_ip {
                IpAddr::V4(ip) => Some(ip),
                IpAddr::V6(_) => None,
            };
            proxy::start(reader.clone(), config)
        });
        let podnet = if settings.pod_network {
            start_pod_network(reader, &settings.node, &settings.cluster_cidr, runtime)
        } else {
            None
        };
        let netpol = settings.network_policy.then(|| netpol::start(policy_reader, NetpolConfig::new(&settings.node)));
        NodeNetwork { proxy, podnet, netpol }
    }

    /// `krate server`'s own node: in-process clients as system:kube-proxy and as the
    /// krate-network-policy account.
    pub fn start_in_server(running: &Running, settings: &NodeNetworkSettings, runtime: Option<PodRuntime>) -> Self {
        let reader = in_process(running, UserInfo::component("system:kube-proxy"));
        let policy_reader = in_process(running, UserInfo::service_account(KUBE_SYSTEM, NETPOL_ACCOUNT));
        NodeNetwork::start(reader, policy_reader, settings, runtime)
    }

    /// Stops every loop; each removes its own table or routes.
    pub async fn stop(self) {
        if let Some(proxy) = self.proxy
            && let Err(error) = proxy.stop().await
        {
            tracing::warn!(%error, "removing the service proxy's rules");
        }
        if let Some(netpol) = self.netpol
            && let Err(error) = netpol.stop().await
        {
            tracing::warn!(%error, "removing the network policy rules");
        }
        if let Some(podnet) = self.podnet
            && let Err(error) = podnet.stop().await
        {
            tracing::warn!(%error, "removing the pod network's routes and rules");
        }
    }
}

/// A joined agent's networking: obtains the node's networking identity (a CSR that
/// csrapproving approves for the node itself), then runs [`NodeNetwork`] with it until
/// stopped. In the background, so a slow approval never holds up the node.
pub struct JoinedNodeNetwork {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl JoinedNodeNetwork {
    pub fn start(
        server: String,
        node_client: kube::Client,
        ca_pem: String,
        data_dir: std::path::PathBuf,
        settings: NodeNetworkSettings,
        runtime: Option<PodRuntime>,
    ) -> Option<JoinedNodeNetwork> {
        if !settings.any() {
            return None;
        }
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let identity = tokio::select! {
                got = krate_agent::bootstrap::network_certificate(&node_client, &settings.node, &data_dir) => got,
                _ = &mut stopped => return,
            };
            let client = identity.map_err(anyhow::Error::from).and_then(|client| {
                let creds = krate_agent::bootstrap::NodeCredentials { ca_pem, client };
                krate_agent::bootstrap::node_client(&server, &creds).map_err(anyhow::Error::from)
            });
            let client = match client {
                Ok(c) => c,
                Err(error) => {
                    let error = format!("{error:#}");
                    tracing::error!(error, "no networking identity: no service proxy, routes or policies on this node");
                    return;
                }
            };
            let network = NodeNetwork::start(client.clone(), client, &settings, runtime);
            let _ = stopped.await;
            network.stop().await;
        });
        Some(JoinedNodeNetwork { stop, task })
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), self.task).await;
    }
}
