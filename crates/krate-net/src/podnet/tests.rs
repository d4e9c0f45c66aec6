//! Route planning and the rules script, pure.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;
use serde_json::json;

use super::*;

fn cidr(s: &str) -> Ipv4Cidr {
    s.parse().unwrap()
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn node(name: &str, pod_cidr: Option<&str>, internal_ip: Option<&str>) -> Node {
    let mut spec = json!({});
    if let Some(c) = pod_cidr {
        spec = json!({"podCIDR": c, "podCIDRs": [c]});
    }
    let mut addresses = vec![json!({"type": "Hostname", "address": name})];
    if let Some(ip) = internal_ip {
        addresses.push(json!({"type": "ExternalIP", "address": "203.0.113.77"}));
        addresses.push(json!({"type": "InternalIP", "address": ip}));
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec, "status": {"addresses": addresses}}))
        .unwrap()
}

fn config() -> PodNetConfig {
    PodNetConfig::new("a", cidr("10.42.0.0/16"))
}

fn target(gateway: &str, node: &str) -> RouteTarget {
    RouteTarget { gateway: ip(gateway), node: node.into() }
}

fn skipped(d: &Desired) -> BTreeMap<String, String> {
    d.skipped.iter().map(|s| (s.node.clone(), s.reason.clone())).collect()
}

#[test]
fn other_nodes_with_cidr_and_address_become_routes() {
    let nodes = [
        node("c", Some("10.42.2.0/24"), Some("192.168.1.3")),
        node("a", Some("10.42.0.0/24"), Some("192.168.1.1")),
        node("b", Some("10.42.1.0/24"), Some("192.168.1.2")),
        node("no-cidr", None, Some("192.168.1.4")),
        node("no-ip", Some("10.42.5.0/24"), None),
        node("outside", Some("10.99.0.0/24"), Some("192.168.1.6")),
        node("mine-too", Some("10.42.0.128/25"), Some("192.168.1.7")),
        node("z-dup", Some("10.42.1.0/24"), Some("192.168.1.8")),
    ];
    let d = desired(&nodes, &config());
    assert_eq!(d.own_pod_cidr, Some(cidr("10.42.0.0/24")));
    let want: BTreeMap<Ipv4Cidr, RouteTarget> =
        [(cidr("10.42.1.0/24"), target("192.168.1.2", "b")), (cidr("10.42.2.0/24"), target("192.168.1.3", "c"))].into();
    assert_eq!(d.routes, want, "own node excluded, the InternalIP (not the ExternalIP) is the gateway");
    let skipped = skipped(&d);
    assert_eq!(
        skipped.keys().map(String::as_str).collect::<Vec<_>>(),
        ["mine-too", "no-cidr", "no-ip", "outside", "z-dup"]
    );
    assert!(skipped["no-cidr"].contains("no IPv4 podCIDR"), "{skipped:?}");
    assert!(skipped["no-ip"].contains("InternalIP"), "{skipped:?}");
    assert!(skipped["outside"].contains("outside the cluster CIDR"), "{skipped:?}");
    assert!(skipped["mine-too"].contains("overlaps this node's own"), "{skipped:?}");
    assert!(skipped["z-dup"].contains("of node b"), "{skipped:?}");
}

#[test]
fn dual_stack_nodes_route_their_ipv4_range() {
    let mut n = node("b", None, Some("192.168.1.2"));
    n.spec = Some(
        serde_json::from_value(json!({"podCIDR": "fd00:42::/64", "podCIDRs": ["fd00:42::/64", "10.42.1.0/24"]}))
            .unwrap(),
    );
    assert_eq!(pod_cidr(&n), Ok(Some(cidr("10.42.1.0/24"))));
    let d = desired([&n], &config());
    assert_eq!(d.routes.keys().copied().collect::<Vec<_>>(), [cidr("10.42.1.0/24")]);
    assert_eq!(d.own_pod_cidr, None, "no own Node yet");

    n.spec = Some(serde_json::from_value(json!({"podCIDRs": ["fd00:42::/64"]})).unwrap());
    assert_eq!(pod_cidr(&n), Ok(None), "IPv6 only: nothing to route");
    n.spec = Some(serde_json::from_value(json!({"podCIDR": "bogus"})).unwrap());
    assert!(pod_cidr(&n).is_err());
}

#[test]
fn changes_become_replaces_and_deletes_of_our_routes_only() {
    let desired: BTreeMap<Ipv4Cidr, RouteTarget> = [
        (cidr("10.42.1.0/24"), target("192.168.1.2", "b")),  // unchanged
        (cidr("10.42.2.0/24"), target("192.168.1.30", "c")), // gateway moved
        (cidr("10.42.3.0/24"), target("192.168.1.4", "d")),  // new
        (cidr("10.42.4.0/24"), target("192.168.1.5", "e")),  // someone else's route is there
    ]
    .into();
    let kernel = KernelRoutes {
        ours: [
            (cidr("10.42.1.0/24"), Some(ip("192.168.1.2"))),
            (cidr("10.42.2.0/24"), Some(ip("192.168.1.3"))),
            (cidr("10.42.9.0/24"), Some(ip("192.168.1.9"))), // its node went away
        ]
        .into(),
        foreign: [cidr("10.42.4.0/24"), cidr("0.0.0.0/0")].into(),
    };
    let p = plan(&desired, &kernel);
    assert_eq!(
        p.replace,
        [(cidr("10.42.2.0/24"), target("192.168.1.30", "c")), (cidr("10.42.3.0/24"), target("192.168.1.4", "d"))]
    );
    assert_eq!(p.delete, [cidr("10.42.9.0/24")]);
    assert_eq!(p.conflicts, [(cidr("10.42.4.0/24"), target("192.168.1.5", "e"))]);

    // In line: nothing to do.
    let same = KernelRoutes {
        ours: desired.iter().filter(|(c, _)| **c != cidr("10.42.4.0/24")).map(|(c, t)| (*c, Some(t.gateway))).collect(),
        foreign: kernel.foreign.clone(),
    };
    assert!(plan(&desired, &same).is_empty());
    // Nothing wanted: all of ours go, nothing else.
    let none = plan(&BTreeMap::new(), &kernel);
    assert_eq!(none.delete.len(), 3);
    assert!(none.replace.is_empty() && none.conflicts.is_empty());
}

#[test]
fn a_node_going_away_or_moving_changes_the_plan() {
    let mut nodes = vec![
        node("a", Some("10.42.0.0/24"), Some("192.168.1.1")),
        node("b", Some("10.42.1.0/24"), Some("192.168.1.2")),
    ];
    let first = desired(&nodes, &config());
    let kernel =
        KernelRoutes { ours: first.routes.iter().map(|(c, t)| (*c, Some(t.gateway))).collect(), ..Default::default() };
    nodes[1] = node("b", Some("10.42.1.0/24"), Some("192.168.1.22"));
    let moved = plan(&desired(&nodes, &config()).routes, &kernel);
    assert_eq!(moved.replace, [(cidr("10.42.1.0/24"), target("192.168.1.22", "b"))]);
    assert!(moved.delete.is_empty());
    nodes.pop();
    let gone = plan(&desired(&nodes, &config()).routes, &kernel);
    assert_eq!((gone.replace.len(), gone.delete.as_slice()), (0, [cidr("10.42.1.0/24")].as_slice()));
}

#[test]
fn cidr_containment() {
    assert!(covers(&cidr("10.42.0.0/16"), &cidr("10.42.7.0/24")));
    assert!(covers(&cidr("10.42.0.0/16"), &cidr("10.42.0.0/16")));
    assert!(!covers(&cidr("10.42.0.0/24"), &cidr("10.42.0.0/16")));
    assert!(!covers(&cidr("10.42.0.0/16"), &cidr("10.43.0.0/24")));
    assert!(covers(&cidr("0.0.0.0/0"), &cidr("10.43.0.0/24")));
}

#[test]
fn masquerade_rules_keep_pod_to_pod_sources() {
    let script = render(&config(), Some(cidr("10.42.0.0/24")));
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(
        lines,
        [
            "add table ip krate-podnet",
            "delete table ip krate-podnet",
            "add table ip krate-podnet { comment \"krate's pod network: masquerading and forwarding\" ; }",
            "add chain ip krate-podnet forward { type filter hook forward priority 0 ; policy accept ; }",
            "add rule ip krate-podnet forward ip saddr 10.42.0.0/16 accept",
            "add rule ip krate-podnet forward ip daddr 10.42.0.0/16 accept",
            "add chain ip krate-podnet postrouting { type nat hook postrouting priority 100 ; policy accept ; }",
            "add rule ip krate-podnet postrouting meta mark and 0x00004000 != 0 return",
            "add rule ip krate-podnet postrouting ip saddr 10.42.0.0/16 ip daddr 10.42.0.0/16 return",
            "add rule ip krate-podnet postrouting ip saddr != 10.42.0.0/16 ip daddr 10.42.0.0/24 return",
            "add rule ip krate-podnet postrouting ip saddr 10.42.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random",
            "add rule ip krate-podnet postrouting ip saddr != 10.42.0.0/16 ip daddr 10.42.0.0/16 masquerade fully-random",
        ]
    );

    // Before the node has its podCIDR there is no rule for it; without masquerading
    // or the proxy's mark those rules go.
    let mut c = config();
    assert!(!render(&c, None).contains("10.42.0.0/24"));
    c.kube_proxy_mark = None;
    assert!(!render(&c, None).contains("meta mark"));
    c.masquerade = false;
    c.table = "other".into();
    let plain = render(&c, None);
    assert!(!plain.contains("postrouting") && !plain.contains("masquerade"), "{plain}");
    assert!(plain.contains("add rule ip other forward ip daddr 10.42.0.0/16 accept"), "{plain}");
}

#[test]
fn configs_are_validated() {
    assert_eq!(config().validate(), Ok(()));
    let netns = config().in_netns("ns1");
    assert_eq!(netns.ip_command, ["ip", "netns", "exec", "ns1", "ip"]);
    assert_eq!(netns.nft_command, ["ip", "netns", "exec", "ns1", "nft"]);
    assert_eq!(
        netns.ip_forward,
        IpForward::Sysctl(["ip", "netns", "exec", "ns1", "sysctl"].map(String::from).to_vec())
    );
    for broken in [
        PodNetConfig { table: "bad table".into(), ..config() },
        PodNetConfig { node_name: String::new(), ..config() },
        PodNetConfig { ip_command: Vec::new(), ..config() },
        PodNetConfig { route_protocol: 2, ..config() },
        PodNetConfig { ip_forward: IpForward::Sysctl(Vec::new()), ..config() },
    ] {
        assert!(broken.validate().is_err(), "{broken:?}");
    }
}
