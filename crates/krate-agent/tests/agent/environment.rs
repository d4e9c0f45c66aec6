//! Containers' environments from the API (envFrom, key refs, resources, service links),
//! read inside real containers, and the CreateContainerConfigError of missing refs.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service};
use krate_testkit::pod_ready;
use kube::api::Api;

use crate::common::{BUSYBOX, QUICK, TestNode, create, eventually_async};

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// The environment of the pod's container `c`, once it runs.
async fn env_of(node: &TestNode, name: &str) -> BTreeMap<String, String> {
    let pod = node
        .wait_pod(name, "pod Running and Ready", QUICK, |p| (phase(p) == "Running" && pod_ready(p)).then(|| p.clone()))
        .await;
    let out = node.exec(pod.metadata.uid.as_deref().unwrap(), "c", &["env"]).await;
    out.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn cluster_ip(service: &Service) -> String {
    service.spec.as_ref().and_then(|s| s.cluster_ip.clone()).expect("a cluster IP")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_from_key_refs_resources_and_service_links() {
    let node = TestNode::start().await;
    create::<ConfigMap>(
        &node,
        serde_json::json!({"metadata": {"name": "env-cm"}, "data": {"COLOR": "blue", "SIZE": "L", "dotted.key-1": "d"}}),
    )
    .await;
    create::<Secret>(&node, serde_json::json!({"metadata": {"name": "env-sec"}, "stringData": {"TOKEN": "abc"}})).await;
    let web = create::<Service>(
        &node,
        serde_json::json!({"metadata": {"name": "web-app"}, "spec": {"ports": [
            {"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
    )
    .await;
    let kubernetes: Service = Api::namespaced(node.client.clone(), "default").get("kubernetes").await.unwrap();
    // The agent's service informer sees the new service through its watch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let container = |links: bool| {
        serde_json::json!({"enableServiceLinks": links, "terminationGracePeriodSeconds": 1, "containers": [{
        "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
        "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "64Mi"}},
        "envFrom": [{"configMapRef": {"name": "env-cm"}, "prefix": "CFG_"}, {"secretRef": {"name": "env-sec"}},
                    {"secretRef": {"name": "no-such-secret", "optional": true}}],
        "env": [
            {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "COLOR"}}},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "env-sec", "key": "TOKEN"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "no-such-secret", "key": "k", "optional": true}}},
            {"name": "MEM_MIB", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "CPU_MILLIS", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
            {"name": "CFG_SIZE", "value": "overridden"},
            {"name": "LINK", "value": "$(WEB_APP_SERVICE_HOST):$(WEB_APP_SERVICE_PORT)/$(CFG_COLOR)"},
        ]}]})
    };
    node.create_pod("links", container(true)).await;
    node.create_pod("nolinks", container(false)).await;

    let env = env_of(&node, "links").await;
    let get = |k: &str| env.get(k).map(String::as_str);
    assert_eq!(get("CFG_COLOR"), Some("blue"), "envFrom with a prefix");
    assert_eq!(get("CFG_SIZE"), Some("overridden"), "env wins over envFrom");
    // Upstream (1.34+) no longer skips keys that were not C identifiers.
    assert_eq!(get("CFG_dotted.key-1"), Some("d"));
    assert_eq!(get("TOKEN"), Some("abc"));
    assert_eq!(get("COLOR"), Some("blue"));
    assert_eq!(get("PASS"), Some("abc"));
    assert_eq!(get("OPT"), None, "optional and missing: not set");
    assert_eq!(get("MEM_MIB"), Some("64"));
    assert_eq!(get("CPU_MILLIS"), Some("250"));
    let ip = cluster_ip(&web);
    assert_eq!(get("WEB_APP_SERVICE_HOST"), Some(ip.as_str()));
    assert_eq!(get("WEB_APP_SERVICE_PORT"), Some("80"));
    assert_eq!(get("WEB_APP_SERVICE_PORT_DNS"), Some("53"));
    assert_eq!(get("WEB_APP_PORT"), Some(format!("tcp://{ip}:80").as_str()));
    assert_eq!(get("WEB_APP_PORT_53_UDP"), Some(format!("udp://{ip}:53").as_str()));
    assert_eq!(get("WEB_APP_PORT_80_TCP_ADDR"), Some(ip.as_str()));
    assert_eq!(get("WEB_APP_PORT_80_TCP_PROTO"), Some("tcp"));
    assert_eq!(get("LINK"), Some(format!("{ip}:80/blue").as_str()), "values expand service variables");
    assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some(cluster_ip(&kubernetes).as_str()));
    assert_eq!(get("KUBERNETES_SERVICE_PORT_HTTPS"), Some("443"));

    // The agent reads as its node: objects its pods name, and no others.
    create::<ConfigMap>(&node, serde_json::json!({"metadata": {"name": "private"}, "data": {"x": "y"}})).await;
    let as_node: Api<ConfigMap> = Api::namespaced(node.agent_client.clone(), "default");
    assert!(as_node.get("env-cm").await.is_ok());
    match as_node.get("private").await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e:?}"),
        other => panic!("the node read a config map no pod of it names: {other:?}"),
    }

    let env = env_of(&node, "nolinks").await;
    assert_eq!(env.get("KUBERNETES_SERVICE_HOST"), Some(&cluster_ip(&kubernetes)), "always there");
    assert!(!env.keys().any(|k| k.starts_with("WEB_APP_")), "no links: {env:?}");
    assert_eq!(env.get("LINK").map(String::as_str), Some("$(WEB_APP_SERVICE_HOST):$(WEB_APP_SERVICE_PORT)/blue"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_references_wait_with_create_container_config_error() {
    let node = TestNode::start().await;
    create::<Secret>(&node, serde_json::json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}})).await;
    let sleeper = |env: serde_json::Value| {
        serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"], "env": env}]})
    };
    node.create_pod(
        "needs-cm",
        sleeper(serde_json::json!([{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "k"}}}])),
    )
    .await;
    node.create_pod(
        "needs-key",
        sleeper(serde_json::json!([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope"}}}])),
    )
    .await;
    let waiting = |name: &'static str| {
        node.wait_pod(name, "CreateContainerConfigError", QUICK, |p| {
            let s = p.status.as_ref()?.container_statuses.as_ref()?.first()?.clone();
            let w = s.state?.waiting?;
            (w.reason.as_deref() == Some("CreateContainerConfigError"))
                .then(|| (p.clone(), w.message.unwrap_or_default()))
        })
    };
    let (pod, message) = waiting("needs-cm").await;
    assert_eq!(message, "configmap \"later\" not found");
    assert_eq!(phase(&pod), "Pending");
    let (_, message) = waiting("needs-key").await;
    assert_eq!(message, "couldn't find key nope in Secret default/s");
    let events: Api<Event> = Api::namespaced(node.client.clone(), "default");
    let failed = eventually_async("a Failed event", QUICK, || async {
        let list = events.list(&Default::default()).await.unwrap().items;
        list.into_iter()
            .find(|e| e.involved_object.name.as_deref() == Some("needs-cm") && e.reason.as_deref() == Some("Failed"))
    })
    .await;
    assert_eq!(failed.message.as_deref(), Some("Error: configmap \"later\" not found"));
    assert_eq!(failed.type_.as_deref(), Some("Warning"));

    // The config map appears: the container starts with it.
    create::<ConfigMap>(&node, serde_json::json!({"metadata": {"name": "later"}, "data": {"k": "finally"}})).await;
    let pod = node
        .wait_pod("needs-cm", "pod Running", QUICK, |p| (phase(p) == "Running" && pod_ready(p)).then(|| p.clone()))
        .await;
    let k = node.exec(pod.metadata.uid.as_deref().unwrap(), "c", &["sh", "-c", "echo $K"]).await;
    assert_eq!(k.trim(), "finally");
}
