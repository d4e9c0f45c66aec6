//! The pod network's settings: which node this is, the cluster CIDR, and where and how
//! to run `ip`, `nft` and the forwarding switch.

use std::time::Duration;

use crate::nft::check_table_name;
use crate::proxy::Ipv4Cidr;

/// The route protocol number marking krate's routes (`proto 75`, "K"): unassigned in
/// iproute2's rt_protos, so no routing daemon uses it.
pub const ROUTE_PROTOCOL: u8 = 75;

/// The packet mark bit kube-proxy (and krate's proxy, by default) sets on traffic it
/// will masquerade itself: such traffic is left alone here.
pub const KUBE_PROXY_MASQUERADE_MARK: u32 = 1 << 14;

/// How `net.ipv4.ip_forward` is switched on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpForward {
    /// Not at all: the host is configured already.
    Leave,
    /// By writing `1` to /proc/sys/net/ipv4/ip_forward in this process's network
    /// namespace.
    Proc,
    /// By running this command with `-w net.ipv4.ip_forward=1` appended, e.g.
    /// `["ip", "netns", "exec", "node", "sysctl"]`.
    Sysctl(Vec<String>),
}

/// One node's pod network, host-gw style. `PodNetConfig::new(node, cluster_cidr)`
/// gives the defaults; set the fields that differ.
#[derive(Clone, Debug)]
pub struct PodNetConfig {
    /// This node's name: its own podCIDR goes to the callback, every other node's
    /// becomes a route.
    pub node_name: String,
    /// The pod network of the whole cluster (`--cluster-cidr`): pod traffic leaving it
    /// is masqueraded, and other nodes' podCIDRs outside it are not routed.
    pub cluster_cidr: Ipv4Cidr,
    /// The command that runs `ip`, e.g. `["ip", "-n", "node"]`; `-4 route ...` is
    /// appended.
    pub ip_command: Vec<String>,
    /// The command that runs `nft`, e.g. `["ip", "netns", "exec", "node", "nft"]`.
    pub nft_command: Vec<String>,
    /// The `ip` family nft table holding the masquerade and forward rules, created and
    /// deleted whole.
    pub table: String,
    /// The route protocol number marking the routes this loop owns: it lists,
    /// replaces and deletes routes with this protocol only.
    pub route_protocol: u8,
    /// Masquerade pod traffic leaving the cluster CIDR (flannel's `--ip-masq`).
    pub masquerade: bool,
    /// Traffic carrying this mark is left to the service proxy's own masquerading.
    pub kube_proxy_mark: Option<u32>,
    /// How IP forwarding gets switched on.
    pub ip_forward: IpForward,
    /// The shortest time between two syncs; node changes inside it are batched.
    pub min_sync_interval: Duration,
    /// How often routes and rules are checked against the kernel without any change
    /// (routes vanish when their link goes down, for one).
    pub resync_interval: Duration,
    /// How soon a failed step (a route, the table, the callback) is retried.
    pub retry_interval: Duration,
    /// How long one `ip`, `nft` or `sysctl` run may take.
    pub command_timeout: Duration,
}

impl PodNetConfig {
    pub fn new(node_name: impl Into<String>, cluster_cidr: Ipv4Cidr) -> PodNetConfig {
        PodNetConfig {
            node_name: node_name.into(),
            cluster_cidr,
            ip_command: vec!["ip".into()],
            nft_command: vec!["nft".into()],
            table: "krate-podnet".into(),
            route_protocol: ROUTE_PROTOCOL,
            masquerade: true,
            kube_proxy_mark: Some(KUBE_PROXY_MASQUERADE_MARK),
            ip_forward: IpForward::Proc,
            min_sync_interval: Duration::from_millis(100),
            resync_interval: Duration::from_secs(30),
            retry_interval: Duration::from_secs(5),
            command_timeout: Duration::from_secs(30),
        }
    }

    /// Every command placed in another network namespace, as `ip netns exec NS ...`
    /// does: what tests and single-host simulations use.
    pub fn in_netns(mut self, netns: &str) -> PodNetConfig {
        let exec = |program: &str| ["ip", "netns", "exec", netns, program].map(String::from).to_vec();
        self.ip_command = exec("ip");
        self.nft_command = exec("nft");
        self.ip_forward = IpForward::Sysctl(exec("sysctl"));
        self
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        check_table_name(&self.table)?;
        if self.node_name.is_empty() {
            return Err("node_name is empty".into());
        }
        if self.ip_command.is_empty() {
            return Err("ip_command is empty".into());
        }
        if self.nft_command.is_empty() {
            return Err("nft_command is empty".into());
        }
        if matches!(&self.ip_forward, IpForward::Sysctl(c) if c.is_empty()) {
            return Err("the sysctl command is empty".into());
        }
        // 0 is "unspec" (matches everything when deleting); 1-4 are the kernel's own.
        if self.route_protocol <= 4 {
            return Err(format!("route protocol {} is reserved", self.route_protocol));
        }
        Ok(())
    }
}
