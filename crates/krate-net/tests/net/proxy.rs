//! The service proxy with real traffic. Each test builds its own network namespaces:
//! a "node" with an uplink address (10.100.0.1) and pods behind veths (10.244.N.2, the
//! node end 10.244.N.1), runs a TCP server in each pod, programs the rules into the
//! node's namespace with `ip netns exec NODE nft` and connects from there (or from a
//! pod). Nothing touches the host's own network or nftables; every namespace is
//! deleted when its guard drops, also when a test fails.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use krate_api::user::UserInfo;
use krate_net::proxy::{self, Applied, ProxyConfig, Snapshot, SyncMode};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::history::History;
use crate::netns::{Netns, Servers, server_and_peer};

const WAIT: Duration = Duration::from_secs(30);
const NODE_NAME: &str = "node-a";
const NODE_IP: &str = "10.100.0.1";

/// The node and its pods. Pod `i` has 10.244.{i+1}.2.
struct Topology {
    node: Netns,
    pods: Vec<Netns>,
}

impl Topology {
    fn new(pods: usize) -> Topology {
        let node = Netns::new("node");
        // The uplink is a veth pair with both ends in the node (no dummy module
        // needed): it only has to give the node an address and a default route.
        node.ip(&["link", "add", "uplink", "type", "veth", "peer", "name", "uplink-peer"]);
        node.ip(&["addr", "add", &format!("{NODE_IP}/24"), "dev", "uplink"]);
        node.ip(&["link", "set", "uplink", "up"]);
        node.ip(&["link", "set", "uplink-peer", "up"]);
        // Service IPs need a route before DNAT picks the real destination.
        node.ip(&["route", "add", "default", "dev", "uplink"]);
        node.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        let mut out = Topology { node, pods: Vec::new() };
        for i in 0..pods {
            let pod = Netns::new(&format!("pod{i}"));
            let (node_end, pod_end) = (format!("10.244.{}.1/24", i + 1), format!("10.244.{}.2/24", i + 1));
            out.node.link(&format!("veth{i}"), &node_end, &pod, "eth0", &pod_end);
            pod.ip(&["route", "add", "default", "via", &format!("10.244.{}.1", i + 1)]);
            out.pods.push(pod);
        }
        out
    }

    fn pod_ip(i: usize) -> String {
        format!("10.244.{}.2", i + 1)
    }

    /// A server answering `podI PEER` on port 8080 of each pod.
    fn serve(&self) -> Vec<Servers> {
        self.pods
            .iter()
            .enumerate()
            .map(|(i, pod)| Servers::start(pod, "0.0.0.0", &[8080], &format!("pod{i}")))
            .collect()
    }
}

/// Connects from `from` to `addr` and returns the answer's words (server, peer).
fn connect(from: &Netns, addr: &str) -> std::io::Result<(String, String)> {
    let addr: SocketAddr = addr.parse().expect("address");
    let answer = from.dial(addr, Duration::from_secs(3), Duration::from_secs(3)).join().expect("client thread")?;
    Ok(server_and_peer(&answer))
}

/// Which servers answered `count` connections.
fn servers_reached(from: &Netns, addr: &str, count: usize) -> BTreeSet<String> {
    (0..count).map(|_| connect(from, addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}")).0).collect()
}

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"namespace": "default", "name": name}, "spec": spec})).unwrap()
}

fn slice(name: &str, service: &str, ips: &[(String, &str)]) -> EndpointSlice {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|(ip, node)| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name,
                     "labels": {proxy::SERVICE_NAME_LABEL: service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

fn config(topology: &Topology) -> ProxyConfig {
    let mut config = ProxyConfig::new(NODE_NAME);
    config.cluster_cidr = Some("10.244.0.0/16".parse().unwrap());
    config.nft_command = topology.node.nft_command();
    config
}

/// Renders and applies these objects into the node, as the runner's first sync does.
async fn apply(topology: &Topology, services: &[Service], slices: &[EndpointSlice]) -> ProxyConfig {
    let config = config(topology);
    let rules = proxy::render(&Snapshot::build(services, slices, NODE_NAME), &config);
    let plan = proxy::plan(SyncMode::Recreate, &config, &Applied::default(), rules, Instant::now());
    topology.node.nft().apply(&plan.script).await.unwrap_or_else(|e| panic!("{e}\n{}", plan.script));
    config
}

fn web_service() -> Service {
    service(
        "web",
        json!({"type": "NodePort", "clusterIP": "10.96.0.10",
               "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}]}),
    )
}

#[tokio::test]
async fn cluster_ip_and_node_port_spread_over_two_pods() {
    let topology = Topology::new(2);
    let _servers = topology.serve();
    let endpoints = [(Topology::pod_ip(0), NODE_NAME), (Topology::pod_ip(1), "node-b")];
    let config = apply(&topology, &[web_service()], &[slice("web-1", "web", &endpoints)]).await;

    let both: BTreeSet<String> = ["pod0", "pod1"].map(String::from).into();
    assert_eq!(servers_reached(&topology.node, "10.96.0.10:80", 40), both, "ClusterIP spread");
    assert_eq!(servers_reached(&topology.node, &format!("{NODE_IP}:30080"), 40), both, "NodePort spread");
    // Any local address takes the node port, the pod-facing one too.
    assert_eq!(servers_reached(&topology.node, "10.244.1.1:30080", 40), both);
    // From a pod: not masqueraded (the endpoint sees the pod's own address) unless
    // the connection comes back to itself (hairpin), which must be.
    for _ in 0..20 {
        let (server, peer) = connect(&topology.pods[1], "10.96.0.10:80").expect("pod to ClusterIP");
        match server.as_str() {
            "pod0" => assert_eq!(peer, Topology::pod_ip(1), "pod traffic keeps its source"),
            _ => assert_eq!(peer, "10.244.2.1", "hairpin traffic is masqueraded"),
        }
    }

    proxy::cleanup(&config).await.expect("delete table");
    assert!(!topology.node.tables().contains("krate-proxy"));
    assert!(connect(&topology.node, "10.96.0.10:80").is_err(), "no rules, no service");
}

#[tokio::test]
async fn services_without_endpoints_are_refused_at_once() {
    let topology = Topology::new(1);
    let _servers = topology.serve();
    let services = [
        web_service(),
        service(
            "empty",
            json!({"type": "NodePort", "clusterIP": "10.96.0.20",
                   "ports": [{"name": "http", "port": 80, "nodePort": 30090}]}),
        ),
    ];
    apply(&topology, &services, &[slice("web-1", "web", &[(Topology::pod_ip(0), NODE_NAME)])]).await;

    assert_eq!(connect(&topology.node, "10.96.0.10:80").expect("web works").0, "pod0");
    for addr in [
        "10.96.0.20:80".to_string(), // no endpoints
        format!("{NODE_IP}:30090"),  // its node port
        "10.96.0.10:81".to_string(), // a port the ClusterIP does not have
    ] {
        let started = Instant::now();
        let error = connect(&topology.node, &addr).expect_err(&format!("{addr} refused"));
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused, "{addr}: {error}");
        assert!(started.elapsed() < Duration::from_secs(1), "{addr} refused fast, took {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn client_ip_affinity_sticks_and_local_policy_stays_local() {
    let topology = Topology::new(2);
    let _servers = topology.serve();
    let endpoints = [(Topology::pod_ip(0), NODE_NAME), (Topology::pod_ip(1), "node-b")];
    let services = [
        service(
            "sticky",
            json!({"clusterIP": "10.96.0.30", "sessionAffinity": "ClientIP",
                   "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                   "ports": [{"name": "http", "port": 80}]}),
        ),
        service(
            "local",
            json!({"clusterIP": "10.96.0.31", "internalTrafficPolicy": "Local", "ports": [{"name": "http", "port": 80}]}),
        ),
    ];
    let slices = [slice("sticky-1", "sticky", &endpoints), slice("local-1", "local", &endpoints)];
    apply(&topology, &services, &slices).await;

    let sticky = servers_reached(&topology.node, "10.96.0.30:80", 20);
    assert_eq!(sticky.len(), 1, "one client, one endpoint: {sticky:?}");
    let local = servers_reached(&topology.node, "10.96.0.31:80", 20);
    assert_eq!(local, ["pod0".to_string()].into(), "only this node's endpoint");
}

async fn connect_async(topology: &Arc<Topology>, target: &str) -> std::io::Result<(String, String)> {
    let (topology, target) = (topology.clone(), target.to_string());
    tokio::task::spawn_blocking(move || connect(&topology.node, &target)).await.expect("client task")
}

async fn wait_reaching(topology: &Arc<Topology>, target: &str, want: &str) {
    eventually(&format!("traffic to {target} reaching {want}"), WAIT, || async move {
        matches!(connect_async(topology, target).await, Ok((server, _)) if server == want).then_some(())
    })
    .await;
}

/// A real API server, and the `default` namespace's Services and EndpointSlices.
struct TestApi {
    server: TestCluster,
    admin: kube::Client,
    slices: Api<EndpointSlice>,
}

impl TestApi {
    async fn start() -> TestApi {
        let server = TestCluster::start().await;
        let admin = server.admin().await;
        let slices = Api::namespaced(admin.clone(), "default");
        TestApi { server, admin, slices }
    }

    /// A Service without a selector (its endpoints are the test's to list); gives its
    /// ClusterIP:80.
    async fn create_service(&self, name: &str) -> String {
        let services: Api<Service> = Api::namespaced(self.admin.clone(), "default");
        let spec = json!({"ports": [{"name": "http", "port": 80, "targetPort": 8080}]});
        let made = services.create(&PostParams::default(), &service(name, spec)).await.expect("create service");
        let ip = made.spec.and_then(|s| s.cluster_ip).expect("allocated ClusterIP");
        format!("{ip}:80")
    }

    async fn create_slice(&self, name: &str, service: &str, endpoints: &[(String, &str)]) {
        self.slices.create(&PostParams::default(), &slice(name, service, endpoints)).await.expect("create slice");
    }
}

/// The real runner against a real API server: Services and hand-made EndpointSlices
/// through kube-rs, rules applied into the test's node namespace, then an endpoint
/// change applied as a partial sync, the old chain deleted a moment later, and the
/// table removed on stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_follows_the_api_incrementally() {
    let topology = Arc::new(Topology::new(2));
    let _servers = topology.serve();
    let api = TestApi::start().await;
    let web = api.create_service("web").await;
    let empty = api.create_service("empty").await;
    api.create_slice("web-manual", "web", &[(Topology::pod_ip(0), NODE_NAME)]).await;

    let running = proxy::start(api.admin.clone(), config(&topology));
    let history = History::collect(running.reports());
    wait_reaching(&topology, &web, "pod0").await;
    let first = history.all()[0].clone();
    assert_eq!((first.number, first.mode, first.error.as_deref()), (1, SyncMode::Recreate, None), "{}", first.script);
    let refused = connect_async(&topology, &empty).await;
    assert_eq!(refused.expect_err("no endpoints").kind(), std::io::ErrorKind::ConnectionRefused);

    // Move the endpoint to the other pod.
    let moved = slice("web-manual", "web", &[(Topology::pod_ip(1), "node-b")]);
    api.slices
        .patch("web-manual", &PatchParams::default(), &Patch::Merge(json!({"endpoints": moved.endpoints})))
        .await
        .expect("update slice");
    wait_reaching(&topology, &web, "pod1").await;
    let change = history.wait("the sync of the change", first.number, |r| r.script.contains("10.244.2.2")).await;
    assert_eq!((change.mode, change.error.as_deref()), (SyncMode::Partial, None), "{}", change.script);
    assert!(!change.script.contains("add table"), "partial:\n{}", change.script);
    assert!(change.script.contains("dnat to 10.244.2.2:8080"), "{}", change.script);
    assert!(!change.script.contains("default/empty/"), "only the changed service:\n{}", change.script);
    assert!(change.script.lines().count() < 20, "a handful of commands:\n{}", change.script);
    for _ in 0..10 {
        assert_eq!(connect_async(&topology, &web).await.expect("connect").0, "pod1", "the old endpoint gets nothing");
    }
    // The old endpoint's chain was flushed; a later sync deletes it.
    let cleanup = history
        .wait("the old chain deleted", change.number, |r| {
            r.script.contains("delete chain") && r.script.contains("10.244.1.2/8080")
        })
        .await;
    assert_eq!((cleanup.mode, cleanup.error.as_deref()), (SyncMode::Partial, None));
    let listed = topology.node.nft().run(&["list", "table", "ip", "krate-proxy"], "").await.expect("list");
    assert!(!listed.contains("10.244.1.2/8080"), "{listed}");

    tokio::time::timeout(WAIT, running.stop()).await.expect("stops in time").expect("stops cleanly");
    assert!(!topology.node.tables().contains("krate-proxy"), "table removed: {}", topology.node.tables());
}

/// A failed sync is retried: a failed rebuild by rebuilding, a failed partial sync by
/// a full one. `nft` here fails while a flag file is missing. The proxy runs as
/// system:kube-proxy, as upstream's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_syncs_are_retried_in_full() {
    let topology = Arc::new(Topology::new(1));
    let _servers = topology.serve();
    let api = TestApi::start().await;
    let web = api.create_service("web").await;
    api.create_slice("web-manual", "web", &[(Topology::pod_ip(0), NODE_NAME)]).await;

    // The proxy as upstream's kube-proxy identity: system:node-proxier's grants suffice.
    let proxy_client = api.server.client_as(UserInfo::component("system:kube-proxy"));
    let dir = tempfile::tempdir().expect("temp dir");
    let flag = dir.path().join("nft-works");
    let mut config = config(&topology);
    let wrapper = format!(
        "test -e \"$0\" || {{ cat >/dev/null; echo refused by the test >&2; exit 1; }}; exec ip netns exec {} nft \"$@\"",
        topology.node.name
    );
    config.nft_command = vec!["sh".into(), "-c".into(), wrapper, flag.display().to_string()];
    config.retry_interval = Duration::from_millis(300);
    let running = proxy::start(proxy_client, config);
    let history = History::collect(running.reports());

    let failed = history.wait("a failed first sync", 0, |r| r.error.is_some()).await;
    assert_eq!(failed.mode, SyncMode::Recreate);
    assert!(failed.error.as_deref().unwrap().contains("refused by the test"), "{:?}", failed.error);
    std::fs::write(&flag, "").expect("flag");
    let rebuilt = history.wait("a successful sync", failed.number, |r| r.error.is_none()).await;
    assert_eq!(rebuilt.mode, SyncMode::Recreate);
    wait_reaching(&topology, &web, "pod0").await;

    std::fs::remove_file(&flag).expect("flag");
    let other = api.create_service("other").await;
    api.create_slice("other-manual", "other", &[(Topology::pod_ip(0), NODE_NAME)]).await;
    let failed = history.wait("a failed partial sync", rebuilt.number, |r| r.error.is_some()).await;
    assert_eq!(failed.mode, SyncMode::Partial, "{}", failed.script);
    std::fs::write(&flag, "").expect("flag");
    let full = history.wait("a successful sync", failed.number, |r| r.error.is_none()).await;
    assert_eq!(full.mode, SyncMode::Full, "{}", full.script);
    wait_reaching(&topology, &other, "pod0").await;
    wait_reaching(&topology, &web, "pod0").await;

    tokio::time::timeout(WAIT, running.stop()).await.expect("stops in time").expect("stops cleanly");
    assert!(!topology.node.tables().contains("krate-proxy"));
}
