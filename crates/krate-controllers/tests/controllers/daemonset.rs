//! The DaemonSet controller through the real API server, on simulated nodes. Daemon
//! pods are pinned to their node by node affinity, as upstream; until the scheduler
//! lands a tiny binder here binds them (POST pods/NAME/binding to the pinned node).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use krate_testkit::{TestCluster, eventually, merge_json, pod_ready};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

/// Binds unbound pods pinned by a metadata.name matchFields term, as the scheduler would.
async fn bind_pinned(client: kube::Client) {
    let pods: Api<Pod> = Api::all(client.clone());
    loop {
        if let Ok(list) = pods.list(&ListParams::default()).await {
            for p in list.items {
                let spec = p.spec.clone().unwrap_or_default();
                if spec.node_name.is_some() || p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let node = spec
                    .affinity
                    .and_then(|a| a.node_affinity)
                    .and_then(|a| a.required_during_scheduling_ignored_during_execution)
                    .and_then(|s| {
                        s.node_selector_terms.into_iter().flat_map(|t| t.match_fields.unwrap_or_default()).next()
                    })
                    .and_then(|r| r.values.and_then(|v| v.into_iter().next()));
                let (Some(node), Some(name), Some(ns)) = (node, p.metadata.name, p.metadata.namespace) else {
                    continue;
                };
                let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let _ =
                    api.create_subresource::<Value, Value>("binding", &name, &PostParams::default(), &binding).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn cluster(nodes: usize) -> (TestCluster, kube::Client, Vec<String>) {
    let mut cluster = TestCluster::start().await;
    cluster.controllers(&["daemonset"]);
    let names = cluster.simulated_nodes(nodes).await;
    let client = cluster.admin().await;
    cluster.spawn(bind_pinned(client.clone()));
    (cluster, client, names)
}

fn daemonset(name: &str, spec: Value) -> DaemonSet {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {"sim.krate.dev/ready-after": "1"}},
                "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
            },
        },
    });
    merge_json(&mut v["spec"], spec);
    serde_json::from_value(v).unwrap()
}

fn image(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0].image.clone().unwrap()
}

/// Live pods of `app` by node.
async fn pods_by_node(pods: &Api<Pod>, app: &str) -> BTreeMap<String, Vec<Pod>> {
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap();
    let mut by: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for p in list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        by.entry(node).or_default().push(p);
    }
    by
}

/// Waits until `app` has exactly one Ready pod of `img` on each of `nodes`.
async fn settled(pods: &Api<Pod>, app: &str, nodes: &[&str], img: &str) -> BTreeMap<String, Vec<Pod>> {
    eventually(&format!("{app} on {nodes:?} with {img}"), WAIT, || async {
        let by = pods_by_node(pods, app).await;
        let keys: Vec<&str> = by.keys().map(String::as_str).collect();
        let ok = keys == nodes && by.values().all(|ps| ps.len() == 1 && pod_ready(&ps[0]) && image(&ps[0]) == img);
        ok.then_some(by)
    })
    .await
}

#[tokio::test]
async fn pods_go_where_selectors_and_taints_allow() {
    let (_cluster, client, names) = cluster(3).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(&names[0], &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"disk": "ssd"}}})))
        .await
        .unwrap();
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}});
    nodes.patch(&names[2], &PatchParams::default(), &Patch::Merge(taint)).await.unwrap();
    // A cordoned node's taint is tolerated by every daemon pod (upstream adds it).
    let cordon = json!({"spec": {"unschedulable": true, "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}});
    nodes.patch(&names[1], &PatchParams::default(), &Patch::Merge(cordon)).await.unwrap();

    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    sets.create(&PostParams::default(), &daemonset("everywhere", json!({}))).await.unwrap();
    sets.create(
        &PostParams::default(),
        &daemonset("ssd", json!({"template": {"spec": {"nodeSelector": {"disk": "ssd"}}}})),
    )
    .await
    .unwrap();

    let by = settled(&pods, "everywhere", &[&names[0], &names[1]], "agent:1").await;
    let pod = &by[&names[0]][0];
    let spec = pod.spec.as_ref().unwrap();
    let term = &spec
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()
        .node_selector_terms[0];
    let field = &term.match_fields.as_ref().unwrap()[0];
    assert_eq!((field.key.as_str(), field.values.as_ref().unwrap()[0].as_str()), ("metadata.name", names[0].as_str()));
    let tolerations: Vec<(String, String)> = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| (t.key.clone().unwrap_or_default(), t.effect.clone().unwrap_or_default()))
        .collect();
    for (key, effect) in [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ] {
        assert!(
            tolerations.contains(&(key.to_string(), effect.to_string())),
            "missing {key}:{effect} in {tolerations:?}"
        );
    }
    assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].kind, "DaemonSet");
    settled(&pods, "ssd", &[&names[0]], "agent:1").await;
    eventually("status", WAIT, || async {
        let s = sets.get("everywhere").await.unwrap().status?;
        let want = s.desired_number_scheduled == 2
            && s.current_number_scheduled == 2
            && s.number_ready == 2
            && s.number_available == Some(2)
            && s.updated_number_scheduled == Some(2)
            && s.number_misscheduled == 0;
        want.then_some(())
    })
    .await;

    // A label gained brings a pod; a toleration brings one to the tainted node.
    nodes
        .patch(&names[2], &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"disk": "ssd"}}})))
        .await
        .unwrap();
    let tolerate =
        json!({"spec": {"template": {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}});
    sets.patch("ssd", &PatchParams::default(), &Patch::Merge(tolerate)).await.unwrap();
    settled(&pods, "ssd", &[&names[0], &names[2]], "agent:1").await;
    // A label lost takes it away again.
    nodes
        .patch(&names[0], &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"disk": null}}})))
        .await
        .unwrap();
    settled(&pods, "ssd", &[&names[2]], "agent:1").await;
}

#[tokio::test]
async fn max_surge_starts_the_new_pod_before_the_old_one_goes() {
    let (_cluster, client, names) = cluster(3).await;
    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let strategy =
        json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}});
    sets.create(&PostParams::default(), &daemonset("agent", strategy)).await.unwrap();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    settled(&pods, "agent", &all, "agent:1").await;

    let update = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}}});
    sets.patch("agent", &PatchParams::default(), &Patch::Strategic(update)).await.unwrap();
    let (mut most_surging, mut least_ready) = (0, usize::MAX);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let by = pods_by_node(&pods, "agent").await;
        most_surging = most_surging.max(by.values().filter(|ps| ps.len() > 1).count());
        least_ready = least_ready.min(by.values().filter(|ps| ps.iter().any(pod_ready)).count());
        let done =
            by.len() == 3 && by.values().all(|ps| ps.len() == 1 && pod_ready(&ps[0]) && image(&ps[0]) == "agent:2");
        if done {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "rollout did not finish: {by:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(most_surging, 1, "maxSurge 1: exactly one node runs two pods at a time");
    assert_eq!(least_ready, 3, "maxUnavailable 0: every node keeps a Ready pod");
    eventually("status updated", WAIT, || async {
        let s = sets.get("agent").await.unwrap().status?;
        (s.updated_number_scheduled == Some(3) && s.number_available == Some(3)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn kubectl_rollout_undo_returns_to_the_previous_revision() {
    let (cluster, client, names) = cluster(2).await;
    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let revisions: Api<ControllerRevision> = Api::default_namespaced(client.clone());
    sets.create(&PostParams::default(), &daemonset("agent", json!({}))).await.unwrap();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let first = settled(&pods, "agent", &all, "agent:1").await;
    let first_hash = first[&names[0]][0].metadata.labels.as_ref().unwrap()["controller-revision-hash"].clone();

    let update = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}}});
    sets.patch("agent", &PatchParams::default(), &Patch::Strategic(update)).await.unwrap();
    settled(&pods, "agent", &all, "agent:2").await;
    let listed = revisions.list(&ListParams::default().labels("app=agent")).await.unwrap();
    assert_eq!(listed.items.len(), 2, "one revision per template");

    let out = tokio::process::Command::new("/usr/bin/kubectl")
        .arg("--kubeconfig")
        .arg(&cluster.running.kubeconfig_path)
        .args(["rollout", "undo", "daemonset/agent", "-n", "default"])
        .output()
        .await
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl: {}", String::from_utf8_lossy(&out.stderr));
    let back = settled(&pods, "agent", &all, "agent:1").await;
    assert_eq!(back[&names[1]][0].metadata.labels.as_ref().unwrap()["controller-revision-hash"], first_hash);
    // The first revision is reused as the newest, not copied.
    let reused = eventually("revision 3", WAIT, || async {
        let list = revisions.list(&ListParams::default().labels("app=agent")).await.unwrap();
        list.items.into_iter().find(|r| r.revision == 3)
    })
    .await;
    assert_eq!(reused.metadata.name.unwrap(), format!("agent-{first_hash}"));
}
