//! Topology spread, inter-pod anti-affinity, scheduling gates, preemption and several
//! profiles, against a real API server with simulated nodes.

use std::collections::BTreeMap;

use crate::common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use krate_agent::simulated;
use krate_testkit::{TestCluster, eventually};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn spread(extra: serde_json::Value) -> serde_json::Value {
    let mut c = json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        c[k] = v;
    }
    json!({"topologySpreadConstraints": [c]})
}

async fn zones_of(pods: &Api<Pod>, nodes: &Api<Node>, names: &[&str]) -> BTreeMap<String, usize> {
    let mut zones = BTreeMap::new();
    for name in names {
        let node = nodes.get(&bound_node(pods, name).await).await.unwrap();
        let zone = node.metadata.labels.unwrap()["topology.kubernetes.io/zone"].clone();
        *zones.entry(zone).or_default() += 1;
    }
    zones
}

#[tokio::test]
async fn topology_spread_max_skew_min_domains_and_match_label_keys() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes_with(simulated::Options { count: 4, zones: 2, ..Default::default() }).await;
    cluster.scheduler();
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let names = ["w0", "w1", "w2", "w3"];
    for name in names {
        create(&pods, labelled(pod(name, "100m", spread(json!({}))), json!({"app": "web"}))).await;
        bound_node(&pods, name).await;
    }
    let zones = zones_of(&pods, &nodes, &names).await;
    assert_eq!(zones.values().copied().collect::<Vec<_>>(), [2, 2], "{zones:?}");

    // minDomains 3 with only 2 zones: the global minimum counts as 0, so a zone may hold
    // at most maxSkew (1) pods: the first pod of each zone fits, a third pod does not.
    let md = spread(json!({"minDomains": 3, "labelSelector": {"matchLabels": {"app": "md"}}}));
    for name in ["m0", "m1", "m2"] {
        create(&pods, labelled(pod(name, "100m", md.clone()), json!({"app": "md"}))).await;
    }
    let bound: Vec<String> = eventually("two md pods bound", WAIT, || async {
        let mut bound = Vec::new();
        for name in ["m0", "m1", "m2"] {
            if pods.get(name).await.ok()?.spec?.node_name.is_some() {
                bound.push(name.to_string());
            }
        }
        (bound.len() == 2).then_some(bound)
    })
    .await;
    let pending = ["m0", "m1", "m2"].into_iter().find(|n| !bound.iter().any(|b| b == n)).unwrap();
    let message = unschedulable(&pods, pending, "Unschedulable").await;
    assert!(
        message.starts_with("0/4 nodes are available: 4 node(s) didn't match pod topology spread constraints."),
        "{message}"
    );

    // matchLabelKeys: a new revision spreads on its own, ignoring the old revision's pods.
    let by_rev = spread(json!({"matchLabelKeys": ["rev"]}));
    for name in ["r0", "r1"] {
        create(&pods, labelled(pod(name, "100m", by_rev.clone()), json!({"app": "web", "rev": "2"}))).await;
    }
    let zones = zones_of(&pods, &nodes, &["r0", "r1"]).await;
    assert_eq!(zones.len(), 2, "one per zone: {zones:?}");
}

#[tokio::test]
async fn topology_spread_node_inclusion_policies() {
    let mut cluster = TestCluster::start().await;
    // Zone 0 nodes are labelled pool=a; zone 1 nodes are tainted.
    cluster
        .simulated_nodes_with(simulated::Options {
            count: 2,
            prefix: "a-".into(),
            labels: vec![("pool".into(), "a".into()), ("topology.kubernetes.io/zone".into(), "za".into())],
            ..Default::default()
        })
        .await;
    cluster
        .simulated_nodes_with(simulated::Options {
            count: 1,
            prefix: "b-".into(),
            labels: vec![("topology.kubernetes.io/zone".into(), "zb".into())],
            ..Default::default()
        })
        .await;
    let client = cluster.admin().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let taint = json!({"spec": {"taints": [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]}});
    nodes.patch("b-0", &PatchParams::default(), &Patch::Merge(&taint)).await.unwrap();
    cluster.scheduler();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, labelled(pod("first", "100m", json!({"nodeName": "a-0"})), json!({"app": "web"}))).await;

    // nodeAffinityPolicy Honor (default): zone zb is outside the pod's nodeSelector, so only
    // za counts and the pod fits there despite the skew to zb.
    let mut spec = spread(json!({}));
    spec["nodeSelector"] = json!({"pool": "a"});
    create(&pods, labelled(pod("honor", "100m", spec.clone()), json!({"app": "web"}))).await;
    assert!(bound_node(&pods, "honor").await.starts_with("a-"));

    // nodeAffinityPolicy Ignore: zb (0 pods) counts, za already has 2: skew too big.
    spec["topologySpreadConstraints"][0]["nodeAffinityPolicy"] = json!("Ignore");
    create(&pods, labelled(pod("ignore", "100m", spec), json!({"app": "web"}))).await;
    let message = unschedulable(&pods, "ignore", "Unschedulable").await;
    assert!(message.contains("2 node(s) didn't match pod topology spread constraints"), "{message}");

    // nodeTaintsPolicy Honor: the tainted zb node does not count, so za is the only domain.
    let spec = spread(json!({"nodeTaintsPolicy": "Honor"}));
    create(&pods, labelled(pod("taints-honor", "100m", spec), json!({"app": "web"}))).await;
    assert!(bound_node(&pods, "taints-honor").await.starts_with("a-"));
    // Default (Ignore): zb counts with 0 pods and za is 3 ahead.
    create(&pods, labelled(pod("taints-ignore", "100m", spread(json!({}))), json!({"app": "web"}))).await;
    let message = unschedulable(&pods, "taints-ignore", "Unschedulable").await;
    assert!(message.contains("2 node(s) didn't match pod topology spread constraints"), "{message}");
}

#[tokio::test]
async fn required_pod_anti_affinity_keeps_replicas_apart() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes(3).await;
    cluster.scheduler();
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}}});
    let mut used = Vec::new();
    for i in 0..3 {
        let name = format!("db-{i}");
        create(&pods, labelled(pod(&name, "100m", anti.clone()), json!({"app": "db"}))).await;
        used.push(bound_node(&pods, &name).await);
    }
    used.sort();
    used.dedup();
    assert_eq!(used.len(), 3, "one per node");
    create(&pods, labelled(pod("db-3", "100m", anti), json!({"app": "db"}))).await;
    let message = unschedulable(&pods, "db-3", "Unschedulable").await;
    // The existing replicas' own rule is checked first, as upstream does.
    assert!(
        message.starts_with("0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules."),
        "{message}"
    );
    // A pod without the rule is kept off their nodes by theirs only if it matches: it does not.
    create(&pods, pod("free", "100m", json!({}))).await;
    bound_node(&pods, "free").await;
    // Deleting one replica lets the fourth in.
    pods.delete("db-0", &Default::default()).await.unwrap();
    bound_node(&pods, "db-3").await;
}

#[tokio::test]
async fn scheduling_gates_hold_pods_until_removed() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes(1).await;
    cluster.scheduler();
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, pod("gated", "100m", json!({"schedulingGates": [{"name": "example.com/quota"}]}))).await;
    let message = unschedulable(&pods, "gated", "SchedulingGated").await;
    assert_eq!(message, "Scheduling is blocked due to non-empty scheduling gates");
    stays_pending(&pods, "gated").await;
    let ungate = json!({"spec": {"schedulingGates": null}});
    pods.patch("gated", &PatchParams::default(), &Patch::Merge(&ungate)).await.unwrap();
    bound_node(&pods, "gated").await;
}

#[tokio::test]
async fn preemption_evicts_lower_priority_pods() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes_with(simulated::Options { count: 1, cpu: "2".into(), ..Default::default() }).await;
    cluster.scheduler();
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Pods get priorities from classes (the Priority admission plugin).
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value, policy) in
        [("low", 1, "PreemptLowerPriority"), ("polite", 100, "Never"), ("urgent", 1000, "PreemptLowerPriority")]
    {
        let pc =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value, "preemptionPolicy": policy}))
                .unwrap();
        classes.create(&Default::default(), &pc).await.unwrap();
    }
    create(&pods, pod("low", "1500m", json!({"priorityClassName": "low"}))).await;
    bound_node(&pods, "low").await;

    // preemptionPolicy Never: it waits instead.
    create(&pods, pod("polite", "1", json!({"priorityClassName": "polite"}))).await;
    let message = unschedulable(&pods, "polite", "Unschedulable").await;
    assert_eq!(
        message,
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    );

    create(&pods, pod("urgent", "1", json!({"priorityClassName": "urgent"}))).await;
    let nominated =
        eventually("urgent nominated", WAIT, || async { pods.get("urgent").await.ok()?.status?.nominated_node_name })
            .await;
    assert_eq!(nominated, "sim-node-0");
    let message = event_message(&client, "default", "low", "Preempted").await;
    assert!(message.starts_with("Preempted by pod "), "{message}");
    assert_eq!(bound_node(&pods, "urgent").await, "sim-node-0");
    eventually("low deleted", WAIT, || async { pods.get_opt("low").await.ok()?.is_none().then_some(()) }).await;
}

#[tokio::test]
async fn profiles_from_a_configuration_file() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes_with(simulated::Options { count: 2, cpu: "4".into(), ..Default::default() }).await;
    let config = cluster.dir.path().join("scheduler.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n\
         - schedulerName: default-scheduler\n\
         - schedulerName: bin-packer\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: MostAllocated\n\
         \n  plugins:\n    score:\n      disabled:\n      - name: NodeResourcesBalancedAllocation\n",
    )
    .unwrap();
    cluster.scheduler_with(krate_scheduler::Options { config: Some(config), ..Default::default() });
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, pod("seed", "1", json!({"nodeName": "sim-node-1"}))).await;
    // MostAllocated packs onto the busier node; the default spreads to the emptier one.
    create(&pods, pod("packed", "1", json!({"schedulerName": "bin-packer"}))).await;
    assert_eq!(bound_node(&pods, "packed").await, "sim-node-1");
    create(&pods, pod("spread", "100m", json!({}))).await;
    assert_eq!(bound_node(&pods, "spread").await, "sim-node-0");
    let message = event_message(&client, "default", "packed", "Scheduled").await;
    assert_eq!(message, "Successfully assigned default/packed to sim-node-1");
}

#[tokio::test]
async fn pods_without_constraints_spread_by_their_service_and_replica_set() {
    let mut cluster = TestCluster::start().await;
    cluster.simulated_nodes_with(simulated::Options { count: 4, zones: 2, ..Default::default() }).await;
    // Only spreading scores, so nothing else decides between the nodes.
    let config = cluster.dir.path().join("scheduler.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n\
         - schedulerName: default-scheduler\n  plugins:\n    score:\n      disabled:\n      - name: '*'\n      enabled:\n      - name: PodTopologySpread\n        weight: 2\n",
    )
    .unwrap();
    cluster.scheduler_with(krate_scheduler::Options { config: Some(config), ..Default::default() });
    let client = cluster.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), "default");
    let svc = json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    services.create(&Default::default(), &serde_json::from_value(svc).unwrap()).await.unwrap();
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(client.clone(), "default");
    let rs = json!({"metadata": {"name": "batch"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "batch"}},
        "template": {"metadata": {"labels": {"app": "batch"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let rs = replica_sets.create(&Default::default(), &serde_json::from_value(rs).unwrap()).await.unwrap();
    // The scheduler's informers see the Service and the ReplicaSet before the pods come.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let owned_by_rs = |p: Pod| {
        let mut p = labelled(p, json!({"app": "batch"}));
        p.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "batch", "uid": rs.metadata.uid.clone().unwrap(), "controller": true}))
            .unwrap(),
        ]);
        p
    };
    for (group, make) in [
        ("web", Box::new(|p: Pod| labelled(p, json!({"app": "web"}))) as Box<dyn Fn(Pod) -> Pod>),
        ("batch", Box::new(owned_by_rs)),
    ] {
        let names: Vec<String> = (0..4).map(|i| format!("{group}-{i}")).collect();
        let mut hosts = std::collections::BTreeSet::new();
        for name in &names {
            create(&pods, make(pod(name, "100m", json!({})))).await;
            hosts.insert(bound_node(&pods, name).await);
        }
        // Each pod went to a node (and zone) with fewest of its group: one per node.
        assert_eq!(hosts.len(), 4, "{group}: {hosts:?}");
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let zones = zones_of(&pods, &nodes, &refs).await;
        assert_eq!(zones.values().copied().collect::<Vec<_>>(), [2, 2], "{group}: {zones:?}");
    }
}
