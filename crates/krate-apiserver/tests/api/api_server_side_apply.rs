//! Server-side apply and managedFields through the API with kube-rs.

use crate::common::TestServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn deployment(replicas: i32, containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"team": "a"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}
    })
}

/// (manager, operation) of each managedFields entry.
fn managers(obj: &impl serde::Serialize) -> Vec<(String, String)> {
    let v = serde_json::to_value(obj).unwrap();
    v["metadata"]["managedFields"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|e| (e["manager"].as_str().unwrap().to_string(), e["operation"].as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn fields_of(obj: &impl serde::Serialize, manager: &str) -> Value {
    let v = serde_json::to_value(obj).unwrap();
    v["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["manager"] == manager))
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn apply_creates_merges_conflicts_and_removes() {
    let srv = TestServer::start().await;
    let api: Api<Deployment> = Api::namespaced(srv.client().await, "default");
    let alice = PatchParams::apply("alice");
    let containers = json!([{"name": "app", "image": "nginx"}, {"name": "log", "image": "busybox"}]);
    let created = api.patch("web", &alice, &Patch::Apply(deployment(1, containers))).await.unwrap();
    assert_eq!(managers(&created), [("alice".to_string(), "Apply".to_string())]);
    let fields = fields_of(&created, "alice");
    assert_eq!(fields["f:spec"]["f:replicas"], json!({}));
    assert_eq!(fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"]["."], json!({}));
    assert!(fields["f:metadata"].get("f:name").is_none(), "name is not owned: {fields}");

    // Bob applies the same replicas (shared ownership, no conflict) and his own label.
    let bob = PatchParams::apply("bob");
    let bobs = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"owner": "bob"}}, "spec": {"replicas": 1}});
    api.patch("web", &bob, &Patch::Apply(bobs.clone())).await.unwrap();

    // Bob changing replicas now conflicts with alice, naming her and the field.
    let mut change = bobs.clone();
    change["spec"]["replicas"] = json!(5);
    let s = status_of(api.patch("web", &bob, &Patch::Apply(change.clone())).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(s.message, "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas");
    let cause = &s.details.unwrap().causes[0];
    assert_eq!((cause.reason.as_str(), cause.field.as_str()), ("FieldManagerConflict", ".spec.replicas"));
    assert_eq!(api.get("web").await.unwrap().spec.unwrap().replicas, Some(1), "a conflict changes nothing");

    // Forced, bob takes the field over.
    let forced = api.patch("web", &PatchParams::apply("bob").force(), &Patch::Apply(change)).await.unwrap();
    assert_eq!(forced.spec.as_ref().unwrap().replicas, Some(5));
    assert!(fields_of(&forced, "alice")["f:spec"].get("f:replicas").is_none());
    assert_eq!(fields_of(&forced, "bob")["f:spec"]["f:replicas"], json!({}));

    // Alice drops the log container and her label: they go, bob's label stays, and
    // replicas (now bob's) stays even though alice no longer applies it.
    let slim = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}});
    let after = api.patch("web", &alice, &Patch::Apply(slim)).await.unwrap();
    let spec = after.spec.clone().unwrap();
    let names: Vec<String> = spec.template.spec.unwrap().containers.into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["app"]);
    assert_eq!(spec.replicas, Some(5));
    let labels = after.metadata.labels.clone().unwrap();
    assert_eq!((labels.get("team"), labels.get("owner").map(String::as_str)), (None, Some("bob")));

    // A controller applies status through the status subresource: recorded with it.
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "status": {"replicas": 1, "observedGeneration": 3}});
    let with_status = api.patch_status("web", &PatchParams::apply("ctrl"), &Patch::Apply(status)).await.unwrap();
    assert_eq!(with_status.status.as_ref().unwrap().replicas, Some(1));
    assert_eq!(with_status.spec.as_ref().unwrap().replicas, Some(5), "a status apply leaves the spec");
    let v = serde_json::to_value(&with_status).unwrap();
    let entry =
        v["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] == "ctrl").unwrap().clone();
    assert_eq!(entry["subresource"], "status");
    assert_eq!(entry["fieldsV1"], json!({"f:status": {"f:observedGeneration": {}, "f:replicas": {}}}));
    assert!(managers(&with_status).contains(&("alice".to_string(), "Apply".to_string())));
}

#[tokio::test]
async fn updates_record_their_managers() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).unwrap();
    let created =
        api.create(&PostParams { field_manager: Some("creator".into()), ..Default::default() }, &cm).await.unwrap();
    assert_eq!(managers(&created), [("creator".to_string(), "Update".to_string())]);
    assert_eq!(fields_of(&created, "creator"), json!({"f:data": {"f:a": {}}}));

    // Another manager changes a: it takes a over; adding b makes b its own.
    let pp = PatchParams { field_manager: Some("editor".into()), ..Default::default() };
    let patched = api.patch("c", &pp, &Patch::Merge(json!({"data": {"a": "2", "b": "3"}}))).await.unwrap();
    assert_eq!(fields_of(&patched, "editor"), json!({"f:data": {"f:a": {}, "f:b": {}}}));
    assert_eq!(fields_of(&patched, "creator"), Value::Null, "an owner left with nothing is dropped");

    // An apply of a field an Update manager owns conflicts, as upstream.
    let s = status_of(
        api.patch(
            "c",
            &PatchParams::apply("applier"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "9"}}),
            ),
        )
        .await,
    );
    assert_eq!(s.code, 409);
    assert!(s.message.contains("conflict with \"editor\" using v1: .data.a"), "{}", s.message);

    // Sending managedFields [{}] clears them.
    let cleared = api.patch("c", &pp, &Patch::Merge(json!({"metadata": {"managedFields": [{}]}}))).await.unwrap();
    assert!(cleared.metadata.managed_fields.is_none(), "{:?}", cleared.metadata.managed_fields);
}

#[tokio::test]
async fn apply_mistakes_are_client_errors() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let cases = [
        // No field manager.
        (PatchParams::default(), Patch::Apply(cm.clone()), 400),
        // Wrong or missing type.
        (
            PatchParams::apply("m"),
            Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}})),
            400,
        ),
        (PatchParams::apply("m"), Patch::Apply(json!({"metadata": {"name": "c"}})), 400),
        // A name that is not the URL's.
        (
            PatchParams::apply("m"),
            Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}})),
            400,
        ),
        // managedFields may not be applied.
        (
            PatchParams::apply("m"),
            Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "managedFields": [{"manager": "x"}]}}),
            ),
            400,
        ),
    ];
    for (pp, patch, code) in cases {
        let s = status_of(api.patch("c", &pp, &patch).await);
        assert_eq!(s.code, code, "{s:?}");
    }
    assert!(api.get_opt("c").await.unwrap().is_none(), "nothing was created");
    // force is only for apply (kube-rs refuses to send it, so the request is raw).
    let req = http::Request::patch("/api/v1/namespaces/default/configmaps/c?force=true")
        .header("content-type", "application/merge-patch+json")
        .body(b"{}".to_vec())
        .unwrap();
    let err = client.request::<ConfigMap>(req).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 422));
    // A broken YAML body is 400 too.
    let req = http::Request::patch("/api/v1/namespaces/default/configmaps/c?fieldManager=m")
        .header("content-type", "application/apply-patch+yaml")
        .body(b"kind: [unclosed".to_vec())
        .unwrap();
    let err = client.request::<ConfigMap>(req).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 400));
}

#[tokio::test]
async fn reapplying_ports_without_protocol_keeps_one_port() {
    let srv = TestServer::start().await;
    let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(srv.client().await, "default");
    // protocol is a key of the ports list with default TCP: the applied port is the live one.
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"selector": {"app": "s"}, "ports": [{"port": 80, "targetPort": 8080}]}});
    let pp = PatchParams::apply("me");
    api.patch("s", &pp, &Patch::Apply(svc.clone())).await.unwrap();
    let again = api.patch("s", &pp, &Patch::Apply(svc)).await.unwrap();
    let ports = again.spec.unwrap().ports.unwrap();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
}
