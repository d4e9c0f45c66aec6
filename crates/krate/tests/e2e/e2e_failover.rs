//! Two `krate server` processes on one etcd: only the holder of the
//! kube-controller-manager Lease runs controllers; when it dies the other takes over
//! within seconds, and the controllers never run in both.

use std::time::{Duration, Instant};

use crate::common::{Server, free_port};
use krate_store::testsuite::etcd_process::EtcdCluster;

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Waits (bounded) until `server` serves kube-root-ca.crt in namespace `ns` — which
/// only the leading controller manager publishes.
fn root_ca_published(server: &Server, ns: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let out = server.kubectl(&["get", "configmap", "kube-root-ca.crt", "-n", ns, "-o", "name"]);
        if out.status.success() {
            return;
        }
        assert!(Instant::now() < deadline, "kube-root-ca.crt never appeared in {ns}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ok(out: std::process::Output) -> String {
    assert!(out.status.success(), "kubectl: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn started_controllers(server: &Server) -> bool {
    server.log().contains("starting controller")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_the_controllers_when_the_leader_dies() {
    let etcd = EtcdCluster::start(1).await;
    let endpoints = etcd.endpoints().join(",");
    let args = ["--storage", "etcd", "--etcd-servers", endpoints.as_str()];
    let dir = tempfile::tempdir().unwrap();
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    tokio::task::block_in_place(|| {
        let a = Server::start_with(&a_dir, free_port(), &args);
        // One cluster: the second server shares the first's CA and signing keys.
        copy_dir(&a_dir.join("server"), &b_dir.join("server"));
        let b = Server::start_with(&b_dir, free_port(), &args);

        let holder = ok(a.lease_field("kube-controller-manager", "holderIdentity"));
        assert!(a.log().contains(&format!("identity={holder}")), "the first server leads: {holder}");
        a.kubectl_ok(&["create", "namespace", "before"]);
        root_ca_published(&b, "before", Duration::from_secs(20));
        assert!(started_controllers(&a));
        assert!(!started_controllers(&b), "the standby runs no controllers while the leader lives");

        let scheduler_holder = |s: &Server| ok(s.lease_field("kube-scheduler", "holderIdentity"));
        let scheduling = scheduler_holder(&a);
        assert!(a.log().contains(&format!("identity={scheduling}")), "the first server schedules too");

        let mut a = a;
        a.child.kill().unwrap();
        a.child.wait().unwrap();
        let died = Instant::now();
        b.kubectl_ok(&["create", "namespace", "after"]);
        root_ca_published(&b, "after", Duration::from_secs(40));
        let took = died.elapsed();
        assert!(started_controllers(&b), "the standby took over: {}", b.log());
        // The lease lasts 15 s; the standby tries every 2-4.4 s.
        assert!(took < Duration::from_secs(30), "took over in {took:?}");
        eprintln!("controllers taken over {took:?} after the leader died");
        let transitions = ok(b.lease_field("kube-controller-manager", "leaseTransitions"));
        assert_eq!(transitions, "1");
        let deadline = Instant::now() + Duration::from_secs(40);
        while scheduler_holder(&b) == scheduling {
            assert!(Instant::now() < deadline, "the standby never took the scheduler lease");
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(b.log().contains(&format!("identity={}", scheduler_holder(&b))));
    });
    drop(etcd);
}
