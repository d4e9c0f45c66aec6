//! The Priority admission plugin over HTTPS: pods get their priority and preemption policy
//! from their PriorityClass or the global default, clients cannot choose others, and only
//! one class may be the global default. The system classes exist from the start.

use serde_json::{Value, json};

use crate::common::{TestServer, call};

const PODS: &str = "/api/v1/namespaces/default/pods";
const CLASSES: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

async fn refused(c: &kube::Client, path: &str, body: Value) -> (u16, String, String) {
    match call(c, "POST", path, Some(body)).await {
        Err(kube::Error::Api(e)) => (e.code, e.reason, e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn pods_take_their_priority_from_their_class() {
    let server = TestServer::start().await;
    let c = server.client().await;

    for (name, value) in [("system-node-critical", 2_000_001_000i64), ("system-cluster-critical", 2_000_000_000)] {
        let pc = call(&c, "GET", &format!("{CLASSES}/{name}"), None).await.unwrap();
        assert_eq!(pc["value"], value);
    }

    // No class and no default: priority 0.
    let p = call(&c, "POST", PODS, Some(pod("plain", json!({})))).await.unwrap();
    assert_eq!(p["spec"]["priority"], 0);
    assert_eq!(p["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    assert!(p["spec"].get("priorityClassName").is_none());

    let p = call(&c, "POST", PODS, Some(pod("critical", json!({"priorityClassName": "system-node-critical"}))))
        .await
        .unwrap();
    assert_eq!(p["spec"]["priority"], 2_000_001_000i64);

    let (code, reason, message) = refused(&c, PODS, pod("unknown", json!({"priorityClassName": "nope"}))).await;
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(message, "pods \"unknown\" is forbidden: no PriorityClass with name nope was found");

    let (code, _, message) = refused(&c, PODS, pod("chosen", json!({"priority": 5}))).await;
    assert_eq!(code, 403);
    assert!(
        message.ends_with("the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"),
        "{message}"
    );

    // A global default applies to pods naming no class, with its preemption policy.
    call(
        &c,
        "POST",
        CLASSES,
        Some(json!({"metadata": {"name": "batch"}, "value": 100, "globalDefault": true, "preemptionPolicy": "Never"})),
    )
    .await
    .unwrap();
    let p = call(&c, "POST", PODS, Some(pod("defaulted", json!({})))).await.unwrap();
    assert_eq!(p["spec"]["priorityClassName"], "batch");
    assert_eq!(p["spec"]["priority"], 100);
    assert_eq!(p["spec"]["preemptionPolicy"], "Never");
    let (code, _, message) = refused(&c, PODS, pod("eager", json!({"preemptionPolicy": "PreemptLowerPriority"}))).await;
    assert_eq!(code, 403);
    assert!(
        message.contains("the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided"),
        "{message}"
    );

    // Only one default.
    let (code, _, message) =
        refused(&c, CLASSES, json!({"metadata": {"name": "second"}, "value": 1, "globalDefault": true})).await;
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "priorityclasses.scheduling.k8s.io \"second\" is forbidden: PriorityClass batch is already marked as default. Only one default can exist"
    );

    // An update that omits the admitted fields keeps them.
    let mut current = call(&c, "GET", &format!("{PODS}/defaulted"), None).await.unwrap();
    current["spec"].as_object_mut().unwrap().remove("priority");
    current["metadata"]["labels"] = json!({"changed": "yes"});
    let updated = call(&c, "PUT", &format!("{PODS}/defaulted"), Some(current)).await.unwrap();
    assert_eq!(updated["spec"]["priority"], 100);
    assert_eq!(updated["metadata"]["labels"]["changed"], "yes");
}
