//! CustomResourceDefinitions: establishing, serving custom objects through the generic
//! registry (schema validation, pruning, defaulting, subresources, versions, tables,
//! field selectors) and cleanup on deletion.

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use crate::common::{TestServer, call, code};

const WAIT: Duration = Duration::from_secs(10);

fn widget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "required": ["size"], "properties": {
                         "size": {"type": "integer", "minimum": 1, "maximum": 10},
                         "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                         "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                         "replicas": {"type": "integer", "default": 1},
                         "selector": {"type": "string"},
                         "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                     }},
                     "status": {"type": "object", "properties": {"replicas": {"type": "integer"}, "phase": {"type": "string"}}},
                 }}},
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".spec.selector"}},
                 "additionalPrinterColumns": [
                     {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                     {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                 ],
                 "selectableFields": [{"jsonPath": ".spec.color"}]},
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            ],
        },
    })
}

fn resource(group: &str, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, "Widget"), "widgets")
}

/// A Widget without apiVersion and kind: the server takes them from the endpoint.
fn widget(name: &str, spec: Value) -> DynamicObject {
    let mut w: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "x/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap();
    w.types = None;
    w
}

/// Creates the CRD and waits until it is Established and its group-version is discovered.
async fn establish(client: &kube::Client, crd: Value) -> Value {
    let created =
        call(client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", Some(crd)).await.unwrap();
    let name = created["metadata"]["name"].as_str().unwrap().to_string();
    let group = created["spec"]["group"].as_str().unwrap().to_string();
    let start = Instant::now();
    loop {
        let got = call(client, "GET", &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"), None)
            .await
            .unwrap();
        let established = got["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if established && code(client, "GET", &format!("/apis/{group}/v1"), None).await == 200 {
            assert!(start.elapsed() < Duration::from_secs(1), "established and served within a second");
            return got;
        }
        assert!(start.elapsed() < WAIT, "CRD {name} not established: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn api_status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn crd_is_established_and_serves_custom_objects() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let crd = establish(&client, widget_crd("crud.example.com")).await;
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    assert!(crd["metadata"]["finalizers"].is_null(), "the cleanup finalizer comes with deletion");

    let discovery = call(&client, "GET", "/apis/crud.example.com/v1", None).await.unwrap();
    let r = &discovery["resources"].as_array().unwrap().iter().find(|r| r["name"] == "widgets").unwrap().clone();
    assert_eq!(r["shortNames"], json!(["wd"]));
    assert_eq!(r["categories"], json!(["all"]));
    assert!(discovery["resources"].as_array().unwrap().iter().any(|r| r["name"] == "widgets/scale"));

    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("crud.example.com", "v1"));
    let mut watch = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let w = widget("one", json!({"size": 3}));
    let made = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(made.metadata.generation, Some(1));
    assert_eq!(made.data["spec"]["color"], "red", "defaulted on write");
    assert_eq!(made.data["spec"]["replicas"], 1);
    let ev = tokio::time::timeout(WAIT, watch.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(ev, WatchEvent::Added(ref o) if o.metadata.name.as_deref() == Some("one")), "{ev:?}");

    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let patched = api.patch("one", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}}))).await.unwrap();
    assert_eq!(patched.data["spec"]["size"], 4);
    assert_eq!(patched.metadata.generation, Some(2));
    api.delete("one", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_status(api.get("one").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn schema_violations_are_invalid_with_upstream_paths() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("valid.example.com")).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("valid.example.com", "v1"));
    let bad = widget("bad", json!({"size": 11, "color": "green", "name": "Abc"}));
    let e = api_status(api.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    for want in [
        "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
        "spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\"",
        "spec.name: Invalid value: \"Abc\": spec.name in body should match '^[a-z]+$'",
    ] {
        assert!(e.message.contains(want), "{want:?} not in {}", e.message);
    }
    let e =
        api_status(api.create(&PostParams::default(), &widget("typed", json!({"size": "three"}))).await.unwrap_err());
    assert!(e.message.contains("spec.size in body must be of type integer: \"string\""), "{}", e.message);
    let e = api_status(api.create(&PostParams::default(), &widget("missing", json!({}))).await.unwrap_err());
    assert!(e.message.contains("spec.size: Required value"), "{}", e.message);
    assert!(e.message.starts_with("Widget.valid.example.com \"missing\" is invalid"), "{}", e.message);
}

#[tokio::test]
async fn unknown_fields_are_pruned_or_refused_under_strict() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("prune.example.com")).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("prune.example.com", "v1"));
    let w = widget("p", json!({"size": 2, "bogus": 1, "free": {"kept": {"deep": true}}}));
    let made = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(made.data["spec"].get("bogus").is_none(), "pruned: {}", made.data);
    assert_eq!(made.data["spec"]["free"]["kept"]["deep"], true, "x-kubernetes-preserve-unknown-fields");
    let stored = api.get("p").await.unwrap();
    assert!(stored.data["spec"].get("bogus").is_none());

    let strict = call(
        &client,
        "POST",
        "/apis/prune.example.com/v1/namespaces/default/widgets?fieldValidation=Strict",
        Some(json!({"apiVersion": "prune.example.com/v1", "kind": "Widget", "metadata": {"name": "s"}, "spec": {"size": 1, "bogus": 1}})),
    )
    .await
    .unwrap_err();
    let e = api_status(strict);
    assert_eq!(e.code, 400);
    assert!(e.message.contains("unknown field \"spec.bogus\""), "{}", e.message);
}

#[tokio::test]
async fn status_and_scale_subresources() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("sub.example.com")).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("sub.example.com", "v1"));
    let mut w = widget("s", json!({"size": 2, "replicas": 2, "selector": "app=s"}));
    w.data["status"] = json!({"replicas": 9});
    let made = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(made.data.get("status").is_none(), "status is reset on create");

    // Status writes change status only and keep the generation.
    let st = api
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2, "phase": "Ready"}, "spec": {"size": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Ready");
    assert_eq!(st.data["spec"]["size"], 2);
    assert_eq!(st.metadata.generation, Some(1));
    // Main-resource writes keep status.
    let main = api
        .patch("s", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 3}, "status": {"phase": "Lost"}})))
        .await
        .unwrap();
    assert_eq!(main.data["status"]["phase"], "Ready");
    assert_eq!(main.metadata.generation, Some(2));

    let scale =
        call(&client, "GET", "/apis/sub.example.com/v1/namespaces/default/widgets/s/scale", None).await.unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=s");
    let mut wanted = scale.clone();
    wanted["spec"]["replicas"] = json!(5);
    call(&client, "PUT", "/apis/sub.example.com/v1/namespaces/default/widgets/s/scale", Some(wanted)).await.unwrap();
    assert_eq!(api.get("s").await.unwrap().data["spec"]["replicas"], 5);
    let e = api_status(
        call(
            &client,
            "PUT",
            "/apis/sub.example.com/v1/namespaces/default/widgets/s/scale",
            Some({
                let mut w = scale.clone();
                w["spec"]["replicas"] = json!(-1);
                w
            }),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
}

#[tokio::test]
async fn server_side_apply_merges_by_schema_list_types_and_openapi_describes_the_kind() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let mut crd = widget_crd("ssa.example.com");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["ports"] = json!({
        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
    });
    establish(&client, crd).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("ssa.example.com", "v1"));
    let applied = |manager: &str, ports: Value| {
        let obj = json!({"apiVersion": "ssa.example.com/v1", "kind": "Widget", "metadata": {"name": "m"}, "spec": {"size": 1, "ports": ports}});
        (PatchParams::apply(manager), Patch::Apply(obj))
    };
    let (pp, p) = applied("alice", json!([{"name": "http", "port": 80}]));
    api.patch("m", &pp, &p).await.unwrap();
    let (pp, p) = applied("bob", json!([{"name": "https", "port": 443}]));
    let e = api_status(api.patch("m", &pp, &p).await.unwrap_err());
    assert_eq!(e.code, 409, "bob's spec.size conflicts with alice's: {}", e.message);
    let (pp, p) = applied("bob", json!([{"name": "https", "port": 443}]));
    let merged = api.patch("m", &pp.force(), &p).await.unwrap();
    let names: Vec<&str> =
        merged.data["spec"]["ports"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["http", "https"], "list-map items merged by key");

    let doc = call(&client, "GET", "/openapi/v3/apis/ssa.example.com/v1", None).await.unwrap();
    let def = &doc["components"]["schemas"]["com.example.ssa.v1.Widget"];
    assert_eq!(def["properties"]["spec"]["properties"]["size"]["maximum"], 10);
    assert_eq!(def["x-kubernetes-group-version-kind"][0]["kind"], "Widget");
    assert!(doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    let v2 = call(&client, "GET", "/openapi/v2", None).await.unwrap();
    assert!(v2["definitions"]["com.example.ssa.v1.WidgetList"].is_object());
}

#[tokio::test]
async fn versions_share_storage_with_none_conversion() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("multi.example.com")).await;
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("multi.example.com", "v1"));
    let beta: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("multi.example.com", "v1beta1"));
    beta.create(&PostParams::default(), &widget("b", json!({"size": 5, "extra": "kept-by-beta"}))).await.unwrap();
    let as_v1 = v1.get("b").await.unwrap();
    assert_eq!(as_v1.types.unwrap().api_version, "multi.example.com/v1");
    assert_eq!(as_v1.data["spec"]["color"], "red", "v1 defaults on read");
    let as_beta = beta.get("b").await.unwrap();
    assert_eq!(as_beta.types.unwrap().api_version, "multi.example.com/v1beta1");
    assert_eq!(v1.list(&ListParams::default()).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn tables_use_printer_columns_and_fields_select() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("table.example.com")).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("table.example.com", "v1"));
    api.create(&PostParams::default(), &widget("r", json!({"size": 1, "color": "red"}))).await.unwrap();
    api.create(&PostParams::default(), &widget("b", json!({"size": 2, "color": "blue"}))).await.unwrap();
    let req = http::Request::builder()
        .uri("/apis/table.example.com/v1/namespaces/default/widgets")
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: Value = client.request(req).await.unwrap();
    let names: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["Name", "Size", "Color"]);
    let row = table["rows"].as_array().unwrap().iter().find(|r| r["cells"][0] == "b").unwrap();
    assert_eq!(row["cells"], json!(["b", 2, "blue"]));

    let blue = api.list(&ListParams::default().fields("spec.color=blue")).await.unwrap();
    assert_eq!(blue.items.iter().map(|o| o.metadata.name.clone().unwrap()).collect::<Vec<_>>(), vec!["b"]);
    let e = api_status(api.list(&ListParams::default().fields("spec.size=1")).await.unwrap_err());
    assert_eq!(e.code, 400);
}

#[tokio::test]
async fn invalid_crds_are_refused() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let mut crd = widget_crd("bad.example.com");
    crd["metadata"]["name"] = json!("other.bad.example.com");
    crd["spec"]["versions"][1]["storage"] = json!(true);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["untyped"] = json!({});
    let e = api_status(
        call(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", Some(crd)).await.unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    for want in [
        "metadata.name: Invalid value: \"other.bad.example.com\": must be spec.names.plural+\".\"+spec.group",
        "must have exactly one version marked as storage version",
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[untyped].type: Required value: must not be empty for specified object fields",
    ] {
        assert!(e.message.contains(want), "{want:?} not in {}", e.message);
    }
    // Rules that do not compile are refused at their place in the schema, on create and
    // on update.
    let mut crd = widget_crd("cel.example.com");
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
    crd.pointer_mut(spec).unwrap()["x-kubernetes-validations"] = json!([
        {"rule": "self.size >= 0"},
        {"rule": "self.size >"},
        {"rule": "self.size > 1", "messageExpression": "'size ' +"},
    ]);
    let e = api_status(
        call(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", Some(crd.clone()))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let at = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations";
    let fields: Vec<&str> = e.details.as_ref().unwrap().causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, [format!("{at}[1].rule"), format!("{at}[2].messageExpression")]);
    assert!(e.message.contains("compilation failed: "), "{}", e.message);
    assert!(e.message.contains("messageExpression compilation failed: "), "{}", e.message);
    crd.pointer_mut(spec).unwrap()["x-kubernetes-validations"] = json!([{"rule": "self.size >= 0"}]);
    let created = establish(&client, crd).await;
    let mut changed = created.clone();
    changed.pointer_mut(spec).unwrap()["x-kubernetes-validations"] = json!([{"rule": "self.size >= >"}]);
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.cel.example.com";
    let e = api_status(call(&client, "PUT", path, Some(changed)).await.unwrap_err());
    assert_eq!((e.code, e.details.unwrap().causes[0].field.as_str()), (422, format!("{at}[0].rule").as_str()));
}

#[tokio::test]
async fn conflicting_names_are_not_accepted() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("names.example.com")).await;
    let mut other = widget_crd("names.example.com");
    other["metadata"]["name"] = json!("gadgets.names.example.com");
    other["spec"]["names"] = json!({"plural": "gadgets", "kind": "Gadget", "shortNames": ["wd"]});
    call(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", Some(other)).await.unwrap();
    let start = Instant::now();
    loop {
        let got = call(
            &client,
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.names.example.com",
            None,
        )
        .await
        .unwrap();
        let cond = got["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "NamesAccepted")
            .cloned();
        if let Some(c) = cond {
            assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("ShortNamesConflict")));
            assert_eq!(c["message"], "\"wd\" is already in use");
            break;
        }
        assert!(start.elapsed() < WAIT, "no NamesAccepted condition: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code(&client, "GET", "/apis/names.example.com/v1/namespaces/default/gadgets", None).await, 404);
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_resource() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("gone.example.com")).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("gone.example.com", "v1"));
    api.create(&PostParams::default(), &widget("a", json!({"size": 1}))).await.unwrap();
    let other_ns: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "kube-system", &resource("gone.example.com", "v1"));
    other_ns.create(&PostParams::default(), &widget("b", json!({"size": 1}))).await.unwrap();

    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.gone.example.com";
    call(&client, "DELETE", path, None).await.unwrap();
    let start = Instant::now();
    while code(&client, "GET", path, None).await != 404 {
        assert!(start.elapsed() < WAIT, "CRD still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code(&client, "GET", "/apis/gone.example.com/v1", None).await, 404);
    // A CRD of the same name starts empty.
    establish(&client, widget_crd("gone.example.com")).await;
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
    assert!(other_ns.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn a_terminating_crd_refuses_creates_until_its_objects_are_gone() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    establish(&client, widget_crd("ending.example.com")).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("ending.example.com", "v1"));
    // A finalizer of its own keeps the object, and so the CRD, in Terminating.
    let mut held = widget("held", json!({"size": 1}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.ending.example.com";
    call(&client, "DELETE", path, None).await.unwrap();
    let start = Instant::now();
    let refused = loop {
        match api.create(&PostParams::default(), &widget("late", json!({"size": 2}))).await {
            Err(e) => break api_status(e),
            Ok(_) => {
                // The CRD's cleanup may have deleted it already (404): both are fine.
                if let Err(e) = api.delete("late", &Default::default()).await {
                    assert_eq!(api_status(e).code, 404, "deleting the early object");
                }
                assert!(start.elapsed() < WAIT, "creates still allowed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!((refused.code, refused.reason.as_str()), (405, "MethodNotAllowed"));
    assert_eq!(refused.message, "create not allowed while custom resource definition is terminating");
    // The held object is still served and can be released; then the CRD goes.
    let release = json!({"metadata": {"finalizers": null}});
    api.patch("held", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&release)).await.unwrap();
    while code(&client, "GET", path, None).await != 404 {
        assert!(start.elapsed() < WAIT, "CRD still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn x_kubernetes_validations_run_as_cel() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let mut crd = widget_crd("cel.example.com");
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["x-kubernetes-validations"] = json!([
        {"rule": "self.replicas <= self.size", "message": "replicas must not exceed size"},
        {"rule": "self.size >= oldSelf.size", "messageExpression": "'size may not shrink from ' + string(oldSelf.size)", "fieldPath": ".size"},
    ]);
    establish(&client, crd).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource("cel.example.com", "v1"));
    let e = api_status(
        api.create(&PostParams::default(), &widget("c", json!({"size": 1, "replicas": 2}))).await.unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(e.message.contains("spec: Invalid value: \"object\": replicas must not exceed size"), "{}", e.message);
    api.create(&PostParams::default(), &widget("c", json!({"size": 3, "replicas": 2}))).await.unwrap();
    let e = api_status(
        api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 2}}))).await.unwrap_err(),
    );
    assert!(e.message.contains("spec.size: Invalid value: \"object\": size may not shrink from 3"), "{}", e.message);
    api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}}))).await.unwrap();
}
