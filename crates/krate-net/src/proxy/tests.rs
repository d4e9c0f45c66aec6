//! Rendering tests: snapshots of Services and EndpointSlices in, rules out; and the
//! scripts checked and applied by the real `nft` inside a throwaway netns.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use super::*;

const NODE: &str = "node-a";

fn config() -> ProxyConfig {
    let mut config = ProxyConfig::new(NODE);
    config.cluster_cidr = Some("10.244.0.0/16".parse().unwrap());
    config
}

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"namespace": "default", "name": name}, "spec": spec})).unwrap()
}

fn cluster_ip(name: &str, ip: &str, port: u16) -> Service {
    service(name, json!({"clusterIP": ip, "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}))
}

fn slice(name: &str, service: &str, ports: Value, endpoints: Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name, "labels": {SERVICE_NAME_LABEL: service}},
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    }))
    .unwrap()
}

fn http_slice(name: &str, service: &str, endpoints: Value) -> EndpointSlice {
    slice(name, service, json!([{"name": "http", "port": 8080, "protocol": "TCP"}]), endpoints)
}

fn ep(ip: &str, node: &str) -> Value {
    json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true}})
}

fn ep_with(ip: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Value {
    json!({"addresses": [ip], "nodeName": node,
           "conditions": {"ready": ready, "serving": serving, "terminating": terminating}})
}

fn rules_for(services: &[Service], slices: &[EndpointSlice], config: &ProxyConfig) -> Ruleset {
    render(&Snapshot::build(services, slices, &config.node_name), config)
}

fn port_name(service: &str, port: &str) -> ServicePortName {
    ServicePortName { namespace: "default".into(), name: service.into(), port: port.into(), protocol: Protocol::Tcp }
}

/// The chain named `prefix` + the service port's base name.
fn chain<'a>(rules: &'a Ruleset, prefix: &str, service: &str) -> Option<&'a Vec<String>> {
    rules.chains.get(&format!("{prefix}-{}", names::service_base(&port_name(service, "http"))))
}

fn element<'a>(rules: &'a Ruleset, container: Container, key: &str) -> Option<&'a str> {
    rules.elements.get(&container)?.get(key).map(String::as_str)
}

fn endpoint_chains(rules: &Ruleset) -> Vec<&String> {
    rules.chains.keys().filter(|c| c.starts_with("endpoint-")).collect()
}

#[test]
fn cluster_ip_spreads_over_two_endpoints() {
    let rules = rules_for(
        &[cluster_ip("web", "10.96.0.10", 80)],
        &[http_slice("web-1", "web", json!([ep("10.244.1.2", NODE), ep("10.244.2.2", "node-b")]))],
        &config(),
    );
    let service_chain = format!("service-{}", names::service_base(&port_name("web", "http")));
    assert_eq!(
        element(&rules, Container::ServiceIps, "10.96.0.10 . tcp . 80"),
        Some(format!("goto {service_chain}").as_str())
    );
    assert_eq!(element(&rules, Container::ClusterIps, "10.96.0.10"), Some(""));
    let service_rules = chain(&rules, "service", "web").expect("service chain");
    // Traffic from outside the pod network is masqueraded; then a random endpoint.
    assert_eq!(service_rules[0], "ip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade");
    let e1 = names::endpoint_chain(&port_name("web", "http"), "10.244.1.2".parse().unwrap(), 8080);
    let e2 = names::endpoint_chain(&port_name("web", "http"), "10.244.2.2".parse().unwrap(), 8080);
    assert_eq!(service_rules[1], format!("numgen random mod 2 vmap {{ 0 : goto {e1}, 1 : goto {e2} }}"));
    assert_eq!(
        rules.chains[&e1],
        vec![
            "ip saddr 10.244.1.2 jump mark-for-masquerade".to_string(),
            "meta l4proto tcp dnat to 10.244.1.2:8080".to_string(),
        ]
    );
    assert_eq!(endpoint_chains(&rules).len(), 2);
    assert!(!rules.elements.contains_key(&Container::NoEndpointServices));
}

#[test]
fn masquerade_all_marks_every_cluster_ip_connection() {
    let mut config = config();
    config.masquerade_all = true;
    let rules = rules_for(
        &[cluster_ip("web", "10.96.0.10", 80)],
        &[http_slice("web-1", "web", json!([ep("10.244.1.2", NODE)]))],
        &config,
    );
    assert_eq!(
        chain(&rules, "service", "web").unwrap()[0],
        "ip daddr 10.96.0.10 tcp dport 80 jump mark-for-masquerade"
    );
    // Without a cluster CIDR nor masqueradeAll, nothing marks ClusterIP traffic.
    let mut config = ProxyConfig::new(NODE);
    config.cluster_cidr = None;
    let rules = rules_for(
        &[cluster_ip("web", "10.96.0.10", 80)],
        &[http_slice("web-1", "web", json!([ep("10.244.1.2", NODE)]))],
        &config,
    );
    assert!(chain(&rules, "service", "web").unwrap()[0].starts_with("numgen"));
}

#[test]
fn service_without_endpoints_is_rejected() {
    let rules = rules_for(
        &[
            cluster_ip("empty", "10.96.0.20", 80),
            service(
                "np",
                json!({"type": "NodePort", "clusterIP": "10.96.0.21",
                       "ports": [{"name": "http", "port": 80, "nodePort": 30081}]}),
            ),
        ],
        // A slice whose only endpoint is neither ready nor serving counts for nothing.
        &[http_slice("empty-1", "empty", json!([ep_with("10.244.1.9", NODE, false, false, false)]))],
        &config(),
    );
    assert_eq!(element(&rules, Container::NoEndpointServices, "10.96.0.20 . tcp . 80"), Some("goto reject-chain"));
    assert_eq!(element(&rules, Container::NoEndpointServices, "10.96.0.21 . tcp . 80"), Some("goto reject-chain"));
    assert_eq!(element(&rules, Container::NoEndpointNodePorts, "tcp . 30081"), Some("goto reject-chain"));
    assert!(!rules.elements.contains_key(&Container::ServiceIps));
    assert!(!rules.elements.contains_key(&Container::ServiceNodePorts));
    assert!(rules.chains.is_empty(), "{:?}", rules.chains.keys());
    // Still a ClusterIP: other ports of it are rejected by cluster-ips-check.
    assert_eq!(element(&rules, Container::ClusterIps, "10.96.0.20"), Some(""));
}

#[test]
fn node_port_external_ips_and_load_balancer_ips() {
    let mut lb: Service = service(
        "lb",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.30", "externalIPs": ["192.0.2.7", "2001:db8::1"],
               "loadBalancerSourceRanges": ["198.51.100.0/24"],
               "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
    );
    lb.status = Some(
        serde_json::from_value(json!({"loadBalancer": {"ingress": [
            {"ip": "203.0.113.5"}, {"ip": "203.0.113.6", "ipMode": "Proxy"}, {"hostname": "lb.example"}
        ]}}))
        .unwrap(),
    );
    let rules = rules_for(&[lb], &[http_slice("lb-1", "lb", json!([ep("10.244.2.2", "node-b")]))], &config());
    let external = format!("goto external-{}", names::service_base(&port_name("lb", "http")));
    assert_eq!(element(&rules, Container::ServiceNodePorts, "tcp . 30080"), Some(external.as_str()));
    assert_eq!(element(&rules, Container::ServiceIps, "192.0.2.7 . tcp . 80"), Some(external.as_str()));
    assert_eq!(element(&rules, Container::ServiceIps, "203.0.113.5 . tcp . 80"), Some(external.as_str()));
    assert_eq!(element(&rules, Container::ServiceIps, "203.0.113.6 . tcp . 80"), None, "proxy-mode LB IP");
    assert_eq!(rules.elements[&Container::ServiceIps].len(), 3, "ClusterIP, external IP, LB IP");
    let service_chain = format!("service-{}", names::service_base(&port_name("lb", "http")));
    // Cluster policy: endpoints may be remote, so external traffic is masqueraded.
    assert_eq!(
        chain(&rules, "external", "lb").unwrap(),
        &vec!["jump mark-for-masquerade".to_string(), format!("goto {service_chain}")]
    );
    // loadBalancerSourceRanges: only the LB IP goes through the firewall chain.
    let firewall = format!("firewall-{}", names::service_base(&port_name("lb", "http")));
    assert_eq!(
        element(&rules, Container::FirewallIps, "203.0.113.5 . tcp . 80"),
        Some(format!("goto {firewall}").as_str())
    );
    assert_eq!(rules.chains[&firewall], vec!["ip saddr != { 198.51.100.0/24 } drop".to_string()]);
}

#[test]
fn client_ip_affinity_uses_timed_sets() {
    let svc = service(
        "sticky",
        json!({"clusterIP": "10.96.0.40", "sessionAffinity": "ClientIP",
               "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
               "ports": [{"name": "http", "port": 80}]}),
    );
    let rules = rules_for(
        &[svc],
        &[http_slice("sticky-1", "sticky", json!([ep("10.244.1.2", NODE), ep("10.244.2.2", "node-b")]))],
        &config(),
    );
    let name = port_name("sticky", "http");
    let sets: Vec<String> = ["10.244.1.2", "10.244.2.2"]
        .iter()
        .map(|ip| names::affinity_set(&name, ip.parse().unwrap(), 8080, 600))
        .collect();
    assert_eq!(rules.affinity_sets.len(), 2);
    assert!(sets.iter().all(|s| rules.affinity_sets.get(s) == Some(&600)));
    let service_rules = chain(&rules, "service", "sticky").unwrap();
    let e1 = names::endpoint_chain(&name, "10.244.1.2".parse().unwrap(), 8080);
    // Known clients first, then the random pick.
    assert_eq!(service_rules[1], format!("ip saddr @{} goto {e1}", sets[0]));
    assert!(service_rules[3].starts_with("numgen random mod 2"));
    assert_eq!(rules.chains[&e1][1], format!("update @{} {{ ip saddr }}", sets[0]));
    // Without a timeout given, kube-proxy's default of 3 hours.
    let svc = service(
        "sticky",
        json!({"clusterIP": "10.96.0.40", "sessionAffinity": "ClientIP", "ports": [{"name": "http", "port": 80}]}),
    );
    let rules = rules_for(&[svc], &[http_slice("s", "sticky", json!([ep("10.244.1.2", NODE)]))], &config());
    assert_eq!(rules.affinity_sets.values().copied().collect::<Vec<_>>(), vec![10_800]);
}

#[test]
fn external_traffic_policy_local() {
    let np = |name: &str, ip: &str, node_port: u16| {
        service(
            name,
            json!({"type": "NodePort", "clusterIP": ip, "externalTrafficPolicy": "Local",
                   "ports": [{"name": "http", "port": 80, "nodePort": node_port}]}),
        )
    };
    let rules = rules_for(
        &[np("local", "10.96.0.50", 30050), np("remote", "10.96.0.51", 30051)],
        &[
            http_slice("local-1", "local", json!([ep("10.244.1.2", NODE), ep("10.244.2.2", "node-b")])),
            http_slice("remote-1", "remote", json!([ep("10.244.2.3", "node-b")])),
        ],
        &config(),
    );
    let local_chain = format!("local-{}", names::service_base(&port_name("local", "http")));
    let cluster_chain = format!("service-{}", names::service_base(&port_name("local", "http")));
    // External traffic only to this node's endpoint; pods and the node itself
    // short-circuit to every endpoint.
    let local_rules = chain(&rules, "local", "local").unwrap();
    assert_eq!(local_rules.len(), 1);
    assert!(local_rules[0].starts_with("numgen random mod 1 vmap"), "{local_rules:?}");
    assert!(local_rules[0].contains("10.244.1.2/8080"));
    assert_eq!(
        chain(&rules, "external", "local").unwrap(),
        &vec![
            format!("ip saddr 10.244.0.0/16 goto {cluster_chain} comment \"short-circuit pod traffic\""),
            "fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\"".to_string(),
            format!("fib saddr type local goto {cluster_chain} comment \"short-circuit local traffic\""),
            format!("goto {local_chain}"),
        ]
    );
    // ClusterIP traffic keeps the Cluster policy.
    assert_eq!(
        element(&rules, Container::ServiceIps, "10.96.0.50 . tcp . 80"),
        Some(format!("goto {cluster_chain}").as_str())
    );
    assert!(chain(&rules, "service", "local").unwrap()[1].starts_with("numgen random mod 2"));

    // No endpoint here: external traffic not short-circuited is dropped.
    assert_eq!(element(&rules, Container::NoEndpointNodePorts, "tcp . 30051"), Some("drop"));
    assert!(element(&rules, Container::ServiceNodePorts, "tcp . 30051").is_some());
    let external = chain(&rules, "external", "remote").unwrap();
    assert!(!external.iter().any(|r| r.starts_with("goto local-")), "{external:?}");
    assert!(chain(&rules, "local", "remote").is_none());
    assert_eq!(rules.no_local_external, 1);
}

#[test]
fn internal_traffic_policy_local() {
    let svc = |name: &str, ip: &str| {
        service(
            name,
            json!({"clusterIP": ip, "internalTrafficPolicy": "Local", "ports": [{"name": "http", "port": 80}]}),
        )
    };
    let rules = rules_for(
        &[svc("here", "10.96.0.60"), svc("elsewhere", "10.96.0.61")],
        &[
            http_slice("here-1", "here", json!([ep("10.244.1.2", NODE), ep("10.244.2.2", "node-b")])),
            http_slice("elsewhere-1", "elsewhere", json!([ep("10.244.2.3", "node-b")])),
        ],
        &config(),
    );
    let local_chain = format!("local-{}", names::service_base(&port_name("here", "http")));
    assert_eq!(
        element(&rules, Container::ServiceIps, "10.96.0.60 . tcp . 80"),
        Some(format!("goto {local_chain}").as_str())
    );
    let local_rules = chain(&rules, "local", "here").unwrap();
    assert!(local_rules[0].contains("jump mark-for-masquerade"), "masquerade rule on the internal chain");
    assert!(local_rules[1].starts_with("numgen random mod 1"));
    // Only the local endpoint gets a chain; no cluster chain is needed.
    assert!(chain(&rules, "service", "here").is_none());
    assert!(endpoint_chains(&rules).iter().all(|c| !c.contains("10.244.2.2")));
    // Endpoints exist, just not here: dropped, not rejected.
    assert_eq!(element(&rules, Container::NoEndpointServices, "10.96.0.61 . tcp . 80"), Some("drop"));
    assert_eq!(rules.no_local_internal, 1);
}

#[test]
fn terminating_endpoints_are_a_fallback() {
    let svc = cluster_ip("web", "10.96.0.70", 80);
    // No ready endpoint: serving-and-terminating ones are used, not the others.
    let rules = rules_for(
        std::slice::from_ref(&svc),
        &[http_slice(
            "web-1",
            "web",
            json!([
                ep_with("10.244.1.2", NODE, false, true, true),
                ep_with("10.244.1.3", NODE, false, false, true),
                ep_with("10.244.1.4", NODE, false, false, false),
            ]),
        )],
        &config(),
    );
    let chains = endpoint_chains(&rules);
    assert_eq!(chains.len(), 1, "{chains:?}");
    assert!(chains[0].ends_with("__10.244.1.2/8080"));
    // One ready endpoint: the terminating one is not used any more.
    let rules = rules_for(
        &[svc],
        &[http_slice(
            "web-1",
            "web",
            json!([ep_with("10.244.1.2", NODE, false, true, true), ep("10.244.1.5", "node-b")]),
        )],
        &config(),
    );
    let chains = endpoint_chains(&rules);
    assert_eq!(chains.len(), 1);
    assert!(chains[0].ends_with("__10.244.1.5/8080"));
}

#[test]
fn named_ports_resolve_through_the_slice() {
    let svc = service(
        "multi",
        json!({"clusterIP": "10.96.0.80", "ports": [
            {"name": "http", "port": 80, "targetPort": "web"},
            {"name": "metrics", "port": 9100, "targetPort": "prom"},
            {"name": "dns", "port": 53, "protocol": "UDP"}
        ]}),
    );
    let slice = slice(
        "multi-1",
        "multi",
        json!([
            {"name": "http", "port": 8080, "protocol": "TCP"},
            {"name": "metrics", "port": 9090, "protocol": "TCP"},
            // Same name, other protocol: not the service's "dns" port... unless UDP.
            {"name": "dns", "port": 5353, "protocol": "TCP"},
            {"name": "unused", "port": 7000, "protocol": "TCP"}
        ]),
        json!([ep("10.244.1.2", NODE)]),
    );
    let rules = rules_for(&[svc], &[slice], &config());
    let dnat = |port: &str| {
        rules
            .chains
            .iter()
            .filter(|(c, _)| c.contains(&format!("default/multi/tcp/{port}__")))
            .flat_map(|(_, r)| r.iter().filter(|r| r.contains("dnat to")).cloned())
            .collect::<Vec<_>>()
    };
    assert_eq!(dnat("http"), vec!["meta l4proto tcp dnat to 10.244.1.2:8080".to_string()]);
    assert_eq!(dnat("metrics"), vec!["meta l4proto tcp dnat to 10.244.1.2:9090".to_string()]);
    assert!(rules.chains.keys().all(|c| !c.contains("unused") && !c.contains("/dns")));
    assert_eq!(element(&rules, Container::NoEndpointServices, "10.96.0.80 . udp . 53"), Some("goto reject-chain"));
}

#[test]
fn headless_external_name_and_unlabelled_slices_get_nothing() {
    let rules = rules_for(
        &[
            service("headless", json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80}]})),
            service("ext", json!({"type": "ExternalName", "externalName": "example.com"})),
            service("v6", json!({"clusterIP": "fd00::10", "ports": [{"name": "http", "port": 80}]})),
        ],
        &[http_slice("headless-1", "headless", json!([ep("10.244.1.2", NODE)]))],
        &config(),
    );
    assert_eq!(rules, Ruleset::default());

    // A selectorless service's hand-made slice is found by its label alone; a slice
    // without the label, or in another namespace, is not.
    let mut unlabelled = http_slice("manual-2", "manual", json!([ep("10.244.1.3", NODE)]));
    unlabelled.metadata.labels = None;
    let mut elsewhere = http_slice("manual-3", "manual", json!([ep("10.244.1.4", NODE)]));
    elsewhere.metadata.namespace = Some("other".into());
    let rules = rules_for(
        &[cluster_ip("manual", "10.96.0.90", 80)],
        &[http_slice("manual-1", "manual", json!([ep("192.0.2.50", "")])), unlabelled, elsewhere],
        &config(),
    );
    let chains = endpoint_chains(&rules);
    assert_eq!(chains.len(), 1);
    assert!(chains[0].ends_with("__192.0.2.50/8080"));
}

#[test]
fn partial_diff_touches_only_the_changed_service() {
    let config = config();
    let services = [cluster_ip("a", "10.96.1.1", 80), cluster_ip("b", "10.96.1.2", 80)];
    let before = rules_for(
        &services,
        &[
            http_slice("a-1", "a", json!([ep("10.244.1.2", NODE), ep("10.244.1.3", NODE)])),
            http_slice("b-1", "b", json!([ep("10.244.2.2", NODE), ep("10.244.2.3", NODE)])),
        ],
        &config,
    );
    let after = rules_for(
        &services,
        &[
            http_slice("a-1", "a", json!([ep("10.244.1.2", NODE), ep("10.244.1.4", NODE)])),
            http_slice("b-1", "b", json!([ep("10.244.2.2", NODE), ep("10.244.2.3", NODE)])),
        ],
        &config,
    );
    let t0 = Instant::now();
    let applied = Applied { rules: before, stale: Default::default() };
    let plan = diff::plan(SyncMode::Partial, &config, &applied, after.clone(), t0);
    let lines: Vec<&str> = plan.script.lines().collect();
    let new_ep = names::endpoint_chain(&port_name("a", "http"), "10.244.1.4".parse().unwrap(), 8080);
    let old_ep = names::endpoint_chain(&port_name("a", "http"), "10.244.1.3".parse().unwrap(), 8080);
    let service_a = format!("service-{}", names::service_base(&port_name("a", "http")));
    let t = "ip krate-proxy";
    let expected = vec![
        format!("add chain {t} {new_ep}"),
        // Chains in name order: endpoint- before service-.
        format!("add rule {t} {new_ep} ip saddr 10.244.1.4 jump mark-for-masquerade"),
        format!("add rule {t} {new_ep} meta l4proto tcp dnat to 10.244.1.4:8080"),
        format!("flush chain {t} {service_a}"),
        format!(
            "add rule {t} {service_a} ip daddr 10.96.1.1 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade"
        ),
        format!(
            "add rule {t} {service_a} numgen random mod 2 vmap {{ 0 : goto {}, 1 : goto {new_ep} }}",
            names::endpoint_chain(&port_name("a", "http"), "10.244.1.2".parse().unwrap(), 8080)
        ),
        // The old endpoint's chain is emptied now and deleted later.
        format!("flush chain {t} {old_ep}"),
    ];
    assert_eq!(lines, expected, "{}", plan.script);
    assert!(!plan.script.contains("default/b/"));
    assert_eq!(plan.next.stale.keys().collect::<Vec<_>>(), vec![&old_ep]);

    // Nothing changed and the stale chain is not old enough: nothing to do.
    let quiet = diff::plan(SyncMode::Partial, &config, &plan.next, after.clone(), t0 + Duration::from_millis(10));
    assert!(quiet.empty, "{}", quiet.script);
    // Once it is, it goes.
    let later = diff::plan(SyncMode::Partial, &config, &plan.next, after, t0 + config.stale_chain_delay);
    assert_eq!(later.script, format!("add chain {t} {old_ep}\ndelete chain {t} {old_ep}\n"));
    assert!(later.next.stale.is_empty());
}

#[test]
fn element_changes_are_deletes_and_adds() {
    let config = config();
    let before = rules_for(&[cluster_ip("a", "10.96.1.1", 80)], &[], &config);
    let after = rules_for(
        &[cluster_ip("a", "10.96.1.1", 80)],
        &[http_slice("a-1", "a", json!([ep("10.244.1.2", NODE)]))],
        &config,
    );
    let plan = diff::plan(
        SyncMode::Partial,
        &config,
        &Applied { rules: before, stale: Default::default() },
        after,
        Instant::now(),
    );
    let service_a = format!("service-{}", names::service_base(&port_name("a", "http")));
    assert!(plan.script.contains("delete element ip krate-proxy no-endpoint-services { 10.96.1.1 . tcp . 80 }\n"));
    assert!(
        plan.script.contains(&format!(
            "add element ip krate-proxy service-ips {{ 10.96.1.1 . tcp . 80 : goto {service_a} }}\n"
        ))
    );
    assert!(!plan.script.contains("cluster-ips"), "unchanged set untouched: {}", plan.script);
}

/// A network namespace of this test's own, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("krate-unit-{tag}-{}", std::process::id());
        let _ = std::process::Command::new("ip").args(["netns", "del", &name]).output();
        let made = std::process::Command::new("ip").args(["netns", "add", &name]).output();
        match made {
            Ok(out) if out.status.success() => Netns(name),
            Ok(out) => panic!(
                "these tests need root and network namespaces: `ip netns add` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => panic!("these tests need iproute2 (`ip`): {e}"),
        }
    }

    fn nft(&self) -> Nft {
        Nft::new(["ip", "netns", "exec", &self.0, "nft"].map(String::from).to_vec(), Duration::from_secs(30))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Every feature at once, for nft to parse.
fn everything() -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut lb = service(
        "lb",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.30", "externalIPs": ["192.0.2.7"],
               "externalTrafficPolicy": "Local", "loadBalancerSourceRanges": ["198.51.100.0/24"],
               "sessionAffinity": "ClientIP",
               "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                         {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                         {"name": "sctp", "port": 9, "protocol": "SCTP"}]}),
    );
    lb.status = Some(serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}})).unwrap());
    let services = vec![
        cluster_ip("web", "10.96.0.10", 80),
        cluster_ip("empty", "10.96.0.11", 80),
        service(
            "itp",
            json!({"clusterIP": "10.96.0.12", "internalTrafficPolicy": "Local", "ports": [{"name": "http", "port": 80}]}),
        ),
        lb,
    ];
    let slices = vec![
        http_slice("web-1", "web", json!([ep("10.244.1.2", NODE), ep("10.244.2.2", "node-b")])),
        http_slice("itp-1", "itp", json!([ep("10.244.2.3", "node-b")])),
        slice(
            "lb-1",
            "lb",
            json!([{"name": "http", "port": 8080}, {"name": "dns", "port": 53, "protocol": "UDP"},
                   {"name": "sctp", "port": 9, "protocol": "SCTP"}]),
            json!([ep("10.244.1.7", NODE), ep("10.244.2.7", "node-b")]),
        ),
    ];
    (services, slices)
}

#[tokio::test]
async fn nft_accepts_full_partial_and_rebuild_scripts() {
    let ns = Netns::new("nftcheck");
    let nft = ns.nft();
    let mut config = config();
    config.service_cidrs = vec!["10.96.0.0/16".parse().unwrap()];
    config.node_ip = Some("198.51.100.1".parse().unwrap());
    let (services, slices) = everything();
    let first = rules_for(&services, &slices, &config);
    let t0 = Instant::now();

    let full = diff::plan(SyncMode::Recreate, &config, &Applied::default(), first.clone(), t0);
    nft.check(&full.script).await.unwrap_or_else(|e| panic!("{e}\n{}", full.script));
    nft.apply(&full.script).await.expect("full script applies");

    // Change endpoints, drop a service, turn affinity off: a partial sync.
    let (mut services, mut slices) = everything();
    services.retain(|s| s.metadata.name.as_deref() != Some("itp"));
    services[2].spec.as_mut().unwrap().session_affinity = None;
    slices[0] = http_slice("web-1", "web", json!([ep("10.244.1.9", NODE)]));
    let second = rules_for(&services, &slices, &config);
    let partial = diff::plan(SyncMode::Partial, &config, &full.next, second.clone(), t0);
    assert!(!partial.empty);
    nft.check(&partial.script).await.unwrap_or_else(|e| panic!("{e}\n{}", partial.script));
    nft.apply(&partial.script).await.unwrap_or_else(|e| panic!("{e}\n{}", partial.script));

    // A full sync in place over it (re-adding what exists), deleting the stale chains.
    let in_place = diff::plan(SyncMode::Full, &config, &partial.next, second.clone(), t0 + Duration::from_secs(5));
    nft.apply(&in_place.script).await.unwrap_or_else(|e| panic!("{e}\n{}", in_place.script));
    assert!(in_place.next.stale.is_empty());
    let listed = nft.run(&["list", "table", "ip", "krate-proxy"], "").await.unwrap();
    assert!(!listed.contains("10.244.1.2/8080"), "stale chain deleted:\n{listed}");
    assert!(listed.contains("dnat to 10.244.1.9:8080"));
    assert!(!listed.contains("affinity-"), "affinity sets gone with affinity:\n{listed}");

    // Rebuilding over an existing table works too; and deleting it leaves nothing.
    let rebuild = diff::plan(SyncMode::Recreate, &config, &in_place.next, first, t0);
    nft.apply(&rebuild.script).await.unwrap_or_else(|e| panic!("{e}\n{}", rebuild.script));
    nft.delete_table("krate-proxy").await.unwrap();
    let tables = nft.run(&["list", "tables"], "").await.unwrap();
    assert!(!tables.contains("krate-proxy"), "{tables}");
}
