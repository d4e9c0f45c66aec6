//! Service cluster IPs and node ports over HTTPS with kube-rs.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use crate::common::TestServer;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::networking::v1::IPAddress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn svc(name: &str, spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn ports() -> serde_json::Value {
    json!([{"port": 80}])
}

fn err_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn in_dynamic_band(ip: &str) -> bool {
    let v = u32::from(ip.parse::<Ipv4Addr>().unwrap());
    let base = u32::from(Ipv4Addr::new(10, 43, 0, 0));
    v >= base + 256 && v < base + 65535
}

#[tokio::test]
async fn the_kubernetes_service_points_at_the_api_server() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let s = Api::<Service>::namespaced(client.clone(), "default").get("kubernetes").await.unwrap();
    let spec = s.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.43.0.1"));
    assert_eq!(spec.ports.unwrap()[0].port, 443);
    let ep = Api::<Endpoints>::namespaced(client.clone(), "default").get("kubernetes").await.unwrap();
    let subset = &ep.subsets.unwrap()[0];
    assert_eq!(subset.ports.as_ref().unwrap()[0].port, srv.running.port as i32);
    let ip = Api::<IPAddress>::all(client).get("10.43.0.1").await.unwrap();
    assert_eq!(ip.spec.parent_ref.name, "kubernetes");
}

#[tokio::test]
async fn cluster_ips_are_unique_even_under_concurrent_creates() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let mut tasks = Vec::new();
    for i in 0..24 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            api.create(&PostParams::default(), &svc(&format!("s{i}"), json!({"ports": ports()}))).await
        }));
    }
    let mut ips = HashSet::new();
    for t in tasks {
        let s = t.await.unwrap().unwrap();
        let spec = s.spec.unwrap();
        let ip = spec.cluster_ip.unwrap();
        assert!(in_dynamic_band(&ip), "dynamic IPs avoid the static band: {ip}");
        assert_eq!(spec.cluster_ips.unwrap(), vec![ip.clone()]);
        assert_eq!(spec.ip_families.unwrap(), vec!["IPv4"]);
        assert_eq!(
            spec.ports.unwrap()[0].target_port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
        );
        assert!(ips.insert(ip), "duplicate cluster IP");
    }
    // Each allocation is an IPAddress owned by its Service.
    let addrs = Api::<IPAddress>::all(client.clone()).list(&Default::default()).await.unwrap();
    assert_eq!(addrs.items.len(), 25, "24 Services and `kubernetes`");

    // A chosen IP in the static band; taken twice, or outside the range, is refused.
    let chosen = api
        .create(&PostParams::default(), &svc("chosen", json!({"clusterIP": "10.43.0.10", "ports": ports()})))
        .await
        .unwrap();
    assert_eq!(chosen.spec.unwrap().cluster_ip.as_deref(), Some("10.43.0.10"));
    let e = err_of(
        api.create(&PostParams::default(), &svc("again", json!({"clusterIP": "10.43.0.10", "ports": ports()}))).await,
    );
    assert_eq!(e.code, 422);
    assert!(e.message.contains("provided IP is already allocated"), "{}", e.message);
    let e = err_of(
        api.create(&PostParams::default(), &svc("outside", json!({"clusterIP": "192.168.9.9", "ports": ports()})))
            .await,
    );
    assert!(e.message.contains("is not in the valid range. The range of valid IPs is 10.43.0.0/16"), "{}", e.message);
    assert!(api.get_opt("again").await.unwrap().is_none() && api.get_opt("outside").await.unwrap().is_none());

    // Deleting releases the IP for others.
    api.delete("chosen", &DeleteParams::default()).await.unwrap();
    assert!(Api::<IPAddress>::all(client).get_opt("10.43.0.10").await.unwrap().is_none());
    api.create(&PostParams::default(), &svc("reuse", json!({"clusterIP": "10.43.0.10", "ports": ports()})))
        .await
        .unwrap();

    // A cluster IP may not change; omitting it on update keeps it.
    let e = err_of(
        api.patch(
            "reuse",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterIP": "10.43.0.11", "clusterIPs": ["10.43.0.11"]}})),
        )
        .await,
    );
    assert!(e.message.contains("may not change once set"), "{}", e.message);
    let mut current = api.get("reuse").await.unwrap();
    current.spec.as_mut().unwrap().cluster_ip = None;
    current.spec.as_mut().unwrap().cluster_ips = None;
    let kept = api.replace("reuse", &PostParams::default(), &current).await.unwrap();
    assert_eq!(kept.spec.unwrap().cluster_ip.as_deref(), Some("10.43.0.10"));

    // Headless Services get no IP.
    let headless = api
        .create(&PostParams::default(), &svc("headless", json!({"clusterIP": "None", "selector": {"a": "b"}})))
        .await
        .unwrap();
    assert_eq!(headless.spec.unwrap().cluster_ip.as_deref(), Some("None"));
}

#[tokio::test]
async fn node_ports_are_allocated_validated_and_released() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let np = api
        .create(&PostParams::default(), &svc("np", json!({"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30080}]})))
        .await
        .unwrap();
    let spec = np.spec.unwrap();
    let got: Vec<i32> = spec.ports.unwrap().iter().map(|p| p.node_port.unwrap()).collect();
    assert!((30000..=32767).contains(&got[0]) && got[1] == 30080, "{got:?}");
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));

    let e = err_of(
        api.create(
            &PostParams::default(),
            &svc("clash", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]})),
        )
        .await,
    );
    assert!(e.message.contains("provided port is already allocated"), "{}", e.message);
    let e = err_of(
        api.create(
            &PostParams::default(),
            &svc("far", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 40000}]})),
        )
        .await,
    );
    assert!(e.message.contains("The range of valid ports is 30000-32767"), "{}", e.message);
    assert!(api.get_opt("clash").await.unwrap().is_none());
    let ips = Api::<IPAddress>::all(client.clone()).list(&Default::default()).await.unwrap();
    assert_eq!(ips.items.len(), 2, "refused creates gave their cluster IPs back (only `kubernetes` and np hold one)");

    // Switching to ClusterIP releases the node ports.
    api.patch(
        "np",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"type": "ClusterIP", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}}),
        ),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &svc("takes-it", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]})),
    )
    .await
    .unwrap();
    api.delete("takes-it", &DeleteParams::default()).await.unwrap();
    api.create(
        &PostParams::default(),
        &svc("and-again", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]})),
    )
    .await
    .unwrap();

    // Validation.
    for (name, spec, what) in [
        ("noports", json!({}), "spec.ports: Required value"),
        ("badtype", json!({"type": "Magic", "ports": ports()}), "spec.type: Unsupported value: \"Magic\""),
        ("badport", json!({"ports": [{"port": 70000}]}), "spec.ports[0].port: Invalid value: 70000"),
        ("unnamed", json!({"ports": [{"port": 1}, {"port": 2}]}), "spec.ports[0].name: Required value"),
        (
            "npclusterip",
            json!({"ports": [{"port": 1, "nodePort": 30001}]}),
            "may not be used when `type` is 'ClusterIP'",
        ),
    ] {
        let e = err_of(api.create(&PostParams::default(), &svc(name, spec)).await);
        assert_eq!(e.code, 422, "{name}");
        assert!(e.message.contains(what), "{name}: {}", e.message);
    }
}
