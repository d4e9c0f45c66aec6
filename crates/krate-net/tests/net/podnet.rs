//! The pod network (host-gw) with real traffic. Each test builds its own network
//! namespaces: two "hosts" A and B on one link (172.31.255.1 and .2), each with a
//! "pod" behind a veth (10.42.0.2 on A, 10.42.1.2 on B, the host ends .1), and an
//! "outside" host beyond A (198.51.100.2) that has no route to the pods. One podnet
//! loop per host programs it through `ip netns exec HOST ...`, fed by Nodes in a real
//! API server. Nothing touches the host's own network or nftables; every namespace is
//! deleted when its guard drops, also when a test fails.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use krate_api::user::UserInfo;
use krate_net::podnet::{self, Ipv4Cidr, PodNetConfig, PodNetHandle, SyncReport};
use krate_net::proxy::Nft;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::netns::{Netns, Servers, server_and_peer};

const WAIT: Duration = Duration::from_secs(30);
const CLUSTER_CIDR: &str = "10.42.0.0/16";
const HOST_A: &str = "172.31.255.1";
const HOST_B: &str = "172.31.255.2";
const UPLINK_A: &str = "198.51.100.1";
const OUTSIDE: &str = "198.51.100.2";
const POD_A: &str = "10.42.0.2";
const POD_B: &str = "10.42.1.2";
const TABLE: &str = "krate-podnet";

/// Our routes in `ns` (protocol 75), one a line.
fn podnet_routes(ns: &Netns) -> String {
    ns.ip(&["-4", "route", "show", "table", "main", "proto", "75"])
}

fn ip_forward(ns: &Netns) -> String {
    ns.exec(&["cat", "/proc/sys/net/ipv4/ip_forward"]).trim().to_string()
}

/// Hosts A and B, a pod on each, and an outside host beyond A. Forwarding starts off
/// on both hosts: switching it on is the loop's job.
struct Topology {
    host_a: Netns,
    host_b: Netns,
    pod_a: Netns,
    pod_b: Netns,
    outside: Netns,
}

impl Topology {
    fn new() -> Topology {
        let t = Topology {
            host_a: Netns::new("host-a"),
            host_b: Netns::new("host-b"),
            pod_a: Netns::new("pod-a"),
            pod_b: Netns::new("pod-b"),
            outside: Netns::new("outside"),
        };
        // A /29, so a test can move B's address to .3 and back.
        t.host_a.link("link-b", &format!("{HOST_A}/29"), &t.host_b, "link-a", &format!("{HOST_B}/29"));
        t.host_a.link("pod0", "10.42.0.1/24", &t.pod_a, "eth0", &format!("{POD_A}/24"));
        t.host_b.link("pod0", "10.42.1.1/24", &t.pod_b, "eth0", &format!("{POD_B}/24"));
        t.host_a.link("uplink", &format!("{UPLINK_A}/24"), &t.outside, "eth0", &format!("{OUTSIDE}/24"));
        t.pod_a.ip(&["route", "add", "default", "via", "10.42.0.1"]);
        t.pod_b.ip(&["route", "add", "default", "via", "10.42.1.1"]);
        for host in [&t.host_a, &t.host_b] {
            host.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=0"]);
        }
        t
    }
}

/// Connects from `from` to `addr:8080` and returns the answer's words (server, peer).
async fn connect(from: &Netns, addr: &str) -> std::io::Result<(String, String)> {
    let addr: SocketAddr = format!("{addr}:8080").parse().expect("address");
    let thread = from.dial(addr, Duration::from_secs(1), Duration::from_secs(2));
    let answer = tokio::task::spawn_blocking(move || thread.join().expect("client thread")).await.expect("join")?;
    Ok(server_and_peer(&answer))
}

/// Waits until `from` reaches `server` at `addr` and gives the peer address it saw.
async fn reach(from: &Netns, addr: &str, server: &str) -> String {
    eventually(&format!("{server} at {addr} answering"), WAIT, || async move {
        match connect(from, addr).await {
            Ok((name, peer)) if name == server => Some(peer),
            _ => None,
        }
    })
    .await
}

fn node(name: &str, pod_cidr: Option<&str>) -> Node {
    let spec = match pod_cidr {
        Some(c) => json!({"podCIDR": c, "podCIDRs": [c]}),
        None => json!({}),
    };
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn set_internal_ip(nodes: &Api<Node>, name: &str, ip: &str) {
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.expect("patch node status");
}

async fn create_node(nodes: &Api<Node>, name: &str, pod_cidr: Option<&str>, ip: &str) {
    nodes.create(&PostParams::default(), &node(name, pod_cidr)).await.expect("create node");
    set_internal_ip(nodes, name, ip).await;
}

/// The callback's calls, and whether it should refuse the next few.
#[derive(Clone, Default)]
struct Calls {
    seen: Arc<parking_lot::Mutex<Vec<String>>>,
    refuse: Arc<AtomicUsize>,
}

impl Calls {
    fn start(&self, client: kube::Client, config: PodNetConfig) -> PodNetHandle {
        let calls = self.clone();
        podnet::start(client, config, move |cidr: String| {
            let calls = calls.clone();
            async move {
                calls.seen.lock().push(cidr);
                let refused = calls.refuse.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
                if refused.is_ok() { Err("refused by the test".to_string()) } else { Ok(()) }
            }
        })
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().clone()
    }
}

fn config(node: &str, host: &Netns) -> PodNetConfig {
    let mut config = PodNetConfig::new(node, CLUSTER_CIDR.parse().unwrap()).in_netns(&host.name);
    config.retry_interval = Duration::from_millis(300);
    config
}

/// The first report that `pred` accepts (the watch keeps only the latest, which is
/// what a converged loop shows).
async fn wait_report(handle: &PodNetHandle, what: &str, pred: impl Fn(&SyncReport) -> bool) -> Arc<SyncReport> {
    let mut reports = handle.reports();
    let found = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(report) = reports.borrow_and_update().clone().filter(|r| pred(r)) {
                return report;
            }
            reports.changed().await.expect("the loop runs");
        }
    })
    .await;
    found
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}; last report: {:#?}", reports.borrow()))
}

fn cidr(s: &str) -> Ipv4Cidr {
    s.parse().unwrap()
}

/// Two hosts driven by their own loops from real Nodes: routes, kept pod sources,
/// masquerading out of the cluster, the callback, an unreachable node reported, a
/// foreign route left alone, a stale route of ours removed, a moved and a deleted
/// node followed, and everything removed on stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_route_pods_and_masquerade_leaving_traffic() {
    let t = Topology::new();
    let _pod_b = Servers::start(&t.pod_b, "0.0.0.0", &[8080], "pod-b");
    let _outside = Servers::start(&t.outside, "0.0.0.0", &[8080], "outside");
    // A stale route of ours (as after a crash), and someone else's route for a
    // podCIDR a Node will claim.
    t.host_a.ip(&["route", "add", "10.42.9.0/24", "via", HOST_B, "proto", "75"]);
    t.host_a.ip(&["route", "add", "10.42.3.0/24", "via", HOST_B, "proto", "static"]);

    let cluster = TestCluster::start().await;
    let admin = cluster.admin().await;
    let nodes: Api<Node> = Api::all(admin);
    create_node(&nodes, "podnet-a", Some("10.42.0.0/24"), HOST_A).await;
    create_node(&nodes, "podnet-b", Some("10.42.1.0/24"), HOST_B).await;
    create_node(&nodes, "podnet-far", Some("10.42.2.0/24"), "203.0.113.9").await; // not on A's links
    create_node(&nodes, "podnet-foreign", Some("10.42.3.0/24"), HOST_B).await;
    create_node(&nodes, "podnet-new", None, "172.31.255.4").await; // no podCIDR yet

    // Nothing crosses before the loops run.
    assert!(connect(&t.pod_a, POD_B).await.is_err(), "no route, no forwarding yet");

    // As kube-proxy's identity: system:node-proxier may list and watch Nodes.
    let proxier = || cluster.client_as(UserInfo::component("system:kube-proxy"));
    let (calls_a, calls_b) = (Calls::default(), Calls::default());
    calls_b.refuse.store(1, Ordering::SeqCst); // B's first callback fails and is retried
    let mut config_a = config("podnet-a", &t.host_a);
    config_a.resync_interval = Duration::from_secs(1);
    let net_a = calls_a.start(proxier(), config_a);
    let net_b = calls_b.start(proxier(), config("podnet-b", &t.host_b));

    // This node's podCIDR, through the callback.
    let own_a = tokio::time::timeout(WAIT, net_a.wait_pod_cidr()).await.expect("A's podCIDR in time");
    assert_eq!(own_a, Some(cidr("10.42.0.0/24")));
    assert_eq!(calls_a.seen(), ["10.42.0.0/24"]);
    let own_b = tokio::time::timeout(WAIT, net_b.wait_pod_cidr()).await.expect("B's podCIDR in time");
    assert_eq!(own_b, Some(cidr("10.42.1.0/24")));
    assert_eq!(calls_b.seen(), ["10.42.1.0/24", "10.42.1.0/24"], "refused once, then retried");

    let report = wait_report(&net_a, "A routing to B", |r| r.routes.contains_key(&cidr("10.42.1.0/24"))).await;
    assert_eq!(report.routes.keys().copied().collect::<Vec<_>>(), [cidr("10.42.1.0/24")], "{report:#?}");
    assert_eq!(report.own_pod_cidr, Some(cidr("10.42.0.0/24")));
    let failed: Vec<(&str, Ipv4Cidr)> = report.failed.iter().map(|f| (f.target.node.as_str(), f.cidr)).collect();
    assert_eq!(failed, [("podnet-far", cidr("10.42.2.0/24"))], "{report:#?}");
    assert!(report.failed[0].error.contains("invalid gateway"), "{:?}", report.failed[0].error);
    let skipped: Vec<&str> = report.skipped.iter().map(|s| s.node.as_str()).collect();
    assert_eq!(skipped, ["podnet-new", "podnet-foreign"], "{report:#?}");
    assert!(report.skipped[1].reason.contains("does not own"), "{report:#?}");
    assert!(report.errors.is_empty(), "{report:#?}");

    let routes_a = podnet_routes(&t.host_a);
    assert!(routes_a.contains(&format!("10.42.1.0/24 via {HOST_B} dev link-b")), "{routes_a}");
    assert!(!routes_a.contains("10.42.9.0"), "the stale route of ours is gone: {routes_a}");
    assert!(!routes_a.contains("10.42.2.0"), "{routes_a}");
    let static_route = t.host_a.ip(&["-4", "route", "show", "10.42.3.0/24"]);
    assert!(static_route.contains("proto static"), "the foreign route is untouched: {static_route}");
    wait_report(&net_b, "B routing to A", |r| r.routes.contains_key(&cidr("10.42.0.0/24"))).await;
    assert_eq!((ip_forward(&t.host_a), ip_forward(&t.host_b)), ("1".into(), "1".into()));
    for host in [&t.host_a, &t.host_b] {
        assert!(host.tables().contains(TABLE), "{}", host.tables());
    }
    let families: Vec<String> = prometheus::gather().iter().map(|f| f.name().to_string()).collect();
    for name in ["krate_podnet_routes", "krate_podnet_route_failures", "krate_podnet_sync_errors_total"] {
        assert!(families.iter().any(|f| f == name), "{name} registered: {families:?}");
    }

    // Pod to pod across hosts keeps its source; leaving the cluster is masqueraded.
    assert_eq!(reach(&t.pod_a, POD_B, "pod-b").await, POD_A, "pod-to-pod keeps the source IP");
    assert_eq!(reach(&t.pod_a, OUTSIDE, "outside").await, UPLINK_A, "masqueraded as host A");

    // B's node moves to another address on the link: A's route follows, and back.
    set_internal_ip(&nodes, "podnet-b", "172.31.255.3").await;
    wait_report(&net_a, "A's route via .3", |r| {
        r.routes.get(&cidr("10.42.1.0/24")).is_some_and(|t| t.gateway.to_string() == "172.31.255.3")
    })
    .await;
    assert!(podnet_routes(&t.host_a).contains("10.42.1.0/24 via 172.31.255.3"), "{}", podnet_routes(&t.host_a));
    set_internal_ip(&nodes, "podnet-b", HOST_B).await;
    wait_report(&net_a, "A's route via .2 again", |r| {
        r.routes.get(&cidr("10.42.1.0/24")).is_some_and(|t| t.gateway.to_string() == HOST_B)
    })
    .await;
    assert_eq!(reach(&t.pod_a, POD_B, "pod-b").await, POD_A);

    // A route the kernel loses (its link went down and up, say) comes back at the
    // next resync; a deleted Node's route goes at once.
    t.host_a.ip(&["route", "del", "10.42.1.0/24", "proto", "75"]);
    eventually("the lost route restored", WAIT, || async {
        podnet_routes(&t.host_a).contains("10.42.1.0/24 via 172.31.255.2").then_some(())
    })
    .await;
    nodes.delete("podnet-b", &DeleteParams::default()).await.expect("delete node");
    wait_report(&net_a, "A's route to B gone", |r| !r.routes.contains_key(&cidr("10.42.1.0/24"))).await;
    let routes_a = podnet_routes(&t.host_a);
    assert!(!routes_a.contains("10.42.1.0/24"), "{routes_a}");
    assert!(connect(&t.pod_a, POD_B).await.is_err(), "no route to B's pods any more");

    tokio::time::timeout(WAIT, net_a.stop()).await.expect("A stops in time").expect("A stops cleanly");
    tokio::time::timeout(WAIT, net_b.stop()).await.expect("B stops in time").expect("B stops cleanly");
    for host in [&t.host_a, &t.host_b] {
        assert_eq!(podnet_routes(host).trim(), "", "no routes of ours left");
        assert!(!host.tables().contains(TABLE), "table removed: {}", host.tables());
    }
    let static_route = t.host_a.ip(&["-4", "route", "show", "10.42.3.0/24"]);
    assert!(static_route.contains("proto static"), "the foreign route survives stop: {static_route}");
    assert!(connect(&t.pod_a, OUTSIDE).await.is_err(), "no masquerading after stop");
}

/// The rules script as `nft` itself takes it, in a fresh namespace: checked, applied,
/// rebuilt in place, and deleted by cleanup.
#[tokio::test]
async fn rules_are_accepted_by_nft_and_rebuilt_in_place() {
    let ns = Netns::new("rules");
    let config = PodNetConfig::new("a", CLUSTER_CIDR.parse().unwrap()).in_netns(&ns.name);
    let nft = Nft::new(config.nft_command.clone(), Duration::from_secs(30));
    let before = podnet::render(&config, None);
    let after = podnet::render(&config, Some(cidr("10.42.0.0/24")));
    for script in [&before, &after] {
        nft.check(script).await.unwrap_or_else(|e| panic!("{e}\n{script}"));
    }
    nft.apply(&before).await.expect("apply");
    nft.apply(&after).await.expect("rebuild over an existing table");
    let listed = ns.exec(&["nft", "list", "table", "ip", TABLE]);
    assert!(listed.contains("type nat hook postrouting priority srcnat; policy accept;"), "{listed}");
    assert!(listed.contains("ip saddr != 10.42.0.0/16 ip daddr 10.42.0.0/24 return"), "{listed}");
    assert!(listed.contains("ip saddr 10.42.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random"), "{listed}");
    assert_eq!(listed.matches("masquerade").count(), 2, "rebuilt, not appended: {listed}");
    assert!(listed.contains("ip daddr 10.42.0.0/16 accept"), "{listed}");

    podnet::enable_ip_forward(&config.ip_forward, Duration::from_secs(10)).await.expect("sysctl");
    assert_eq!(ip_forward(&ns), "1");
    podnet::cleanup(&config).await.expect("cleanup");
    assert!(!ns.tables().contains(TABLE));
    podnet::cleanup(&config).await.expect("cleanup of nothing is fine");
}

/// A node's own identity may read only its own Node (the Node authorizer), so it
/// cannot run the loop: the loop waits for a list that never comes, installs nothing,
/// and still removes its leftovers on stop. system:kube-proxy may list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_identity_cannot_list_nodes_and_stop_still_cleans_up() {
    let cluster = TestCluster::start().await;
    let admin = cluster.admin().await;
    let nodes: Api<Node> = Api::all(admin);
    create_node(&nodes, "podnet-a", Some("10.42.0.0/24"), HOST_A).await;
    let node_user = UserInfo {
        name: "system:node:podnet-a".into(),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        ..Default::default()
    };
    let as_node: Api<Node> = Api::all(cluster.client_as(node_user.clone()));
    let denied = as_node.list(&Default::default()).await.expect_err("a node cannot list Nodes");
    assert!(matches!(&denied, kube::Error::Api(e) if e.code == 403), "{denied}");
    let as_proxier: Api<Node> = Api::all(cluster.client_as(UserInfo::component("system:kube-proxy")));
    assert_eq!(as_proxier.list(&Default::default()).await.expect("kube-proxy lists Nodes").items.len(), 1);

    let ns = Netns::new("denied");
    ns.ip(&["link", "add", "link0", "type", "veth", "peer", "name", "link1"]);
    ns.ip(&["addr", "add", &format!("{HOST_A}/29"), "dev", "link0"]);
    ns.ip(&["link", "set", "link0", "up"]);
    ns.ip(&["link", "set", "link1", "up"]);
    ns.ip(&["route", "add", "10.42.9.0/24", "via", HOST_B, "proto", "75"]);
    let net = podnet::start(cluster.client_as(node_user), config("podnet-a", &ns), |_cidr: String| async {
        Ok::<(), Infallible>(())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(net.reports().borrow().is_none(), "no sync without the Node list");
    assert_eq!(*net.pod_cidr().borrow(), None);
    tokio::time::timeout(WAIT, net.stop()).await.expect("stops in time").expect("stops cleanly");
    assert_eq!(podnet_routes(&ns).trim(), "", "leftover routes removed");
}
