//! Strategic merge patch through the API with kube-rs (Patch::Strategic).

use crate::common::TestServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn strategic_patches_merge_lists_by_key() {
    let srv = TestServer::start().await;
    let pods: Api<Deployment> = Api::namespaced(srv.client().await, "default");
    let pod: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["example.com/x"]},
        "spec": {"selector": {"matchLabels": {"app": "p"}}, "template": {
            "metadata": {"labels": {"app": "p"}},
            "spec": {"containers": [
                {"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "busybox"}
            ]}
        }}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let pp = PatchParams::default();
    let patched = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(json!({
                "metadata": {"labels": {"a": null, "b": "2"}, "finalizers": ["example.com/y"]},
                "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2", "env": [{"name": "B", "value": "2"}]}]}}}
            })),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&patched).unwrap();
    assert_eq!(v["metadata"]["labels"], json!({"b": "2"}));
    assert_eq!(
        v["metadata"]["finalizers"],
        json!(["example.com/x", "example.com/y"]),
        "a merge list of strings is a set"
    );
    let containers = &v["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "nginx:2");
    // Without $setElementOrder a new item goes before the server's items, as upstream orders it.
    assert_eq!(containers[0]["env"], json!([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]));
    assert_eq!(containers[1]["name"], "side");

    // $patch: delete removes by merge key; $deleteFromPrimitiveList removes a finalizer.
    let patched = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(json!({
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/x", "example.com/y"]},
                "spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}
            })),
        )
        .await
        .unwrap();
    let names: Vec<String> =
        patched.spec.clone().unwrap().template.spec.unwrap().containers.into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["app"]);
    assert!(patched.metadata.finalizers.unwrap_or_default().is_empty());

    // Client mistakes are 400 and change nothing.
    let before = pods.get("p").await.unwrap().metadata.resource_version;
    for bad in [
        json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}}),
        json!({"metadata": {"labels": {"$patch": "bogus"}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "$patch": "merge"}]}}}}),
        json!({"metadata": {"$retainKeys": ["name"], "labels": {"x": "y"}}}),
    ] {
        let r = pods.patch("p", &pp, &Patch::Strategic(bad.clone())).await;
        assert!(r.is_err(), "{bad} was accepted");
        let s = status_of(r);
        assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"), "{bad}: {s:?}");
    }
    assert_eq!(pods.get("p").await.unwrap().metadata.resource_version, before);
}

#[tokio::test]
async fn patching_a_missing_object_is_not_found() {
    let srv = TestServer::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    for patch in [Patch::Strategic(json!({"data": {"a": "b"}})), Patch::Merge(json!({"data": {"a": "b"}}))] {
        let s = status_of(cms.patch("absent", &PatchParams::default(), &patch).await);
        assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"), "{s:?}");
    }
}
