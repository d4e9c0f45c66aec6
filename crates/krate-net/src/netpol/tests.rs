//! Policy evaluation and rendering, one upstream rule at a time, on a small cluster:
//!
//! | pod          | node   | address   | labels         | named ports            |
//! |--------------|--------|-----------|----------------|------------------------|
//! | prod/db      | node-a | 10.0.0.10 | app=db         | db 5432, metrics 9090  |
//! | prod/web     | node-a | 10.0.0.11 | app=web        | http 8080              |
//! | prod/far-web | node-b | 10.0.1.11 | app=web        | http 8081              |
//! | dev/web      | node-b | 10.0.2.11 | app=web        | http 8082, dns/UDP 53  |
//! | dev/tool     | node-a | 10.0.0.12 | app=tool       |                        |
//!
//! Namespaces prod (team=red) and dev (team=blue); this node is node-a.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{Value, json};

use super::*;
use crate::proxy::Protocol;

const NODE: &str = "node-a";
const DB: &str = "10.0.0.10";
const WEB: &str = "10.0.0.11";
const FAR_WEB: &str = "10.0.1.11";
const DEV_WEB: &str = "10.0.2.11";
const TOOL: &str = "10.0.0.12";
const OUTSIDE: &str = "192.0.2.7";

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn pod(namespace: &str, name: &str, node: &str, address: &str, labels: Value, ports: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", "ports": ports}]},
        "status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]},
    }))
    .unwrap()
}

fn pods() -> Vec<Pod> {
    vec![
        pod(
            "prod",
            "db",
            NODE,
            DB,
            json!({"app": "db"}),
            json!([{"name": "db", "containerPort": 5432}, {"name": "metrics", "containerPort": 9090}]),
        ),
        pod("prod", "web", NODE, WEB, json!({"app": "web"}), json!([{"name": "http", "containerPort": 8080}])),
        pod(
            "prod",
            "far-web",
            "node-b",
            FAR_WEB,
            json!({"app": "web"}),
            json!([{"name": "http", "containerPort": 8081}]),
        ),
        pod(
            "dev",
            "web",
            "node-b",
            DEV_WEB,
            json!({"app": "web"}),
            json!([{"name": "http", "containerPort": 8082}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]),
        ),
        pod("dev", "tool", NODE, TOOL, json!({"app": "tool"}), json!([])),
    ]
}

fn namespaces() -> Vec<Namespace> {
    ["prod:red", "dev:blue"]
        .iter()
        .map(|spec| {
            let (name, team) = spec.split_once(':').unwrap();
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"team": team}}})).unwrap()
        })
        .collect()
}

fn policy(namespace: &str, name: &str, spec: Value) -> NetworkPolicy {
    serde_json::from_value(json!({"metadata": {"namespace": namespace, "name": name}, "spec": spec})).unwrap()
}

fn snapshot_of(policies: &[NetworkPolicy], pods: &[Pod]) -> Snapshot {
    Snapshot::build(policies, pods, &namespaces())
}

fn resolved(policies: &[NetworkPolicy]) -> Resolved {
    resolve(&snapshot_of(policies, &pods()), NODE)
}

fn tcp(r: &Resolved, src: &str, dst: &str, port: u16) -> bool {
    r.allows(ip(src), ip(dst), Some(Protocol::Tcp), port)
}

fn udp(r: &Resolved, src: &str, dst: &str, port: u16) -> bool {
    r.allows(ip(src), ip(dst), Some(Protocol::Udp), port)
}

fn db_policy(spec: Value) -> NetworkPolicy {
    let mut full = json!({"podSelector": {"matchLabels": {"app": "db"}}});
    merge_into(&mut full, spec);
    policy("prod", "db", full)
}

/// `from` merged key by key into `into`.
fn merge_into(into: &mut Value, from: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, from) {
        a.extend(b);
    }
}

#[test]
fn policy_types_default_as_upstream() {
    let parse = |spec: Value| Policy::from_api(&policy("prod", "p", spec));
    let only_ingress = parse(json!({"podSelector": {}}));
    assert_eq!((only_ingress.ingress, only_ingress.egress), (Some(vec![]), None), "Ingress always");
    let both = parse(json!({"podSelector": {}, "egress": [{}]}));
    assert!(both.ingress.is_some() && both.egress.is_some(), "Egress when there are egress rules");
    let empty_egress = parse(json!({"podSelector": {}, "egress": []}));
    assert!(empty_egress.egress.is_none(), "an empty egress list is no egress section");
    let egress_only = parse(json!({"podSelector": {}, "policyTypes": ["Egress"], "ingress": [{}]}));
    assert!(egress_only.ingress.is_none(), "explicit types win over present rules");
    assert_eq!(egress_only.egress, Some(vec![]), "and an Egress type without rules denies");
    let no_selector = parse(json!({}));
    assert_eq!(no_selector.pod_selector, Selector::everything(), "podSelector defaults to {{}}");
}

#[test]
fn empty_pod_selector_selects_every_local_pod_of_its_namespace() {
    let r = resolved(&[policy("prod", "deny", json!({"podSelector": {}}))]);
    assert_eq!(r.policies.len(), 1);
    // prod/far-web is prod's too, but on another node: not ours to police.
    assert_eq!(r.policies[0].targets, [ip(DB), ip(WEB)].into());
    assert_eq!(r.ingress_isolated, [ip(DB), ip(WEB)].into());
    assert!(r.egress_isolated.is_empty());
    assert!(!tcp(&r, TOOL, DB, 5432) && !tcp(&r, DB, WEB, 80), "default deny");
    assert!(tcp(&r, DB, TOOL, 80), "dev/tool is not isolated; db's egress is not either");
    assert!(tcp(&r, WEB, FAR_WEB, 80), "the remote pod is judged on its own node");
}

#[test]
fn non_isolated_pods_are_unaffected_and_unselecting_policies_vanish() {
    let r = resolved(&[policy("prod", "nothing", json!({"podSelector": {"matchLabels": {"app": "nope"}}}))]);
    assert!(r.policies.is_empty() && r.ingress_isolated.is_empty());
    let rules = render_resolved(&r);
    assert_eq!(rules.chains[POD_INGRESS], ["counter drop"]);
    assert!(rules.sets[INGRESS_ISOLATED].elements.is_empty());
    assert!(tcp(&r, TOOL, DB, 1));
}

#[test]
fn empty_ingress_list_is_default_deny_and_renders_no_policy_chain() {
    let deny = db_policy(json!({"ingress": []}));
    let r = resolved(std::slice::from_ref(&deny));
    assert_eq!(r.policies[0].ingress, Some(vec![]));
    assert!(!tcp(&r, WEB, DB, 5432) && !udp(&r, WEB, DB, 53) && !r.allows(ip(WEB), ip(DB), None, 0));
    let rules = render(&snapshot_of(&[deny], &pods()), NODE);
    assert_eq!(rules.sets[INGRESS_ISOLATED].elements, [DB.to_string()].into());
    assert_eq!(rules.chains[POD_INGRESS], ["counter drop"], "isolated, with nothing to jump to");
    assert!(!rules.sets.keys().any(|s| s.starts_with("targets-")));
}

#[test]
fn a_rule_without_peers_matches_every_source() {
    for spec in [json!({"ingress": [{}]}), json!({"ingress": [{"from": []}]})] {
        let r = resolved(&[db_policy(spec)]);
        assert_eq!(r.policies[0].ingress.as_ref().unwrap()[0].peers, Peers::Any);
        assert!(tcp(&r, OUTSIDE, DB, 1) && r.allows(ip(DEV_WEB), ip(DB), None, 0), "all sources, all ports");
    }
    let ports_only = resolved(&[db_policy(json!({"ingress": [{"ports": [{"port": 5432}]}]}))]);
    assert!(tcp(&ports_only, OUTSIDE, DB, 5432));
    assert!(!tcp(&ports_only, OUTSIDE, DB, 5433));
}

#[test]
fn pod_selector_peers_stay_in_the_policy_namespace() {
    let r = resolved(&[db_policy(json!({"ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]}))]);
    let rule = &r.policies[0].ingress.as_ref().unwrap()[0];
    assert_eq!(rule.peers, Peers::Listed { pods: Some([ip(WEB), ip(FAR_WEB)].into()), ranges: None });
    assert!(tcp(&r, WEB, DB, 5432) && tcp(&r, FAR_WEB, DB, 1), "prod's web pods, on any node");
    assert!(!tcp(&r, DEV_WEB, DB, 5432), "dev/web matches the labels but not the namespace");
    assert!(!tcp(&r, TOOL, DB, 5432));
    let everyone_here = resolved(&[db_policy(json!({"ingress": [{"from": [{"podSelector": {}}]}]}))]);
    assert!(tcp(&everyone_here, WEB, DB, 1) && tcp(&everyone_here, DB, DB, 1));
    assert!(!tcp(&everyone_here, TOOL, DB, 1) && !tcp(&everyone_here, OUTSIDE, DB, 1));
}

#[test]
fn namespace_selectors_pick_every_pod_of_matching_namespaces() {
    let by_team = resolved(&[db_policy(
        json!({"ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}]}]}),
    )]);
    assert!(tcp(&by_team, DEV_WEB, DB, 1) && tcp(&by_team, TOOL, DB, 1), "all of dev");
    assert!(!tcp(&by_team, WEB, DB, 1), "not prod");
    let by_name = resolved(&[db_policy(json!({"ingress": [{"from": [{"namespaceSelector": {
        "matchLabels": {NAMESPACE_NAME_LABEL: "dev"}}}]}]}))]);
    assert!(tcp(&by_name, TOOL, DB, 1) && !tcp(&by_name, WEB, DB, 1), "the name label is always there");
    let all = resolved(&[db_policy(json!({"ingress": [{"from": [{"namespaceSelector": {}}]}]}))]);
    assert!(tcp(&all, TOOL, DB, 1) && tcp(&all, WEB, DB, 1) && !tcp(&all, OUTSIDE, DB, 1), "every pod, no outsider");
}

#[test]
fn pod_and_namespace_selectors_together_intersect() {
    let both = resolved(&[db_policy(json!({"ingress": [{"from": [{
        "namespaceSelector": {"matchLabels": {"team": "blue"}},
        "podSelector": {"matchLabels": {"app": "web"}},
    }]}]}))]);
    assert!(tcp(&both, DEV_WEB, DB, 1), "web pods in blue namespaces");
    assert!(!tcp(&both, TOOL, DB, 1), "blue but not web");
    assert!(!tcp(&both, WEB, DB, 1), "web but not blue");
    // As two peers they add up instead.
    let either = resolved(&[db_policy(json!({"ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"team": "blue"}}},
        {"podSelector": {"matchLabels": {"app": "web"}}},
    ]}]}))]);
    assert!(tcp(&either, TOOL, DB, 1) && tcp(&either, WEB, DB, 1) && tcp(&either, DEV_WEB, DB, 1));
}

#[test]
fn ip_blocks_less_their_excepts_become_ranges() {
    let r = resolved(&[db_policy(json!({"ingress": [{"from": [
        {"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.8/29", "10.0.0.12/32"]}},
        {"ipBlock": {"cidr": "10.0.0.14/31"}},
        {"ipBlock": {"cidr": "fd00::/8"}},
    ]}]}))]);
    let rule = &r.policies[0].ingress.as_ref().unwrap()[0];
    let range = |a: &str, b: &str| IpRange { first: ip(a), last: ip(b) };
    // The second block lies inside the first's hole: merged, sorted, no overlap.
    assert_eq!(
        rule.peers,
        Peers::Listed {
            pods: None,
            ranges: Some(vec![range("10.0.0.0", "10.0.0.7"), range("10.0.0.14", "10.0.0.255")]),
        }
    );
    assert!(tcp(&r, "10.0.0.1", DB, 1) && tcp(&r, "10.0.0.15", DB, 1) && tcp(&r, "10.0.0.200", DB, 1));
    assert!(!tcp(&r, WEB, DB, 1) && !tcp(&r, TOOL, DB, 1) && !tcp(&r, "10.0.1.1", DB, 1));
    let rules = render(
        &snapshot_of(
            &[db_policy(json!({"ingress": [{"from": [
                {"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.8/29", "10.0.0.12/32"]}},
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}},
            ]}]}))],
            &pods(),
        ),
        NODE,
    );
    let base = policy_base("prod", "db");
    assert_eq!(
        rules.sets[&format!("in0-cidrs-{base}")].elements,
        // 0.0.0.0-9.255.255.255 and 10.0.0.0-10.0.0.7 touch, so they are one range.
        ["0.0.0.0-10.0.0.7", "10.0.0.16-10.0.0.255", "11.0.0.0-255.255.255.255"].map(String::from).into()
    );
    let merged = resolved(&[db_policy(json!({"ingress": [{"from": [
        {"ipBlock": {"cidr": "10.0.0.0/25"}}, {"ipBlock": {"cidr": "10.0.0.128/25"}},
    ]}]}))]);
    assert_eq!(
        merged.policies[0].ingress.as_ref().unwrap()[0].peers,
        Peers::Listed { pods: None, ranges: Some(vec![range("10.0.0.0", "10.0.0.255")]) }
    );
}

#[test]
fn ports_default_to_tcp_and_take_protocols_and_ranges() {
    let r = resolved(&[db_policy(json!({"ingress": [{"ports": [
        {"port": 5432},
        {"protocol": "UDP", "port": 53},
        {"protocol": "SCTP", "port": 9000, "endPort": 9010},
        {"port": 32000, "endPort": 32768},
        {"protocol": "UDP"},
    ]}]}))]);
    assert!(tcp(&r, WEB, DB, 5432), "TCP unless told");
    assert!(!r.allows(ip(WEB), ip(DB), Some(Protocol::Sctp), 5432), "and TCP only");
    assert!(tcp(&r, WEB, DB, 32000) && tcp(&r, WEB, DB, 32768) && !tcp(&r, WEB, DB, 32769) && !tcp(&r, WEB, DB, 31999));
    assert!(udp(&r, WEB, DB, 53) && udp(&r, WEB, DB, 12345), "a protocol without a port: all its ports");
    assert!(r.allows(ip(WEB), ip(DB), Some(Protocol::Sctp), 9005));
    assert!(!r.allows(ip(WEB), ip(DB), Some(Protocol::Sctp), 9011));
    assert!(!r.allows(ip(WEB), ip(DB), None, 0), "rules with ports let no ICMP through");
    let rules = render(
        &snapshot_of(
            &[db_policy(json!({"ingress": [{"ports": [
                {"port": 5432}, {"port": 5430, "endPort": 5440}, {"protocol": "UDP", "port": 53},
                {"protocol": "SCTP", "port": 9000, "endPort": 9010}, {"protocol": "UDP"},
            ]}]}))],
            &pods(),
        ),
        NODE,
    );
    let base = policy_base("prod", "db");
    assert_eq!(
        rules.sets[&format!("in0-ports-{base}")].elements,
        ["sctp . 9000-9010", "tcp . 5430-5440", "udp . 0-65535"].map(String::from).into(),
        "overlapping ranges merged per protocol"
    );
    assert_eq!(rules.chains[&format!("in-{base}")], [format!("meta l4proto . th dport @in0-ports-{base} accept")]);
}

#[test]
fn named_ports_resolve_on_the_receiving_pod() {
    // Ingress: on the selected pods. "http" is web's 8080; db has no "http".
    let r = resolved(&[policy(
        "prod",
        "named",
        json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}, {"port": "metrics"}]}]}),
    )]);
    assert!(tcp(&r, TOOL, WEB, 8080) && !tcp(&r, TOOL, WEB, 9090));
    assert!(tcp(&r, TOOL, DB, 9090) && !tcp(&r, TOOL, DB, 8080));
    let rule = &r.policies[0].ingress.as_ref().unwrap()[0];
    let at = |a: &str, port| AddrPort { ip: ip(a), protocol: Protocol::Tcp, port };
    assert_eq!(rule.ports, Ports::Listed { ranges: None, named: Some([at(DB, 9090), at(WEB, 8080)].into()) });

    // Egress: on the peer pods, wherever they run, each with its own number.
    let r = resolved(&[policy(
        "dev",
        "tool-out",
        json!({"podSelector": {"matchLabels": {"app": "tool"}}, "policyTypes": ["Egress"], "egress": [
            {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": "http"}]},
            {"ports": [{"protocol": "UDP", "port": "dns"}]},
        ]}),
    )]);
    assert!(tcp(&r, TOOL, WEB, 8080) && tcp(&r, TOOL, FAR_WEB, 8081) && tcp(&r, TOOL, DEV_WEB, 8082));
    assert!(!tcp(&r, TOOL, WEB, 8081) && !tcp(&r, TOOL, DB, 8080), "each peer's own port, peers only");
    assert!(udp(&r, TOOL, DEV_WEB, 53), "no peers: any pod with that port name");
    assert!(!udp(&r, TOOL, OUTSIDE, 53) && !udp(&r, TOOL, WEB, 53), "not a pod, or no such port");
    let rules = render(
        &snapshot_of(
            &[policy(
                "dev",
                "tool-out",
                json!({"podSelector": {"matchLabels": {"app": "tool"}}, "policyTypes": ["Egress"], "egress": [
                    {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": "http"}]},
                ]}),
            )],
            &pods(),
        ),
        NODE,
    );
    let base = policy_base("dev", "tool-out");
    // The named-port set names the peers itself: one rule, no peer set.
    assert_eq!(
        rules.chains[&format!("eg-{base}")],
        [format!("ip daddr . meta l4proto . th dport @eg0-named-{base} accept")]
    );
    assert_eq!(
        rules.sets[&format!("eg0-named-{base}")].elements,
        ["10.0.0.11 . tcp . 8080", "10.0.1.11 . tcp . 8081", "10.0.2.11 . tcp . 8082"].map(String::from).into()
    );
    assert!(!rules.sets.contains_key(&format!("eg0-pods-{base}")));
}

#[test]
fn egress_isolation_denies_all_but_allowed_destinations_and_ingress_still_applies() {
    let egress = policy(
        "prod",
        "db-out",
        json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Egress"], "egress": [
            {"to": [{"ipBlock": {"cidr": "10.0.2.0/24"}}], "ports": [{"port": 8082}]},
        ]}),
    );
    let r = resolved(std::slice::from_ref(&egress));
    assert_eq!(r.egress_isolated, [ip(DB)].into());
    assert!(r.ingress_isolated.is_empty(), "Egress only");
    assert!(tcp(&r, DB, DEV_WEB, 8082) && !tcp(&r, DB, DEV_WEB, 80) && !tcp(&r, DB, WEB, 8082));
    assert!(tcp(&r, WEB, DB, 5432), "db still takes connections");
    let deny_in = policy("dev", "deny", json!({"podSelector": {}}));
    let r = resolved(&[egress, deny_in]);
    assert!(!tcp(&r, DB, TOOL, 8082), "dev/tool's ingress isolation still applies to allowed egress");
}

#[test]
fn policies_add_up() {
    let r = resolved(&[
        db_policy(
            json!({"ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 5432}]}]}),
        ),
        policy(
            "prod",
            "metrics",
            json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}], "ports": [{"port": "metrics"}]}]}),
        ),
    ]);
    assert!(tcp(&r, WEB, DB, 5432) && tcp(&r, TOOL, DB, 9090), "either policy's rules");
    assert!(!tcp(&r, TOOL, DB, 5432) && !tcp(&r, WEB, DB, 9090), "but not a mix of them");
    assert!(!tcp(&r, TOOL, WEB, 8080), "web is isolated by the second policy only, which lists no port of web's");
    let rules = render_resolved(&r);
    let (db, metrics) = (policy_base("prod", "db"), policy_base("prod", "metrics"));
    assert_eq!(
        rules.chains[POD_INGRESS],
        [
            format!("ip daddr @targets-{db} jump in-{db}"),
            format!("ip daddr @targets-{metrics} jump in-{metrics}"),
            "counter drop".to_string()
        ]
    );
}

#[test]
fn only_pods_with_addresses_that_run_here_are_targets() {
    let mut all = pods();
    let mut pending = pod("prod", "pending", NODE, "10.0.0.50", json!({"app": "db"}), json!([]));
    pending.status = Some(Default::default());
    let mut done = pod("prod", "done", NODE, "10.0.0.51", json!({"app": "db"}), json!([]));
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let mut host = pod("prod", "host", NODE, "10.9.9.9", json!({"app": "db"}), json!([]));
    host.spec.as_mut().unwrap().host_network = Some(true);
    let v6 = pod("prod", "v6", NODE, "fd00::5", json!({"app": "db"}), json!([]));
    all.extend([pending, done, host, v6]);
    let snapshot = snapshot_of(&[db_policy(json!({"ingress": [{"from": [{"podSelector": {}}]}]}))], &all);
    assert!(!snapshot.pods.iter().any(|p| ["pending", "done", "v6"].contains(&p.name.as_str())));
    let r = resolve(&snapshot, NODE);
    assert_eq!(r.policies[0].targets, [ip(DB)].into(), "no host-network target");
    assert!(tcp(&r, "10.9.9.9", DB, 1), "a host-network pod is still a peer, by its address");
    assert!(resolve(&snapshot, "node-c").policies.is_empty(), "node-c has none of them");
}

#[test]
fn what_cannot_be_understood_matches_nothing() {
    let r = resolved(&[db_policy(json!({"ingress": [
        {"from": [{"ipBlock": {"cidr": "fd00::/8"}}]},
        {"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}}]},
        {"ports": [{"protocol": "ICMP", "port": 1}]},
        {"ports": [{"port": 90, "endPort": 80}]},
        {"ports": [{"port": "no-such-name"}]},
    ]}))]);
    assert!(!tcp(&r, WEB, DB, 80) && !tcp(&r, OUTSIDE, DB, 85) && !udp(&r, WEB, DB, 1));
    let rules = render_resolved(&r);
    let base = policy_base("prod", "db");
    // The selector rule keeps its (empty) set; the others render nothing at all.
    assert_eq!(
        rules.chains[&format!("in-{base}")],
        [
            format!("ip saddr @in1-pods-{base} accept"),
            format!("ip daddr . meta l4proto . th dport @in4-named-{base} accept")
        ]
    );
    assert!(rules.sets[&format!("in1-pods-{base}")].elements.is_empty());
    assert!(!rules.sets.contains_key(&format!("in0-cidrs-{base}")));
}

#[test]
fn rendering_writes_the_layout() {
    let snapshot = snapshot_of(
        &[db_policy(json!({"policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}, {"ipBlock": {"cidr": "192.0.2.0/24"}}],
                         "ports": [{"port": 5432}, {"port": "metrics"}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.2.0/24", "except": ["10.0.2.128/25"]}}]}]}))],
        &pods(),
    );
    let rules = render(&snapshot, NODE);
    let b = policy_base("prod", "db");
    assert!(b.ends_with("-prod/db") && b.len() == 8 + "-prod/db".len(), "{b}");
    assert_eq!(
        rules.chains["egress-forward"],
        ["ct state established,related accept", "ip saddr @egress-isolated jump pod-egress"]
    );
    assert_eq!(rules.chains["egress-input"], rules.chains["egress-forward"]);
    assert_eq!(
        rules.chains["ingress-forward"],
        ["ct state established,related accept", "ip daddr @ingress-isolated jump pod-ingress"]
    );
    assert_eq!(rules.chains[POD_EGRESS], [format!("ip saddr @targets-{b} jump eg-{b}"), "counter drop".into()]);
    assert_eq!(
        rules.chains[&format!("in-{b}")],
        [
            format!("ip saddr @in0-pods-{b} meta l4proto . th dport @in0-ports-{b} accept"),
            format!("ip saddr @in0-pods-{b} ip daddr . meta l4proto . th dport @in0-named-{b} accept"),
            format!("ip saddr @in0-cidrs-{b} meta l4proto . th dport @in0-ports-{b} accept"),
            format!("ip saddr @in0-cidrs-{b} ip daddr . meta l4proto . th dport @in0-named-{b} accept"),
        ]
    );
    assert_eq!(rules.chains[&format!("eg-{b}")], [format!("ip daddr @eg0-cidrs-{b} accept")]);
    let elements = |name: String| rules.sets[&name].elements.iter().cloned().collect::<Vec<_>>();
    assert_eq!(elements(format!("targets-{b}")), [DB]);
    assert_eq!(elements(format!("in0-pods-{b}")), [WEB, FAR_WEB]);
    assert_eq!(elements(format!("in0-cidrs-{b}")), ["192.0.2.0-192.0.2.255"]);
    assert_eq!(elements(format!("in0-ports-{b}")), ["tcp . 5432"]);
    assert_eq!(elements(format!("in0-named-{b}")), ["10.0.0.10 . tcp . 9090"]);
    assert_eq!(elements(format!("eg0-cidrs-{b}")), ["10.0.2.0-10.0.2.127"]);
    assert_eq!(rules.sets[&format!("in0-cidrs-{b}")].kind, SetKind::Ranges);
    assert_eq!((rules.policies, rules.sets.len(), rules.rule_count()), (1, 8, 6 + 2 + 2 + 4 + 1));

    let full = plan(SyncMode::Full, "krate-netpol", None, &rules);
    assert_eq!(full.mode, SyncMode::Full);
    let lines: Vec<&str> = full.script.lines().collect();
    assert!(lines[0].starts_with("add table ip krate-netpol { comment"), "{}", full.script);
    assert_eq!(lines[1].trim_end(), "delete table ip krate-netpol");
    assert!(full.script.contains(
        "add chain ip krate-netpol ingress-forward { type filter hook forward priority 1 ; policy accept ; }"
    ));
    assert!(
        full.script
            .contains("add chain ip krate-netpol egress-input { type filter hook input priority 0 ; policy accept ; }")
    );
    assert!(full.script.contains(&format!(
        "add set ip krate-netpol in0-ports-{b} {{ type inet_proto . inet_service ; flags interval ; }}"
    )));
    assert!(full.script.contains(&format!("add element ip krate-netpol in0-pods-{b} {{ 10.0.0.11, 10.0.1.11 }}")));
    // Chains are declared before any rule jumps to them.
    let first_rule = lines.iter().position(|l| l.starts_with("add rule")).unwrap();
    let last_chain = lines.iter().rposition(|l| l.starts_with("add chain")).unwrap();
    assert!(last_chain < first_rule);
}

fn plan_between(before: &Ruleset, after: &Ruleset) -> Plan {
    plan(SyncMode::Partial, "t", Some(before), after)
}

#[test]
fn relabelling_pods_and_namespaces_only_changes_set_elements() {
    let policies = [db_policy(json!({"ingress": [{"from": [
        {"podSelector": {"matchLabels": {"app": "web"}}},
        {"namespaceSelector": {"matchLabels": {"team": "green"}}},
    ]}]}))];
    let before = render(&snapshot_of(&policies, &pods()), NODE);
    assert!(plan_between(&before, &before).empty, "nothing changed, nothing to do");

    let mut relabelled = pods();
    relabelled[4].metadata.labels = Some([("app".to_string(), "web".to_string())].into()); // dev/tool: not prod
    relabelled[1].metadata.labels = Some([("app".to_string(), "cache".to_string())].into()); // prod/web
    let after = render(&snapshot_of(&policies, &relabelled), NODE);
    let b = policy_base("prod", "db");
    let change = plan_between(&before, &after);
    assert_eq!(change.mode, SyncMode::Partial);
    assert_eq!(change.script, format!("delete element ip t in0-pods-{b} {{ 10.0.0.11 }}\n"));

    let mut namespaces = namespaces();
    namespaces[1].metadata.labels = Some([("team".to_string(), "green".to_string())].into());
    let green = render(&Snapshot::build(&policies, &pods(), &namespaces), NODE);
    let change = plan_between(&before, &green);
    assert_eq!(change.script, format!("add element ip t in0-pods-{b} {{ 10.0.0.12, 10.0.2.11 }}\n"));

    // A new pod on this node that the policy selects: targets and isolation grow.
    let mut more = pods();
    more.push(pod("prod", "db-2", NODE, "10.0.0.20", json!({"app": "db"}), json!([])));
    let change = plan_between(&before, &render(&snapshot_of(&policies, &more), NODE));
    assert_eq!(
        change.script,
        format!("add element ip t ingress-isolated {{ 10.0.0.20 }}\nadd element ip t targets-{b} {{ 10.0.0.20 }}\n")
    );
}

#[test]
fn policy_changes_rewrite_their_chains_and_retire_what_went() {
    let none = render(&snapshot_of(&[], &pods()), NODE);
    let policies = [db_policy(json!({"ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 5432}]}]}))];
    let one = render(&snapshot_of(&policies, &pods()), NODE);
    let b = policy_base("prod", "db");

    let added = plan_between(&none, &one).script;
    let pos = |text: &str| added.find(text).unwrap_or_else(|| panic!("{text:?} in\n{added}"));
    assert!(pos(&format!("add set ip t in0-pods-{b}")) < pos("flush chain ip t pod-ingress"));
    assert!(
        pos(&format!("add chain ip t in-{b}"))
            < pos(&format!("add rule ip t pod-ingress ip daddr @targets-{b} jump in-{b}"))
    );
    assert!(!added.contains("delete"), "{added}");

    let removed = plan_between(&one, &none).script;
    let pos = |text: &str| removed.find(text).unwrap_or_else(|| panic!("{text:?} in\n{removed}"));
    // Nothing may jump to a chain or name a set when it is deleted.
    assert!(pos("flush chain ip t pod-ingress") < pos(&format!("delete chain ip t in-{b}")));
    assert!(pos(&format!("flush chain ip t in-{b}")) < pos(&format!("delete set ip t in0-pods-{b}")));
    assert!(pos(&format!("delete chain ip t in-{b}")) < pos(&format!("delete set ip t targets-{b}")));
    assert!(removed.contains("delete element ip t ingress-isolated { 10.0.0.10 }"));

    // A different port: the policy chain stays, only its port set changes.
    let other = [db_policy(json!({"ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 5433}]}]}))];
    let port_change = plan_between(&one, &render(&snapshot_of(&other, &pods()), NODE)).script;
    assert_eq!(
        port_change,
        format!(
            "delete element ip t in0-ports-{b} {{ tcp . 5432 }}\nadd element ip t in0-ports-{b} {{ tcp . 5433 }}\n"
        )
    );
    // Without anything to diff against, a partial sync becomes a full one.
    assert_eq!(plan(SyncMode::Partial, "t", None, &one).mode, SyncMode::Full);
}
