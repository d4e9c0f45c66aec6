//! The API server over HTTPS with kube-rs: CRUD semantics, metadata, errors.

use crate::common::TestServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status as ErrorResponse;
use serde_json::json;

fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

/// The API error a call failed with.
fn api_err<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> ErrorResponse {
    match r {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_update_delete_with_upstream_metadata() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");

    let created = api.create(&PostParams::default(), &cm("one", json!({"a": "1"}))).await.unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert_eq!(meta.uid.as_ref().unwrap().len(), 36);
    assert!(meta.creation_timestamp.is_some());
    let rv1: i64 = meta.resource_version.as_ref().unwrap().parse().unwrap();
    assert!(meta.generation.is_none(), "ConfigMaps do not track generation");

    let got = api.get("one").await.unwrap();
    assert_eq!(got.metadata.resource_version, created.metadata.resource_version);
    assert_eq!(got.data.as_ref().unwrap()["a"], "1");

    // Update with the current resourceVersion; the server keeps uid and creationTimestamp.
    let mut next = got.clone();
    next.data = Some([("a".to_string(), "2".to_string())].into());
    next.metadata.uid = Some("forged".into());
    let updated = api.replace("one", &PostParams::default(), &next).await.unwrap();
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    assert!(updated.metadata.resource_version.as_ref().unwrap().parse::<i64>().unwrap() > rv1);

    // A stale resourceVersion is a conflict.
    let e = api_err(api.replace("one", &PostParams::default(), &got).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(e.message.contains("the object has been modified"), "{}", e.message);

    // Creating it again: AlreadyExists.
    let e = api_err(api.create(&PostParams::default(), &cm("one", json!({}))).await);
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, "configmaps \"one\" already exists");

    // Merge patch and JSON patch.
    let p = api
        .patch("one", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.unwrap()["x"], "y");
    let ops: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/data/b", "value": "3"}])).unwrap();
    let p = api.patch("one", &PatchParams::default(), &Patch::Json::<()>(ops)).await.unwrap();
    assert_eq!(p.data.unwrap()["b"], "3");

    api.delete("one", &DeleteParams::default()).await.unwrap();
    let e = api_err(api.get("one").await);
    assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (404, "NotFound", "configmaps \"one\" not found"));
}

#[tokio::test]
async fn bad_input_gets_clear_errors_and_loses_nothing() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // Invalid names and labels: 422 with one cause per field.
    let bad: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "Bad_Name", "labels": {"bad key": "v", "ok": "-bad-value"}},
    }))
    .unwrap();
    let e = api_err(api.create(&PostParams::default(), &bad).await);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: ["), "{}", e.message);
    assert!(e.message.contains("metadata.name: Invalid value: \"Bad_Name\""));
    assert!(e.message.contains("metadata.labels: Invalid value: \"bad key\""));

    // No name at all.
    let e = api_err(api.create(&PostParams::default(), &ConfigMap::default()).await);
    assert_eq!(e.code, 422);
    assert!(e.message.contains("name or generateName is required"), "{}", e.message);

    // Namespace in the body differs from the URL: 400.
    let mut other = cm("x", json!({}));
    other.metadata.namespace = Some("kube-system".into());
    let e = api_err(api.create(&PostParams::default(), &other).await);
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));

    // A namespace that does not exist.
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let e = api_err(nowhere.create(&PostParams::default(), &cm("x", json!({}))).await);
    assert_eq!((e.code, e.message.as_str()), (404, "namespaces \"nowhere\" not found"));

    // Malformed JSON, a wrong apiVersion, an oversized body, an unknown media type.
    let raw = |body: Vec<u8>, ct: &str| {
        http::Request::post("/api/v1/namespaces/default/configmaps").header("content-type", ct).body(body).unwrap()
    };
    for (body, ct, code) in [
        (b"{not json".to_vec(), "application/json", 400),
        (br#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"v"}}"#.to_vec(), "application/json", 400),
        (br#"["an array"]"#.to_vec(), "application/json", 400),
        (vec![b' '; 3 * 1024 * 1024 + 10], "application/json", 413),
        (b"x".to_vec(), "text/plain", 415),
    ] {
        let e = api_err(client.request::<serde_json::Value>(raw(body, ct)).await);
        assert_eq!(e.code, code, "{}", e.message);
        assert!(format!("{:?}", e.status).contains("Failure"));
    }
    // YAML bodies are accepted.
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  k: v\n".to_vec();
    let v: serde_json::Value = client.request(raw(yaml, "application/yaml")).await.unwrap();
    assert_eq!(v["data"]["k"], "v");

    // Nothing above left anything behind except the YAML one.
    let names: Vec<String> =
        api.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert_eq!(names, vec!["from-yaml"]);
}

#[tokio::test]
async fn generate_name_dry_run_and_finalizers() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");

    let mut generated = ConfigMap::default();
    generated.metadata.generate_name = Some("web-".into());
    let a = api.create(&PostParams::default(), &generated).await.unwrap();
    let b = api.create(&PostParams::default(), &generated).await.unwrap();
    let (na, nb) = (a.metadata.name.unwrap(), b.metadata.name.unwrap());
    assert!(na.starts_with("web-") && na.len() == 9 && na != nb);

    let dry = PostParams { dry_run: true, ..Default::default() };
    let out = api.create(&dry, &cm("dry", json!({"k": "v"}))).await.unwrap();
    assert_eq!(out.metadata.name.as_deref(), Some("dry"));
    assert!(api.get_opt("dry").await.unwrap().is_none(), "dry run stores nothing");

    // An object with a finalizer stays, marked for deletion, until the finalizer goes.
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    let r = api.delete("held", &DeleteParams::default()).await.unwrap();
    let pending = r.left().expect("the object is returned while it waits for finalizers");
    assert!(pending.metadata.deletion_timestamp.is_some());
    let got = api.get("held").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    assert!(api.get_opt("held").await.unwrap().is_none(), "removing the last finalizer deletes it");

    // Orphan propagation adds the orphan finalizer.
    api.create(&PostParams::default(), &cm("orphaned", json!({}))).await.unwrap();
    let r = api.delete("orphaned", &DeleteParams::orphan()).await.unwrap();
    let o = r.left().unwrap();
    assert_eq!(o.metadata.finalizers, Some(vec!["orphan".to_string()]));

    // Preconditions.
    let c = api.create(&PostParams::default(), &cm("pre", json!({}))).await.unwrap();
    let wrong = DeleteParams {
        preconditions: Some(kube::api::Preconditions { uid: Some("nope".into()), resource_version: None }),
        ..Default::default()
    };
    let e = api_err(api.delete("pre", &wrong).await);
    assert_eq!(e.code, 409);
    assert!(e.message.contains("Precondition failed: UID in precondition: nope"), "{}", e.message);
    let right = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: c.metadata.uid.clone(),
            resource_version: c.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    api.delete("pre", &right).await.unwrap();
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let srv = TestServer::start().await;
    let api: Api<Deployment> = Api::namespaced(srv.client().await, "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
        "status": {"replicas": 99},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "clients cannot set status on create");

    // A status write changes only status.
    let mut s = created.clone();
    s.status = Some(serde_json::from_value(json!({"replicas": 3, "observedGeneration": 1})).unwrap());
    s.metadata.labels = Some([("sneaky".to_string(), "x".to_string())].into());
    let after = api.replace_status("web", &PostParams::default(), &s).await.unwrap();
    assert_eq!(after.status.as_ref().unwrap().replicas, Some(3));
    assert!(after.metadata.labels.is_none());
    assert_eq!(after.metadata.generation, Some(1), "status writes do not bump generation");

    // A spec change bumps generation; the main resource cannot change status.
    let p = json!({"spec": {"replicas": 5}, "status": {"replicas": 0}});
    let after = api.patch("web", &PatchParams::default(), &Patch::Merge(p)).await.unwrap();
    assert_eq!(after.metadata.generation, Some(2));
    assert_eq!(after.status.unwrap().replicas, Some(3));
    // A metadata-only change does not.
    let after = api
        .patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))
        .await
        .unwrap();
    assert_eq!(after.metadata.generation, Some(2));
}

#[tokio::test]
async fn namespaces_terminate_and_refuse_new_content() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> =
        nss.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|n| n.metadata.name).collect();
    assert_eq!(names, vec!["default", "kube-node-lease", "kube-public", "kube-system"]);

    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    let created = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    assert_eq!(created.metadata.labels.unwrap()["kubernetes.io/metadata.name"], "team-a");

    nss.delete("team-a", &DeleteParams::default()).await.unwrap();
    let terminating = nss.get("team-a").await.unwrap();
    assert_eq!(terminating.status.unwrap().phase.as_deref(), Some("Terminating"));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let e = api_err(api.create(&PostParams::default(), &cm("late", json!({}))).await);
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(e.message.contains("because it is being terminated"), "{}", e.message);

    let e = api_err(nss.delete("kube-system", &DeleteParams::default()).await);
    assert_eq!(e.code, 403);
    let bad: Namespace = serde_json::from_value(json!({"metadata": {"name": "not.a.label"}})).unwrap();
    assert_eq!(api_err(nss.create(&PostParams::default(), &bad).await).code, 422);
}

#[tokio::test]
async fn pods_bind_once_add_ephemeral_containers_and_keep_their_spec() {
    use k8s_openapi::api::core::v1::Pod;
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
        "status": {"phase": "Running"},
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"), "status is the server's on create");

    let bind = |node: &str| {
        let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": node}});
        http::Request::post("/api/v1/namespaces/default/pods/p/binding")
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap()
    };
    let ok: serde_json::Value = client.request(bind("node-a")).await.unwrap();
    assert_eq!(ok["status"], "Success");
    let bound = pods.get("p").await.unwrap();
    assert_eq!(bound.spec.as_ref().unwrap().node_name.as_deref(), Some("node-a"));
    let cond = bound.status.unwrap().conditions.unwrap();
    assert!(cond.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"));
    let e = api_err(client.request::<serde_json::Value>(bind("node-b")).await);
    assert_eq!(e.code, 409);
    assert!(e.message.contains("is already assigned to node \"node-a\""), "{}", e.message);

    // Only images (and a few fields) may change in a pod's spec.
    let e = api_err(
        pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"spec": {"restartPolicy": "Never"}}))).await,
    );
    assert_eq!(e.code, 422);
    assert!(e.message.contains("pod updates may not change fields other than"), "{}", e.message);
    let new_image = json!({"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}});
    // Strategic: a merge patch would replace the container list and drop the mounts
    // ServiceAccount admission added, which upstream refuses too.
    let p2 = pods.patch("p", &PatchParams::default(), &Patch::Strategic(new_image)).await.unwrap();
    assert_eq!(p2.spec.unwrap().containers[0].image.as_deref(), Some("busybox:2"));

    // Ephemeral containers: added through their subresource, never changed afterwards.
    let debug =
        json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox", "targetContainerName": "c"}]}});
    let p3 = pods
        .patch_subresource("ephemeralcontainers", "p", &PatchParams::default(), &Patch::Merge(debug))
        .await
        .unwrap();
    assert_eq!(p3.spec.unwrap().ephemeral_containers.unwrap()[0].name, "debug");
    let e = api_err(
        pods.patch_subresource(
            "ephemeralcontainers",
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ephemeralContainers": []}})),
        )
        .await,
    );
    assert_eq!(e.code, 422);
    let e = api_err(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ephemeralContainers": [{"name": "x", "image": "y"}]}})),
        )
        .await,
    );
    assert_eq!(e.code, 422, "the main resource cannot add ephemeral containers");

    // Namespaces: finalize empties spec.finalizers and completes a pending deletion.
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "fin"}})).unwrap())
        .await
        .unwrap();
    nss.delete("fin", &DeleteParams::default()).await.unwrap();
    let mut ns = nss.get("fin").await.unwrap();
    ns.spec.as_mut().unwrap().finalizers = Some(vec![]);
    nss.replace_subresource("finalize", "fin", &PostParams::default(), &ns).await.unwrap();
    assert!(nss.get_opt("fin").await.unwrap().is_none(), "an emptied namespace is gone");
}

#[tokio::test]
async fn pods_on_a_node_are_deleted_gracefully() {
    use k8s_openapi::api::core::v1::Pod;
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = |name: &str, grace: Option<i64>| -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        if let Some(g) = grace {
            spec["terminationGracePeriodSeconds"] = json!(g);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let bind = |name: &str| {
        let body =
            json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"name": "node-a"}});
        http::Request::post(format!("/api/v1/namespaces/default/pods/{name}/binding"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap()
    };

    // Not scheduled: gone at once.
    pods.create(&PostParams::default(), &pod("loose", None)).await.unwrap();
    assert!(pods.delete("loose", &DeleteParams::default()).await.unwrap().is_right());
    assert!(pods.get_opt("loose").await.unwrap().is_none());

    // On a node: Terminating for its grace period, until forced (or finished by the node).
    pods.create(&PostParams::default(), &pod("bound", Some(45))).await.unwrap();
    client.request::<serde_json::Value>(bind("bound")).await.unwrap();
    let pending = pods.delete("bound", &DeleteParams::default()).await.unwrap().left().expect("kept while terminating");
    assert_eq!(pending.metadata.deletion_grace_period_seconds, Some(45));
    let due = pending.metadata.deletion_timestamp.unwrap().0;
    let now = k8s_openapi::jiff::Timestamp::now();
    assert!((due - now).get_seconds() > 30, "due at the end of the grace period");
    // A second delete may shorten the period.
    let shorter =
        pods.delete("bound", &DeleteParams { grace_period_seconds: Some(10), ..Default::default() }).await.unwrap();
    let shorter = shorter.left().unwrap();
    assert_eq!(shorter.metadata.deletion_grace_period_seconds, Some(10));
    // The deadline moves 35 s earlier, as upstream: first request + the new period.
    assert_eq!((due - shorter.metadata.deletion_timestamp.unwrap().0).get_seconds(), 35);
    // A longer period never extends it.
    let longer =
        pods.delete("bound", &DeleteParams { grace_period_seconds: Some(60), ..Default::default() }).await.unwrap();
    assert_eq!(longer.left().unwrap().metadata.deletion_grace_period_seconds, Some(10));
    assert!(pods.get_opt("bound").await.unwrap().is_some());
    pods.delete("bound", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    assert!(pods.get_opt("bound").await.unwrap().is_none(), "a zero grace period forces it");
}

#[tokio::test]
async fn concurrent_patches_without_a_resource_version_all_apply() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let created = api.create(&PostParams::default(), &cm("shared", json!({}))).await.unwrap();
    // Racing writers: upstream retries a patch that names no resourceVersion, so none
    // of them sees a conflict and every key lands.
    let patches = (0..16).map(|i| {
        let api = api.clone();
        async move {
            let patch = json!({"data": {format!("k{i}"): "v"}});
            api.patch("shared", &PatchParams::default(), &Patch::Merge(&patch)).await
        }
    });
    for result in futures::future::join_all(patches).await {
        result.unwrap();
    }
    assert_eq!(api.get("shared").await.unwrap().data.unwrap().len(), 16);
    // A resourceVersion in the patch stays a precondition.
    let stale = json!({"metadata": {"resourceVersion": created.metadata.resource_version}, "data": {"x": "y"}});
    assert_eq!(api_err(api.patch("shared", &PatchParams::default(), &Patch::Merge(&stale)).await).code, 409);
}
