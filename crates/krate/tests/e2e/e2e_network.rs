//! Service networking end to end: `krate server` with its own node runs inside a
//! network namespace the test makes (so its pod bridge, its nftables tables and its DNS
//! port are the test's own, and every packet stays in namespaces of this test). Real pods
//! resolve a Service by name through the cluster DNS (kube-system/kube-dns at
//! --cluster-dns) and reach it through its ClusterIP via the service proxy; the test
//! reaches its NodePort and its load balancer address from outside the namespace; pods get addresses from the node's
//! podCIDR; a NetworkPolicy lets only the pods it names reach the web pod; a clean stop
//! removes the proxy's, the pod network's and the policies' tables.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Server, free_port};
use crate::e2e_agent::wait_for;

const NODE: &str = "net-node";
const IMAGE: &str = "docker.io/library/busybox:network";
/// The namespace side and the host side of the test's link.
const NODE_IP: &str = "172.31.250.2";
const HOST_IP: &str = "172.31.250.1";

/// A network namespace of the test's; removed on drop with whatever still runs in it.
struct Netns {
    name: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("kr{tag}{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Netns { name }
    }

    /// One joined to this namespace by a veth pair: HOST_IP here, NODE_IP there.
    fn linked_to_host() -> Netns {
        let ns = Netns::new("net");
        let (host_if, ns_if) = (format!("krh{}", std::process::id()), format!("krn{}", std::process::id()));
        ip(&["link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &ns.name]);
        ip(&["addr", "add", &format!("{HOST_IP}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&["-n", &ns.name, "addr", "add", &format!("{NODE_IP}/30"), "dev", &ns_if]);
        ip(&["-n", &ns.name, "link", "set", &ns_if, "up"]);
        ns
    }

    /// Plugs `host` (None: this namespace) into this namespace's bridge `br0` with `addr`.
    fn plug(&self, host: Option<&Netns>, ifname: &str, addr: &str) {
        let port = format!("{ifname}p");
        match host {
            Some(h) => ip(&[
                "link", "add", ifname, "netns", &h.name, "type", "veth", "peer", "name", &port, "netns", &self.name,
            ]),
            None => ip(&["link", "add", ifname, "type", "veth", "peer", "name", &port, "netns", &self.name]),
        }
        ip(&["-n", &self.name, "link", "set", &port, "master", "br0", "up"]);
        let n = host.map(|h| vec!["-n", h.name.as_str()]).unwrap_or_default();
        ip(&[n.as_slice(), &["addr", "add", addr, "dev", ifname]].concat());
        ip(&[n.as_slice(), &["link", "set", ifname, "up"]].concat());
    }

    fn nft_tables(&self) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.name, "nft", "list", "tables"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A command run inside this namespace (nsenter rather than `ip netns exec`, which
    /// mounts a fresh /sys and so hides the cgroup hierarchies the agent runs pods under).
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.name)).arg(program);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Whatever still runs in it (a containerd orphaned by a failed test) would keep the
        // namespace, and its end of the link, alive.
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &self.name]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        // Deleting the namespace takes its veth pairs with it.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

fn start_server(ns: &Netns, data_dir: &Path, node: &str, node_ip: &str) -> Server {
    let port = free_port();
    let log = std::fs::File::create(data_dir.with_extension("log")).unwrap();
    let child = ns
        .command(env!("CARGO_BIN_EXE_krate"))
        .args(["server", "--bind-address", node_ip, "--secure-port", &port.to_string()])
        .args(["--node-name", node, "--node-ip", node_ip, "--kubelet-port", "0"])
        .arg("--data-dir")
        .arg(data_dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("krate starts");
    let server = Server { child, data_dir: data_dir.into(), port };
    wait_for("the server is up", Duration::from_secs(30), || server.kubeconfig().exists(), || server.log());
    wait_for_node(&server, node, &|| server.log());
    server
}

fn wait_for_node(server: &Server, node: &str, log: &dyn Fn() -> String) {
    let ready = || {
        let path = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
        String::from_utf8_lossy(&server.kubectl(&["get", "node", node, "-o", path]).stdout).into_owned()
    };
    wait_for(&format!("node {node} is Ready"), Duration::from_secs(60), || ready() == "True", log);
}

fn import_image(data_dir: &Path, dir: &Path) {
    let busybox = std::fs::read(krate_agent::runtime::pause_image::BUSYBOX).expect("busybox-static is installed");
    let applets = ["sh", "sleep", "echo", "mkdir", "httpd", "nslookup", "nc", "printf", "cat"];
    let layout = krate_agent::runtime::pause_image::oci_layout(IMAGE, &busybox, &applets, &["/bin/sh"]);
    let image: PathBuf = dir.join("network.tar");
    std::fs::write(&image, layout).unwrap();
    let import = Command::new(env!("CARGO_BIN_EXE_krate"))
        .args(["images", "import", "--data-dir"])
        .arg(data_dir)
        .arg(&image)
        .output()
        .unwrap();
    assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));
}

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: docker.io/library/busybox:network
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: docker.io/library/busybox:network
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "sleep 3600"]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

const POLICY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-labelled}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {access: web}}}]
    ports: [{port: http}]
"#;

fn field(server: &Server, pod: &str) -> String {
    server.kubectl_ok(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"])
}

/// An HTTP GET of / over a plain TCP connection: the body, or why it failed.
fn http_get(addr: &str) -> Result<String, String> {
    let addr = addr.parse().map_err(|e| format!("{e}"))?;
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    conn.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n").map_err(|e| e.to_string())?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).map_err(|e| e.to_string())?;
    Ok(reply)
}

#[test]
fn pods_resolve_services_by_name_and_reach_them_through_the_proxy() {
    let ns = Netns::linked_to_host();
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(&ns, &dir.path().join("server"), NODE, NODE_IP);
    import_image(&server.data_dir, dir.path());

    // The DNS Service is published at --cluster-dns's default with this server's endpoint.
    let dns_ip =
        server.kubectl_ok(&["get", "svc", "-n", "kube-system", "kube-dns", "-o", "jsonpath={.spec.clusterIP}"]);
    assert_eq!(dns_ip, "10.43.0.10");
    let slice = server.kubectl_ok(&[
        "get",
        "endpointslices",
        "-n",
        "kube-system",
        "-l",
        "kubernetes.io/service-name=kube-dns",
        "-o",
        "jsonpath={.items[*].endpoints[*].addresses[*]}",
    ]);
    assert_eq!(slice, NODE_IP);

    let manifests = dir.path().join("net.yaml");
    std::fs::write(&manifests, MANIFESTS).unwrap();
    server.kubectl_ok(&["apply", "-f", manifests.to_str().unwrap()]);
    for pod in ["web", "client"] {
        let ready = || {
            let path = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
            String::from_utf8_lossy(&server.kubectl(&["get", "pod", pod, "-o", path]).stdout).into_owned() == "True"
        };
        wait_for(&format!("pod {pod} is Ready"), Duration::from_secs(60), ready, || server.log());
    }
    let exec = |args: &[&str]| {
        let mut full = vec!["exec", "client", "--"];
        full.extend_from_slice(args);
        server.kubectl(&full)
    };
    // The pod's resolv.conf names the cluster DNS and the namespace's search path.
    let resolv = String::from_utf8_lossy(&exec(&["cat", "/etc/resolv.conf"]).stdout).into_owned();
    assert!(resolv.contains("nameserver 10.43.0.10"), "{resolv}");
    assert!(resolv.contains("default.svc.cluster.local"), "{resolv}");

    let cluster_ip = server.kubectl_ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let last = RefCell::new(String::new());
    let resolved = || {
        let out = exec(&["nslookup", "web.default.svc.cluster.local"]);
        *last.borrow_mut() =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out.status.success() && last.borrow().contains(&cluster_ip)
    };
    wait_for("the service name resolves in a pod", Duration::from_secs(30), resolved, || last.borrow().clone());

    // Through the ClusterIP: the proxy forwards port 80 to the pod's named port. (With nc: a
    // static busybox's wget crashes in glibc's name-service lookups.)
    let request = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {cluster_ip} 80");
    let fetched = || {
        let out = exec(&["sh", "-c", &request]);
        *last.borrow_mut() =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        last.borrow().contains("hello-from-web")
    };
    wait_for("the service answers at its ClusterIP", Duration::from_secs(30), fetched, || last.borrow().clone());

    // Names outside the cluster that do not exist get an answer (not a time-out), and an
    // unknown service in the zone is NXDOMAIN.
    let missing = exec(&["nslookup", "nothing.default.svc.cluster.local"]);
    assert!(!missing.status.success());
    let text = String::from_utf8_lossy(&missing.stdout).into_owned() + &String::from_utf8_lossy(&missing.stderr);
    assert!(text.to_lowercase().contains("nxdomain") || text.contains("can't find"), "{text}");

    // The NodePort on the node's address, from outside its namespace.
    let node_port = server.kubectl_ok(&["get", "svc", "web", "-o", "jsonpath={.spec.ports[0].nodePort}"]);
    let reached = || {
        *last.borrow_mut() = http_get(&format!("{NODE_IP}:{node_port}")).unwrap_or_else(|e| e);
        last.borrow().contains("hello-from-web")
    };
    wait_for("the NodePort answers", Duration::from_secs(30), reached, || last.borrow().clone());

    // LoadBalancer: the built-in service load balancer publishes the node's address, and
    // the proxy answers there on the Service's port.
    let lb = server.kubectl_ok(&["get", "svc", "web", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}"]);
    let published = || {
        let out = server.kubectl(&["get", "svc", "web", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}"]);
        String::from_utf8_lossy(&out.stdout) == NODE_IP
    };
    wait_for("the load balancer ingress is the node's address", Duration::from_secs(30), published, || lb.clone());
    let reached_lb = || {
        *last.borrow_mut() = http_get(&format!("{NODE_IP}:80")).unwrap_or_else(|e| e);
        last.borrow().contains("hello-from-web")
    };
    wait_for("the load balancer address answers", Duration::from_secs(30), reached_lb, || last.borrow().clone());

    // NetworkPolicy: once a policy selects the web pod, only pods it allows get through.
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    server.kubectl_ok(&["apply", "-f", policy.to_str().unwrap()]);
    let direct = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {} 8080", field(&server, "web"));
    let answers = || String::from_utf8_lossy(&exec(&["sh", "-c", &direct]).stdout).contains("hello-from-web");
    wait_for("the policy blocks the unlabelled client", Duration::from_secs(30), || !answers(), String::new);
    server.kubectl_ok(&["label", "pod", "client", "access=web"]);
    wait_for("the labelled client gets through", Duration::from_secs(30), answers, String::new);

    // The pod network: the node's podCIDR from node IPAM, the pods' addresses in it, and
    // the masquerade table of the host-gw network.
    let pod_cidr = server.kubectl_ok(&["get", "node", NODE, "-o", "jsonpath={.spec.podCIDR}"]);
    let prefix = pod_cidr.rsplit_once('.').map(|(net, _)| format!("{net}.")).unwrap_or_default();
    let web_ip = server.kubectl_ok(&["get", "pod", "web", "-o", "jsonpath={.status.podIP}"]);
    assert!(pod_cidr.ends_with("/24") && web_ip.starts_with(&prefix), "pod {web_ip} in {pod_cidr}");
    let tables = ns.nft_tables();
    let ours = ["krate-proxy", "krate-podnet", "krate-netpol"];
    assert!(ours.iter().all(|t| tables.contains(t)), "{tables}");
    server.kubectl_ok(&["delete", "pod", "web", "client", "--grace-period=1", "--timeout=60s"]);
    server.stop();
    let tables = ns.nft_tables();
    assert!(!ours.iter().any(|t| tables.contains(t)), "a clean stop removes them: {tables}");
}

/// The switch between the two hosts and this namespace.
const SERVER_IP: &str = "172.31.252.1";
const AGENT_IP: &str = "172.31.252.2";

const TWO_NODE_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeName: agent-host
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: docker.io/library/busybox:network
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "mkdir -p /www && echo hello-from-the-agent > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: near}
spec:
  nodeName: agent-host
  terminationGracePeriodSeconds: 1
  containers: [{name: sh, image: docker.io/library/busybox:network, imagePullPolicy: Never, command: ["sleep", "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: far}
spec:
  nodeName: server-host
  terminationGracePeriodSeconds: 1
  containers: [{name: sh, image: docker.io/library/busybox:network, imagePullPolicy: Never, command: ["sleep", "3600"]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"#;

/// Two hosts, each a namespace on one switch: `krate server` on one, `krate agent`
/// joined with the token on the other. The agent gets its networking identity through a
/// CSR approved for it, and with it runs the service proxy and the host-gw routes: a pod
/// on the server's node reaches a pod on the agent's directly and through the Service,
/// and a pod on the agent's node resolves through the cluster DNS on the server's.
#[test]
fn pods_on_two_nodes_reach_each_other_and_the_agent_proxies_services() {
    let switch = Netns::new("sw");
    ip(&["-n", &switch.name, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", &switch.name, "link", "set", "br0", "up"]);
    let (server_host, agent_host) = (Netns::new("sv"), Netns::new("ag"));
    let pid = std::process::id();
    switch.plug(Some(&server_host), &format!("kse{pid}"), &format!("{SERVER_IP}/24"));
    switch.plug(Some(&agent_host), &format!("kag{pid}"), &format!("{AGENT_IP}/24"));
    // This namespace joins the switch too, to reach the API server and the agent.
    switch.plug(None, &format!("kho{pid}"), "172.31.252.254/24");

    let dir = tempfile::tempdir().unwrap();
    let server = start_server(&server_host, &dir.path().join("server"), "server-host", SERVER_IP);
    let token = std::fs::read_to_string(server.data_dir.join("token")).expect("the join token");
    let agent_dir = dir.path().join("agent");
    let agent_log = agent_dir.with_extension("log");
    let mut agent = agent_host
        .command(env!("CARGO_BIN_EXE_krate"))
        .args(["agent", "--server", &format!("https://{SERVER_IP}:{}", server.port), "--token", token.trim()])
        .args(["--node-name", "agent-host", "--node-ip", AGENT_IP, "--kubelet-port", "0"])
        .arg("--data-dir")
        .arg(&agent_dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&agent_log).unwrap())
        .spawn()
        .expect("krate agent starts");
    let agent_log = || std::fs::read_to_string(&agent_log).unwrap_or_default();
    wait_for_node(&server, "agent-host", &agent_log);
    import_image(&server.data_dir, dir.path());
    import_image(&agent_dir, dir.path());

    // The agent's networking identity came through a CSR csrapproving approved.
    let approved = || {
        let csrs = server.kubectl_ok(&[
            "get",
            "csr",
            "-o",
            "jsonpath={range .items[*]}{.spec.username} {.spec.signerName} {.status.conditions[0].type}{\"\\n\"}{end}",
        ]);
        csrs.lines().any(|l| l == "system:node:agent-host kubernetes.io/kube-apiserver-client Approved")
    };
    wait_for("the agent's network CSR is approved", Duration::from_secs(30), approved, &agent_log);

    let manifests = dir.path().join("two.yaml");
    std::fs::write(&manifests, TWO_NODE_PODS).unwrap();
    server.kubectl_ok(&["apply", "-f", manifests.to_str().unwrap()]);
    for pod in ["web", "near", "far"] {
        let ready = || {
            let path = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
            String::from_utf8_lossy(&server.kubectl(&["get", "pod", pod, "-o", path]).stdout).into_owned() == "True"
        };
        wait_for(&format!("pod {pod} is Ready"), Duration::from_secs(60), ready, &agent_log);
    }
    // Each node has its own podCIDR, and its pods' addresses come from it.
    let cidr = |node: &str| server.kubectl_ok(&["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"]);
    let (server_cidr, agent_cidr) = (cidr("server-host"), cidr("agent-host"));
    assert_ne!(server_cidr, agent_cidr);
    let web_ip = field(&server, "web");
    let agent_prefix = agent_cidr.rsplit_once('.').map(|(n, _)| format!("{n}.")).unwrap();
    assert!(web_ip.starts_with(&agent_prefix), "web {web_ip} in {agent_cidr}");

    let last = RefCell::new(String::new());
    let fetch = |pod: &str, target: &str, port: &str| {
        let request = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {target} {port}");
        let out = server.kubectl(&["exec", pod, "--", "sh", "-c", &request]);
        *last.borrow_mut() =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        last.borrow().contains("hello-from-the-agent")
    };
    // Pod to pod across the nodes, by the routes each host got for the other's podCIDR.
    wait_for(
        "far reaches web across nodes",
        Duration::from_secs(30),
        || fetch("far", &web_ip, "8080"),
        || last.borrow().clone(),
    );
    // Through the Service's ClusterIP from both nodes: each node's proxy.
    let cluster_ip = server.kubectl_ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    wait_for(
        "far reaches the Service",
        Duration::from_secs(30),
        || fetch("far", &cluster_ip, "80"),
        || last.borrow().clone(),
    );
    wait_for(
        "near reaches the Service",
        Duration::from_secs(30),
        || fetch("near", &cluster_ip, "80"),
        || last.borrow().clone(),
    );
    // The agent's pods resolve through the cluster DNS on the server's host.
    let resolved = || {
        let out = server.kubectl(&["exec", "near", "--", "nslookup", "web.default.svc.cluster.local"]);
        *last.borrow_mut() =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out.status.success() && last.borrow().contains(&cluster_ip)
    };
    wait_for("near resolves the Service", Duration::from_secs(30), resolved, || last.borrow().clone());

    let tables = agent_host.nft_tables();
    assert!(tables.contains("krate-proxy") && tables.contains("krate-podnet"), "{tables}");
    server.kubectl_ok(&["delete", "pod", "web", "near", "far", "--grace-period=1", "--timeout=60s"]);
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let stopped = (0..1000).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        agent.try_wait().unwrap().is_some()
    });
    assert!(stopped, "krate agent did not stop on SIGTERM");
    let tables = agent_host.nft_tables();
    assert!(!tables.contains("krate-proxy") && !tables.contains("krate-podnet"), "{tables}");
    server.stop();
}
