//! NetworkPolicy enforcement with real traffic. Each test builds its own network
//! namespaces: a "node" with a bridge (br0, 10.77.0.1/24, br_netfilter's
//! bridge-nf-call-iptables on — a per-namespace setting) and three pods on it by
//! veths (10.77.0.11, .12, .13), each serving TCP on a few ports; the rules go into
//! the node's namespace with `ip netns exec NODE nft`. Nothing touches the host's own
//! network or nftables; every namespace is deleted when its guard drops.
//!
//! The pods, as the API sees them: pod0 "db" in prod (app=db, port "web" = 80), pod1
//! "client" in prod (role=client, port "web" = 8080), pod2 "other" in namespace other
//! (role=client, port "web" = 8080). Pods 0 and 1 run on this node, pod2 elsewhere
//! (its traffic still passes this node's bridge, so only its own node would police
//! it; here it is just a peer).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use krate_api::user::UserInfo;
use krate_net::netpol::{self, NetpolConfig, Snapshot, SyncMode};
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::history::History;
use crate::netns::{Netns, Servers};

const WAIT: Duration = Duration::from_secs(30);
const NODE_NAME: &str = "node-a";
const NODE_IP: &str = "10.77.0.1";
const TABLE: &str = "krate-netpol";
/// Every pod serves these.
const PORTS: [u16; 5] = [80, 8080, 32000, 32768, 32769];
/// The node serves this on its bridge address.
const NODE_PORT: u16 = 9000;

/// The node, its bridge and three pods serving `PORTS`; the node serves `NODE_PORT`.
struct Topology {
    node: Netns,
    pods: Vec<Netns>,
    _servers: Vec<Servers>,
}

impl Topology {
    fn new() -> Topology {
        let node = Netns::new("node");
        if !std::path::Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists() {
            panic!("the NetworkPolicy tests need the br_netfilter module (modprobe br_netfilter)");
        }
        // Per network namespace since Linux 5.3: set it here, not on the host.
        node.exec(&["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"]);
        node.ip(&["link", "add", "br0", "type", "bridge"]);
        node.ip(&["addr", "add", &format!("{NODE_IP}/24"), "dev", "br0"]);
        node.ip(&["link", "set", "br0", "up"]);
        let mut servers = vec![Servers::start(&node, NODE_IP, &[NODE_PORT], "node")];
        let mut pods = Vec::new();
        for i in 0..3 {
            let pod = Netns::new(&format!("pod{i}"));
            let veth = format!("vp{i}");
            node.ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &pod.name]);
            node.ip(&["link", "set", &veth, "master", "br0"]);
            node.ip(&["link", "set", &veth, "up"]);
            pod.ip(&["addr", "add", &format!("{}/24", pod_ip(i)), "dev", "eth0"]);
            pod.ip(&["link", "set", "eth0", "up"]);
            pod.ip(&["route", "add", "default", "via", NODE_IP]);
            servers.push(Servers::start(&pod, "0.0.0.0", &PORTS, &format!("pod{i}")));
            pods.push(pod);
        }
        let topology = Topology { node, pods, _servers: servers };
        // Everything reaches everything before any rule.
        for (from, to) in [(0, 1), (1, 2), (2, 0)] {
            assert!(topology.reaches(Some(from), &pod_ip(to), 80), "pod{from} → pod{to} before any policy");
        }
        topology
    }

    /// Whether a connection from pod `from` (None: the node) to `ip:port` gets an answer.
    fn reaches(&self, from: Option<usize>, ip: &str, port: u16) -> bool {
        let ns = from.map_or(&self.node, |i| &self.pods[i]);
        let addr: SocketAddr = format!("{ip}:{port}").parse().expect("address");
        let answer = ns.dial(addr, Duration::from_millis(700), Duration::from_secs(2)).join().expect("client thread");
        answer.is_ok_and(|answer| !answer.trim().is_empty())
    }

    /// Checks every (from, to, port, expected) at once (blocked ones wait out the
    /// timeout) and reports all mismatches together.
    fn expect(&self, cases: &[(Option<usize>, &str, u16, bool)]) {
        let results: Vec<bool> = std::thread::scope(|scope| {
            let handles: Vec<_> =
                cases.iter().map(|(from, to, port, _)| scope.spawn(move || self.reaches(*from, to, *port))).collect();
            handles.into_iter().map(|h| h.join().expect("check")).collect()
        });
        let wrong: Vec<String> = cases
            .iter()
            .zip(results)
            .filter(|((.., want), got)| want != got)
            .map(|((from, to, port, want), _)| {
                let from = from.map_or("node".to_string(), |i| format!("pod{i}"));
                format!("{from} → {to}:{port} should be {}", if *want { "open" } else { "blocked" })
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}

fn pod_ip(i: usize) -> String {
    format!("10.77.0.{}", 11 + i)
}

const DB: Option<usize> = Some(0);
const CLIENT: Option<usize> = Some(1);
const OTHER: Option<usize> = Some(2);
const NODE: Option<usize> = None;

fn db_ip() -> String {
    pod_ip(0)
}

/// The API objects matching the topology: pod `i` with `labels`.
fn api_pods(labels: [Value; 3]) -> Vec<Pod> {
    let [l0, l1, l2] = labels;
    [("prod", "db", NODE_NAME, l0, 80), ("prod", "client", NODE_NAME, l1, 8080), ("other", "other", "node-b", l2, 8080)]
        .into_iter()
        .enumerate()
        .map(|(i, (ns, name, node, labels, web))| {
            serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": name, "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                         "ports": [{"name": "web", "containerPort": web}]}]},
                "status": {"phase": "Running", "podIP": pod_ip(i), "podIPs": [{"ip": pod_ip(i)}]},
            }))
            .unwrap()
        })
        .collect()
}

fn default_pods() -> Vec<Pod> {
    api_pods([json!({"app": "db"}), json!({"role": "client"}), json!({"role": "client"})])
}

fn api_namespaces(other_labels: Value) -> Vec<Namespace> {
    vec![
        serde_json::from_value(json!({"metadata": {"name": "prod"}})).unwrap(),
        serde_json::from_value(json!({"metadata": {"name": "other", "labels": other_labels}})).unwrap(),
    ]
}

fn policy(name: &str, spec: Value) -> NetworkPolicy {
    serde_json::from_value(json!({"metadata": {"namespace": "prod", "name": name}, "spec": spec})).unwrap()
}

/// Renders and applies these objects into the node, as the runner's first sync does.
async fn apply(topology: &Topology, policies: &[NetworkPolicy], pods: &[Pod], namespaces: &[Namespace]) {
    let rules = netpol::render(&Snapshot::build(policies, pods, namespaces), NODE_NAME);
    let plan = netpol::plan(SyncMode::Full, TABLE, None, &rules);
    topology.node.nft().apply(&plan.script).await.unwrap_or_else(|e| panic!("{e}\n{}", plan.script));
}

/// A full script with every feature, then a partial one on top, pass `nft -c` and
/// apply in a fresh namespace; deleting the table leaves nothing behind.
#[tokio::test]
async fn nft_accepts_full_and_partial_scripts() {
    let ns = Netns::new("check");
    let nft = ns.nft();
    let everything = [
        policy(
            "all",
            json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {"from": [{"podSelector": {"matchLabels": {"role": "client"}}},
                              {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}},
                              {"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "client"}}},
                              {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "192.168.1.1/32"]}}],
                     "ports": [{"port": 80}, {"port": 32000, "endPort": 32768}, {"protocol": "UDP", "port": 53},
                               {"protocol": "SCTP", "port": 7}, {"protocol": "UDP"}, {"port": "web"}]},
                    {}],
                "egress": [
                    {"to": [{"ipBlock": {"cidr": "10.77.0.0/24", "except": ["10.77.0.12/32"]}}, {"podSelector": {}}],
                     "ports": [{"port": "web"}, {"port": 443}]},
                    {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}),
        ),
        policy(
            "db",
            json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress", "Egress"],
                   "ingress": [{"from": [{"podSelector": {}}]}]}),
        ),
    ];
    let namespaces = api_namespaces(json!({"team": "blue"}));
    let before = netpol::render(&Snapshot::build(&everything, &default_pods(), &namespaces), NODE_NAME);
    let full = netpol::plan(SyncMode::Full, TABLE, None, &before);
    nft.check(&full.script).await.unwrap_or_else(|e| panic!("{e}\n{}", full.script));
    nft.apply(&full.script).await.unwrap_or_else(|e| panic!("{e}\n{}", full.script));

    // Relabel, drop a policy, change a port: elements, chains and sets come and go.
    let pods = api_pods([json!({"app": "db", "role": "client"}), json!({}), json!({"role": "client"})]);
    let mut changed = everything[..1].to_vec();
    changed[0].spec.as_mut().unwrap().ingress.as_mut().unwrap()[0].ports.as_mut().unwrap()[0].port =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(81));
    let after = netpol::render(&Snapshot::build(&changed, &pods, &namespaces), NODE_NAME);
    let partial = netpol::plan(SyncMode::Partial, TABLE, Some(&before), &after);
    assert_eq!(partial.mode, SyncMode::Partial);
    assert!(partial.script.contains("delete chain") && partial.script.contains("delete set"), "{}", partial.script);
    let all = netpol::policy_base("prod", "all");
    assert!(!partial.script.contains(&format!("rule ip {TABLE} in-{all}")), "its rules stay:\n{}", partial.script);
    nft.check(&partial.script).await.unwrap_or_else(|e| panic!("{e}\n{}", partial.script));
    nft.apply(&partial.script).await.unwrap_or_else(|e| panic!("{e}\n{}", partial.script));

    // What the kernel holds now is what a fresh build of `after` would hold.
    let ports = nft.run(&["list", "set", "ip", TABLE, &format!("in0-ports-{all}")], "").await.expect("list");
    let ports: Vec<&str> = ports.split(|c: char| "{},\n".contains(c)).map(str::trim).collect();
    assert!(ports.contains(&"tcp . 81") && !ports.contains(&"tcp . 80"), "{ports:?}");
    let listed = nft.run(&["list", "table", "ip", TABLE], "").await.expect("list");
    assert!(!listed.contains(&netpol::policy_base("prod", "db")), "{listed}");
    netpol::cleanup(&{
        let mut config = NetpolConfig::new(NODE_NAME);
        config.nft_command = ns.nft_command();
        config
    })
    .await
    .expect("delete table");
    assert!(!ns.tables().contains(TABLE), "{}", ns.tables());
}

/// An empty ingress list isolates: nobody gets in, but the node does (kubelet probes),
/// replies to the pod's own connections come back, and other pods are unaffected.
#[tokio::test]
async fn default_deny_ingress_blocks_all_but_the_node_and_replies() {
    let topology = Topology::new();
    let deny = policy("deny", json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": []}));
    apply(&topology, &[deny], &default_pods(), &api_namespaces(json!({}))).await;
    let (db, client, other) = (db_ip(), pod_ip(1), pod_ip(2));
    topology.expect(&[
        (CLIENT, &db, 80, false),
        (OTHER, &db, 8080, false),
        (NODE, &db, 80, true),
        (DB, &client, 80, true),
        (DB, &other, 32000, true),
        (CLIENT, &other, 80, true),
        (OTHER, &client, 80, true),
    ]);
}

#[tokio::test]
async fn ingress_from_labelled_pods_only() {
    let topology = Topology::new();
    let allow = policy(
        "clients",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]}),
    );
    apply(&topology, &[allow], &default_pods(), &api_namespaces(json!({}))).await;
    let db = db_ip();
    // pod2 carries the label too, but in another namespace.
    topology.expect(&[(CLIENT, &db, 80, true), (CLIENT, &db, 32769, true), (OTHER, &db, 80, false)]);
}

#[tokio::test]
async fn namespace_selectors_alone_and_with_pod_selectors() {
    let topology = Topology::new();
    let by_namespace = policy(
        "by-namespace",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}], "ports": [{"port": 80}]}]}),
    );
    let both = policy(
        "both",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "client"}}}],
                            "ports": [{"port": 8080}]}]}),
    );
    let pods = api_pods([json!({"app": "db"}), json!({"role": "server"}), json!({"role": "client"})]);
    apply(&topology, &[by_namespace, both], &pods, &api_namespaces(json!({"team": "blue"}))).await;
    let db = db_ip();
    topology.expect(&[
        (OTHER, &db, 80, true),     // namespace other is blue
        (CLIENT, &db, 80, false),   // prod is not
        (OTHER, &db, 8080, true),   // a client, in some namespace
        (CLIENT, &db, 8080, false), // not a client
    ]);
}

#[tokio::test]
async fn ip_block_with_except() {
    let topology = Topology::new();
    let block = policy(
        "block",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"ipBlock": {"cidr": "10.77.0.0/24", "except": ["10.77.0.12/32"]}}]}]}),
    );
    apply(&topology, &[block], &default_pods(), &api_namespaces(json!({}))).await;
    let db = db_ip();
    topology.expect(&[(OTHER, &db, 80, true), (CLIENT, &db, 80, false), (NODE, &db, 80, true)]);
}

/// Egress isolation, with one allowed destination by a named port (the peer's own
/// "web" port): everything else is cut, the node's own address included (pod → node
/// traffic passes the input hook); connections into the pod still work.
#[tokio::test]
async fn egress_allow_list_blocks_the_rest() {
    let topology = Topology::new();
    let egress = policy(
        "db-out",
        json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Egress"],
               "egress": [{"to": [{"podSelector": {"matchLabels": {"role": "client"}}}], "ports": [{"port": "web"}]}]}),
    );
    apply(&topology, &[egress], &default_pods(), &api_namespaces(json!({}))).await;
    let (db, client, other) = (db_ip(), pod_ip(1), pod_ip(2));
    topology.expect(&[
        (DB, &client, 8080, true), // client's "web" port
        (DB, &client, 80, false),
        (DB, &other, 8080, false), // a client, but in namespace other
        (DB, NODE_IP, NODE_PORT, false),
        (CLIENT, &db, 80, true),
        (NODE, &db, 80, true),
        (CLIENT, &other, 80, true),
    ]);
}

#[tokio::test]
async fn port_range_with_end_port() {
    let topology = Topology::new();
    let range = policy(
        "range",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"ports": [{"protocol": "TCP", "port": 32000, "endPort": 32768}]}]}),
    );
    apply(&topology, &[range], &default_pods(), &api_namespaces(json!({}))).await;
    let db = db_ip();
    topology.expect(&[
        (CLIENT, &db, 32000, true),
        (CLIENT, &db, 32768, true),
        (CLIENT, &db, 32769, false),
        (OTHER, &db, 32768, true),
        (OTHER, &db, 80, false),
    ]);
}

async fn wait_reach(topology: &Arc<Topology>, what: &str, from: Option<usize>, to: String, port: u16, want: bool) {
    eventually(what, WAIT, || {
        let (topology, to) = (topology.clone(), to.clone());
        async move {
            let got = tokio::task::spawn_blocking(move || topology.reaches(from, &to, port)).await.expect("check");
            (got == want).then_some(())
        }
    })
    .await;
}

async fn create<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("object");
    api.create(&PostParams::default(), &object).await.expect("create")
}

async fn relabel<K>(api: &Api<K>, name: &str, labels: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"labels": labels}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.expect("relabel");
}

/// The real runner against a real API server, as a service account holding only
/// list/watch on pods, namespaces and networkpolicies: pods created with their node
/// and given addresses through pods/status, then policies, labels and namespaces
/// changed, with connectivity following (label changes as element-only partial
/// syncs); stop removes the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_follows_policies_pods_and_namespaces() {
    let topology = Arc::new(Topology::new());
    let cluster = TestCluster::start().await;
    let admin = cluster.admin().await;

    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for name in ["prod", "other"] {
        create(&namespaces, json!({"metadata": {"name": name}})).await;
        // The server may make it first; either way it must exist before pods.
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), name);
        let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
        match accounts.create(&PostParams::default(), &account).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => panic!("create service account: {e}"),
        }
    }
    for pod in default_pods() {
        let ns = pod.metadata.namespace.clone().unwrap();
        let name = pod.metadata.name.clone().unwrap();
        let api: Api<Pod> = Api::namespaced(admin.clone(), &ns);
        let status = serde_json::to_value(&pod.status).unwrap();
        let mut created = pod.clone();
        created.status = None;
        api.create(&PostParams::default(), &created).await.expect("create pod");
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .expect("set the pod's address");
    }

    // The identity a CNI daemonset would have, with only what enforcement reads.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    create(
        &roles,
        json!({"metadata": {"name": "krate-netpol"},
               "rules": [{"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
                         {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                          "verbs": ["get", "list", "watch"]}]}),
    )
    .await;
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    create(
        &bindings,
        json!({"metadata": {"name": "krate-netpol"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "krate-netpol"},
               "subjects": [{"kind": "ServiceAccount", "namespace": "kube-system", "name": "krate-netpol"}]}),
    )
    .await;
    let client = cluster.client_as(UserInfo::service_account("kube-system", "krate-netpol"));

    let mut config = NetpolConfig::new(NODE_NAME);
    config.nft_command = topology.node.nft_command();
    config.min_sync_interval = Duration::from_millis(50);
    let running = netpol::start(client, config);
    let history = History::collect(running.reports());
    let first = history.wait("the first sync", 0, |_| true).await;
    assert_eq!((first.mode, first.error.as_deref(), first.policies), (SyncMode::Full, None, 0), "{}", first.script);
    assert!(topology.reaches(CLIENT, &db_ip(), 80), "no policy, no isolation");

    // Only clients in prod, on the db's "web" port.
    let policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), "prod");
    create(
        &policies,
        json!({"metadata": {"name": "db"}, "spec": {"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}], "ports": [{"port": "web"}]}]}}),
    )
    .await;
    wait_reach(&topology, "the policy blocking other namespaces", OTHER, db_ip(), 80, false).await;
    topology.expect(&[(CLIENT, &db_ip(), 80, true), (CLIENT, &db_ip(), 8080, false), (NODE, &db_ip(), 8080, true)]);

    // Relabelling the client out of the policy: one element goes, nothing else.
    let prod_pods: Api<Pod> = Api::namespaced(admin.clone(), "prod");
    let before = history.last_number();
    relabel(&prod_pods, "client", json!({"role": "none"})).await;
    wait_reach(&topology, "the relabelled client blocked", CLIENT, db_ip(), 80, false).await;
    let syncs = history.since(before);
    let sync = syncs.iter().find(|r| r.script.contains(&pod_ip(1))).expect("the relabel's sync");
    assert_eq!((sync.mode, sync.error.as_deref()), (SyncMode::Partial, None), "{}", sync.script);
    assert!(
        sync.script.lines().all(|l| l.starts_with("delete element ip krate-netpol in0-pods-")),
        "only the peer set changes:\n{}",
        sync.script
    );
    relabel(&prod_pods, "client", json!({"role": "client"})).await;
    wait_reach(&topology, "the client let in again", CLIENT, db_ip(), 80, true).await;

    // Namespaces: allow namespace team=blue too (and port 8080, to see the change
    // land), then label namespace other so.
    policies
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ingress": [{"from": [
                {"podSelector": {"matchLabels": {"role": "client"}}},
                {"namespaceSelector": {"matchLabels": {"team": "blue"}}}],
                "ports": [{"port": "web"}, {"port": 8080}]}]}})),
        )
        .await
        .expect("patch policy");
    wait_reach(&topology, "the policy change synced", CLIENT, db_ip(), 8080, true).await;
    assert!(!topology.reaches(OTHER, &db_ip(), 80), "namespace other is not blue yet");
    relabel(&namespaces, "other", json!({"team": "blue"})).await;
    wait_reach(&topology, "namespace other let in", OTHER, db_ip(), 80, true).await;
    relabel(&namespaces, "other", json!({"team": null})).await;
    wait_reach(&topology, "namespace other out again", OTHER, db_ip(), 80, false).await;

    // The policy gone: no isolation, its chains and sets gone.
    policies.delete("db", &DeleteParams::default()).await.expect("delete policy");
    wait_reach(&topology, "isolation lifted", OTHER, db_ip(), 8080, true).await;
    let listed = topology.node.nft().run(&["list", "table", "ip", TABLE], "").await.expect("list");
    assert!(!listed.contains(&netpol::policy_base("prod", "db")), "{listed}");
    assert!(history.since(0).iter().all(|r| r.error.is_none()), "no failed syncs");

    tokio::time::timeout(WAIT, running.stop()).await.expect("stops in time").expect("stops cleanly");
    assert!(!topology.node.tables().contains(TABLE), "table removed: {}", topology.node.tables());
}
