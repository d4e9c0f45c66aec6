//! The Endpoints, EndpointSlice and EndpointSlice mirroring controllers through the real
//! API server, with pods run by simulated nodes.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn pod(name: &str, node: &str, ready: bool) -> Pod {
    let annotations = if ready { json!({}) } else { json!({"sim.krate.dev/ready-after": "3600"}) };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}, "annotations": annotations},
        "spec": {"nodeName": node, "hostname": name, "subdomain": "web", "containers": [{"name": "c", "image": "nginx",
            "ports": [{"name": "http", "containerPort": 8080}]}]},
    }))
    .unwrap()
}

fn service(name: &str, extra: serde_json::Value) -> Service {
    let mut spec = json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]});
    spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"tier": "front"}}, "spec": spec})).unwrap()
}

async fn slices_of(api: &Api<EndpointSlice>, service: &str) -> Vec<EndpointSlice> {
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    api.list(&lp).await.unwrap().items
}

fn count(slices: &[EndpointSlice], ready: Option<bool>) -> usize {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| ready.is_none() || e.conditions.as_ref().and_then(|c| c.ready) == ready)
        .count()
}

#[tokio::test]
async fn services_get_slices_and_endpoints_of_their_pods() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["endpointslice", "endpoints"]);
    let nodes = cluster.simulated_nodes(2).await;
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");

    let svc = services.create(&PostParams::default(), &service("web", json!({}))).await.unwrap();
    // With no pods yet, one empty placeholder slice stands for the Service.
    let placeholder = eventually("placeholder slice", WAIT, || async {
        let s = slices_of(&slices, "web").await;
        (s.len() == 1).then_some(s)
    })
    .await;
    assert_eq!(count(&placeholder, None), 0);

    for (i, ready) in [true, true, false].into_iter().enumerate() {
        pods.create(&PostParams::default(), &pod(&format!("web-{i}"), &nodes[i % 2], ready)).await.unwrap();
    }
    let got = eventually("3 endpoints, 2 ready", WAIT, || async {
        let s = slices_of(&slices, "web").await;
        (count(&s, None) == 3 && count(&s, Some(true)) == 2).then_some(s)
    })
    .await;
    assert_eq!(got.len(), 1, "the placeholder is replaced by one slice: {got:?}");
    let slice = &got[0];
    assert_eq!(slice.address_type, "IPv4");
    let labels = slice.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["endpointslice.kubernetes.io/managed-by"], "endpointslice-controller.k8s.io");
    assert_eq!(labels["tier"], "front");
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Service", svc.metadata.uid.as_deref().unwrap()));
    let port = &slice.ports.as_ref().unwrap()[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("http"), Some(8080)));
    let first = slice.endpoints.as_ref().unwrap().iter().find(|e| e.hostname.as_deref() == Some("web-0")).unwrap();
    assert_eq!(first.node_name.as_deref(), Some(nodes[0].as_str()));
    assert_eq!(first.zone.as_deref(), Some("zone-0"));
    let conditions = first.conditions.as_ref().unwrap();
    assert_eq!((conditions.ready, conditions.serving, conditions.terminating), (Some(true), Some(true), Some(false)));

    let ep = eventually("Endpoints with 2 ready, 1 not ready", WAIT, || async {
        let ep = endpoints.get_opt("web").await.unwrap()?;
        let subset = ep.subsets.as_ref()?.first()?.clone();
        (subset.addresses.as_ref().map_or(0, Vec::len) == 2
            && subset.not_ready_addresses.as_ref().map_or(0, Vec::len) == 1)
            .then_some(ep)
    })
    .await;
    assert_eq!(ep.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/skip-mirror"], "true");
    assert!(ep.metadata.annotations.as_ref().unwrap().contains_key("endpoints.kubernetes.io/last-change-trigger-time"));
    assert_eq!(ep.subsets.as_ref().unwrap()[0].ports.as_ref().unwrap()[0].port, 8080);

    // A deleted pod leaves both.
    pods.delete("web-1", &DeleteParams::default()).await.unwrap();
    eventually("web-1 gone from the slices", WAIT, || async {
        let s = slices_of(&slices, "web").await;
        (count(&s, None) == 2).then_some(())
    })
    .await;
    eventually("web-1 gone from the Endpoints", WAIT, || async {
        let ep = endpoints.get_opt("web").await.unwrap()?;
        let subset = ep.subsets.as_ref()?.first()?.clone();
        (subset.addresses.as_ref().map_or(0, Vec::len) == 1).then_some(())
    })
    .await;

    // publishNotReadyAddresses makes every endpoint ready.
    services.create(&PostParams::default(), &service("all", json!({"publishNotReadyAddresses": true}))).await.unwrap();
    eventually("not-ready pod published as ready", WAIT, || async {
        let s = slices_of(&slices, "all").await;
        (count(&s, Some(true)) == 2).then_some(())
    })
    .await;

    // A deleted Service takes its slices and Endpoints with it.
    services.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("slices and Endpoints of web gone", WAIT, || async {
        (slices_of(&slices, "web").await.is_empty() && endpoints.get_opt("web").await.unwrap().is_none()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn slices_hold_at_most_100_endpoints() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["endpointslice"]);
    let nodes = cluster.simulated_nodes(1).await;
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    services.create(&PostParams::default(), &service("web", json!({}))).await.unwrap();
    for i in 0..130 {
        pods.create(&PostParams::default(), &pod(&format!("web-{i}"), &nodes[0], true)).await.unwrap();
    }
    let got = eventually("130 endpoints", Duration::from_secs(60), || async {
        let s = slices_of(&slices, "web").await;
        (count(&s, Some(true)) == 130).then_some(s)
    })
    .await;
    let mut sizes: Vec<usize> = got.iter().map(|s| s.endpoints.as_ref().map_or(0, Vec::len)).collect();
    sizes.sort();
    assert!(sizes.iter().all(|n| *n <= 100), "{sizes:?}");
    assert_eq!(sizes.len(), 2, "{sizes:?}");
}

#[tokio::test]
async fn custom_endpoints_of_selectorless_services_are_mirrored() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["endpointslice-mirroring", "endpoints"]);
    let client = cluster.admin().await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let external: Service = serde_json::from_value(
        json!({"metadata": {"name": "ext"}, "spec": {"ports": [{"name": "https", "port": 443}]}}),
    )
    .unwrap();
    services.create(&PostParams::default(), &external).await.unwrap();
    let custom: Endpoints = serde_json::from_value(json!({"metadata": {"name": "ext"}, "subsets": [{
        "addresses": [{"ip": "192.0.2.10"}, {"ip": "192.0.2.11"}], "notReadyAddresses": [{"ip": "192.0.2.12"}],
        "ports": [{"name": "https", "port": 8443}]}]}))
    .unwrap();
    let ep = endpoints.create(&PostParams::default(), &custom).await.unwrap();
    let got = eventually("mirrored slice", WAIT, || async {
        let s = slices_of(&slices, "ext").await;
        (count(&s, None) == 3).then_some(s)
    })
    .await;
    assert_eq!(count(&got, Some(true)), 2);
    let slice = &got[0];
    assert_eq!(
        slice.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/managed-by"],
        "endpointslicemirroring-controller.k8s.io"
    );
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Endpoints", ep.metadata.uid.as_deref().unwrap()));
    assert_eq!(slice.ports.as_ref().unwrap()[0].port, Some(8443));

    // The Endpoints controller leaves selector-less Services' Endpoints alone.
    let still = endpoints.get("ext").await.unwrap();
    assert!(!still.metadata.labels.unwrap_or_default().contains_key("endpointslice.kubernetes.io/skip-mirror"));

    endpoints.delete("ext", &DeleteParams::default()).await.unwrap();
    eventually("mirrored slices gone", WAIT, || async { slices_of(&slices, "ext").await.is_empty().then_some(()) })
        .await;
}

#[tokio::test]
async fn traffic_distribution_hints_ready_endpoints_at_their_zone_and_node() {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["endpointslice"]);
    let nodes = cluster.simulated_nodes(2).await;
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    for (i, ready) in [true, true, false].into_iter().enumerate() {
        pods.create(&PostParams::default(), &pod(&format!("web-{i}"), &nodes[i % 2], ready)).await.unwrap();
    }
    services
        .create(&PostParams::default(), &service("close", json!({"trafficDistribution": "PreferClose"})))
        .await
        .unwrap();
    services
        .create(&PostParams::default(), &service("same-node", json!({"trafficDistribution": "PreferSameNode"})))
        .await
        .unwrap();
    services.create(&PostParams::default(), &service("plain", json!({}))).await.unwrap();
    let endpoints_of = |name: &'static str| {
        let slices = slices.clone();
        async move {
            eventually(&format!("{name}: 3 endpoints, 2 ready"), WAIT, || async {
                let s = slices_of(&slices, name).await;
                (count(&s, None) == 3 && count(&s, Some(true)) == 2)
                    .then(|| s.into_iter().flat_map(|s| s.endpoints.unwrap_or_default()).collect::<Vec<_>>())
            })
            .await
        }
    };
    for (name, with_nodes) in [("close", false), ("same-node", true)] {
        for e in endpoints_of(name).await {
            let ready = e.conditions.as_ref().and_then(|c| c.ready) == Some(true);
            let hints = e.hints.clone();
            if !ready {
                assert!(hints.is_none(), "{name}: a not-ready endpoint gets no hints: {e:?}");
                continue;
            }
            let hints = hints.unwrap_or_else(|| panic!("{name}: no hints on {e:?}"));
            let zone = e.zone.clone().expect("simulated nodes have zones");
            assert_eq!(hints.for_zones.unwrap()[0].name, zone, "{name}");
            let for_nodes = hints.for_nodes.map(|n| n[0].name.clone());
            assert_eq!(for_nodes, if with_nodes { e.node_name.clone() } else { None }, "{name}");
        }
    }
    assert!(endpoints_of("plain").await.iter().all(|e| e.hints.is_none()));
}
