//! OpenAPI v2/v3 documents and aggregated discovery over HTTPS with kube-rs.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::TestServer;
use http_body_util::BodyExt;
use serde_json::Value;

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

struct Answer {
    code: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

async fn get(client: &kube::Client, uri: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = http::Request::get(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client.send(req.body(Vec::new()).unwrap().map(kube::client::Body::from)).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes().to_vec();
    Answer { code: parts.status.as_u16(), headers: parts.headers, body }
}

/// Every served group-version, from the legacy discovery documents.
async fn served_group_versions(client: &kube::Client) -> Vec<String> {
    let mut out = vec!["api/v1".to_string()];
    for g in client.list_api_groups().await.unwrap().groups {
        out.extend(g.versions.iter().map(|v| format!("apis/{}", v.group_version)));
    }
    out
}

#[tokio::test]
async fn v3_index_and_group_version_documents() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    let index = get(&client, "/openapi/v3", &[]).await;
    assert_eq!(index.code, 200);
    assert_eq!(index.header("content-type"), "application/json");
    let index = index.json();
    let listed: BTreeSet<String> = index["paths"].as_object().unwrap().keys().cloned().collect();
    let served: BTreeSet<String> = served_group_versions(&client).await.into_iter().collect();
    assert_eq!(listed, served);

    // The core document: the Pod schema, with upstream's extensions on PodSpec.
    let url = index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
    let core = get(&client, &url, &[]).await;
    assert_eq!(core.code, 200);
    assert_eq!(core.header("cache-control"), "public, immutable");
    let etag = core.header("etag").to_string();
    assert_eq!(etag, format!("\"{}\"", url.split("hash=").nth(1).unwrap()));
    let doc = core.json();
    assert_eq!(doc["openapi"], "3.0.0");
    assert_eq!(doc["info"]["title"], "Kubernetes");
    let schemas = &doc["components"]["schemas"];
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"][0],
        serde_json::json!({"group": "", "kind": "Pod", "version": "v1"})
    );
    assert_eq!(pod["properties"]["spec"]["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.core.v1.PodSpec");
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-list-map-keys"], serde_json::json!(["name"]));
    let probe = &schemas["io.k8s.api.core.v1.Container"]["properties"]["livenessProbe"];
    assert!(probe["description"].as_str().unwrap().contains("Periodic probe of container liveness"), "{probe}");
    // Every reference resolves inside the document.
    let text = String::from_utf8(core.body.clone()).unwrap();
    for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = &part[..part.find('"').unwrap()];
        assert!(schemas.get(name).is_some(), "dangling reference to {name}");
    }

    // Operations: PATCH declares fieldValidation (kubectl's test for server-side validation).
    let item = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
    let name = item["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "name").unwrap();
    assert_eq!(
        (&name["in"], &name["required"], &name["description"]),
        (&"path".into(), &true.into(), &"name of the Pod".into())
    );
    let patch = &item["patch"];
    assert_eq!(patch["operationId"], "patchCoreV1NamespacedPod");
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Pod");
    let params: Vec<&str> =
        patch["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        assert!(params.contains(&p), "{p} missing from {params:?}");
    }
    assert!(patch["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object());
    assert_eq!(
        item["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.Pod"
    );
    let post = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"];
    assert!(post["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
    assert!(doc["paths"]["/api/v1/pods"]["get"].is_object(), "the list across namespaces");
    assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/status"]["put"].is_object());
    let scale = get(&client, "/openapi/v3/apis/apps/v1", &[]).await.json();
    let scale = &scale["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"];
    assert_eq!(scale["x-kubernetes-group-version-kind"]["group"], "autoscaling");

    // Conditional requests; an outdated hash redirects; unknown group-versions are 404.
    let again = get(&client, &url, &[("if-none-match", &etag)]).await;
    assert_eq!((again.code, again.body.len()), (304, 0));
    assert_eq!(again.header("etag"), etag);
    let plain = get(&client, "/openapi/v3/api/v1", &[]).await;
    assert_eq!((plain.code, plain.header("cache-control")), (200, "no-cache, private"));
    let moved = get(&client, "/openapi/v3/api/v1?hash=0123", &[]).await;
    assert_eq!(moved.code, 301);
    assert_eq!(moved.header("location"), url);
    assert_eq!(get(&client, "/openapi/v3/apis/nothing.example.com/v1", &[]).await.code, 404);
    let pb = ("accept", "application/com.github.proto-openapi.spec.v3@v1.0+protobuf");
    assert_eq!(get(&client, "/openapi/v3/api/v1", &[pb]).await.code, 406);
    assert_eq!(get(&client, "/openapi/v3/api/v1", &[("accept", "application/json, */*")]).await.code, 200);
    let index_etag = get(&client, "/openapi/v3", &[]).await.header("etag").to_string();
    assert_eq!(get(&client, "/openapi/v3", &[("if-none-match", &index_etag)]).await.code, 304);
}

#[tokio::test]
async fn v2_document() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let v2 = get(&client, "/openapi/v2", &[("accept", "application/json")]).await;
    assert_eq!(v2.code, 200);
    let etag = v2.header("etag").to_string();
    let doc = v2.json();
    assert_eq!(doc["swagger"], "2.0");
    let spec = &doc["definitions"]["io.k8s.api.apps.v1.DeploymentSpec"];
    assert_eq!(spec["properties"]["template"]["$ref"], "#/definitions/io.k8s.api.core.v1.PodTemplateSpec");
    let containers = &doc["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert!(
        patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
    );
    assert_eq!(get(&client, "/openapi/v2", &[("if-none-match", &etag)]).await.code, 304);
    // kubectl asks for gnostic's protobuf form: an openapi.v2.Document.
    let pb =
        get(&client, "/openapi/v2", &[("accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")]).await;
    assert_eq!(pb.code, 200);
    assert_eq!(pb.header("content-type"), "application/com.github.proto-openapi.spec.v2.v1.0+protobuf");
    assert_eq!(&pb.body[..5], b"\x0a\x032.0", "field 1 (swagger) first");
    let needle = b"x-kubernetes-patch-merge-key";
    assert!(pb.body.windows(needle.len()).any(|w| w == needle));
    let pb_etag = pb.header("etag").to_string();
    assert_ne!(pb_etag, etag);
    let accept = ("accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf");
    assert_eq!(get(&client, "/openapi/v2", &[accept, ("if-none-match", &pb_etag)]).await.code, 304);
    assert_eq!(get(&client, "/openapi/v2", &[("accept", "text/html")]).await.code, 406);
}

/// A legacy APIResource row and the same resource in the aggregated document, compared.
fn legacy_rows(list: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for r in list["resources"].as_array().unwrap() {
        out.insert(r["name"].as_str().unwrap().to_string(), r.clone());
    }
    out
}

#[tokio::test]
async fn aggregated_discovery_agrees_with_the_legacy_documents() {
    let srv = TestServer::start().await;
    let client = srv.client().await;

    for (path, core) in [("/api", true), ("/apis", false)] {
        let answer = get(&client, path, &[("accept", &format!("{AGGREGATED_V2},application/json;q=0.9"))]).await;
        assert_eq!(answer.code, 200);
        assert_eq!(answer.header("content-type"), AGGREGATED_V2);
        assert_eq!(answer.header("vary"), "Accept");
        let etag = answer.header("etag").to_string();
        let again = get(&client, path, &[("accept", AGGREGATED_V2), ("if-none-match", &etag)]).await;
        assert_eq!(again.code, 304);
        let doc = answer.json();
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        let groups = doc["items"].as_array().unwrap();

        // Same groups and versions, in the same order, as the legacy documents.
        let legacy: Vec<(String, Vec<String>)> = if core {
            vec![(String::new(), vec!["v1".to_string()])]
        } else {
            let list = get(&client, "/apis", &[]).await.json();
            list["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    let versions = g["versions"].as_array().unwrap();
                    (
                        g["name"].as_str().unwrap().to_string(),
                        versions.iter().map(|v| v["version"].as_str().unwrap().to_string()).collect(),
                    )
                })
                .collect()
        };
        let aggregated: Vec<(String, Vec<String>)> = groups
            .iter()
            .map(|g| {
                let versions = g["versions"].as_array().unwrap();
                (
                    g["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    versions.iter().map(|v| v["version"].as_str().unwrap().to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(aggregated, legacy);

        // Every resource and subresource as the legacy APIResourceList says.
        for g in groups {
            let name = g["metadata"]["name"].as_str().unwrap_or("");
            for v in g["versions"].as_array().unwrap() {
                assert_eq!(v["freshness"], "Current");
                let version = v["version"].as_str().unwrap();
                let uri = if core { format!("/api/{version}") } else { format!("/apis/{name}/{version}") };
                let rows = legacy_rows(&get(&client, &uri, &[]).await.json());
                let mut seen = 0;
                for r in v["resources"].as_array().unwrap() {
                    let plural = r["resource"].as_str().unwrap();
                    let row = &rows[plural];
                    seen += 1;
                    assert_eq!(r["responseKind"]["kind"], row["kind"], "{plural}");
                    assert_eq!(r["responseKind"]["group"], name);
                    assert_eq!(r["responseKind"]["version"], version);
                    assert_eq!(r["scope"], if row["namespaced"] == true { "Namespaced" } else { "Cluster" });
                    assert_eq!(r["singularResource"], row["singularName"]);
                    assert_eq!(r["verbs"], row["verbs"]);
                    assert_eq!(r.get("shortNames"), row.get("shortNames"), "{plural}");
                    assert_eq!(r.get("categories"), row.get("categories"), "{plural}");
                    for s in r["subresources"].as_array().into_iter().flatten() {
                        let sub = format!("{plural}/{}", s["subresource"].as_str().unwrap());
                        let row = &rows[&sub];
                        seen += 1;
                        assert_eq!(s["responseKind"]["kind"], row["kind"], "{sub}");
                        assert_eq!(s["verbs"], row["verbs"], "{sub}");
                        if let Some(group) = row.get("group") {
                            assert_eq!(&s["responseKind"]["group"], group, "{sub}");
                        }
                    }
                }
                assert_eq!(seen, rows.len(), "{uri}: every legacy row is in the aggregated document");
            }
        }
    }

    // v2beta1 is answered as asked; without the header, the legacy documents stay.
    let beta = AGGREGATED_V2.replace("v=v2;", "v=v2beta1;");
    let answer = get(&client, "/apis", &[("accept", &beta)]).await;
    assert_eq!(answer.header("content-type"), beta);
    assert_eq!(answer.json()["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    let legacy = get(&client, "/apis", &[]).await;
    assert_eq!((legacy.json()["kind"].as_str(), legacy.header("vary")), (Some("APIGroupList"), "Accept"));
    assert_eq!(get(&client, "/api", &[("accept", "application/json")]).await.json()["kind"], "APIVersions");
    let unknown = AGGREGATED_V2.replace("v=v2;", "v=v9;");
    assert_eq!(get(&client, "/apis", &[("accept", &unknown)]).await.code, 406);
}

#[tokio::test]
async fn kube_discovery_works_both_ways() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let legacy = kube::discovery::Discovery::new(client.clone()).run().await.unwrap();
    let aggregated = kube::discovery::Discovery::new(client.clone()).run_aggregated().await.unwrap();
    let names = |d: &kube::discovery::Discovery| -> BTreeSet<String> {
        d.groups()
            .flat_map(|g| {
                g.versions()
                    .flat_map(|v| {
                        g.versioned_resources(v).into_iter().map(|(ar, _)| format!("{}/{}", ar.api_version, ar.plural))
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let (a, b) = (names(&legacy), names(&aggregated));
    assert!(a.contains("apps/v1/deployments") && a.contains("v1/pods"), "{a:?}");
    assert_eq!(a, b);
    let (ar, caps) = aggregated.resolve_gvk(&kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment")).unwrap();
    assert_eq!(ar.plural, "deployments");
    assert!(
        caps.subresources.iter().any(|(s, _)| s.plural == "scale" || s.plural == "deployments/scale"),
        "{:?}",
        caps.subresources
    );
}

#[tokio::test]
async fn documents_follow_resources_added_at_run_time() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let table = srv.running.server.registry.table.clone();
    let before = get(&client, "/openapi/v3", &[]).await;
    assert!(before.json()["paths"].get("apis/example.com/v1").is_none());

    // A resource arrives (as custom resources will): every document shows it.
    let def = krate_api::generated::resources::RESOURCES.iter().find(|r| r.plural == "configmaps").unwrap();
    let mut widgets = krate_api::ResourceInfo::from_def(def);
    widgets.group = "example.com".into();
    widgets.plural = "widgets".into();
    widgets.singular = "widget".into();
    widgets.kind = "Widget".into();
    table.add(widgets);
    let after = get(&client, "/openapi/v3", &[("if-none-match", before.header("etag"))]).await;
    assert_eq!(after.code, 200, "the index changed");
    let url = after.json()["paths"]["apis/example.com/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
    let doc = get(&client, &url, &[]).await.json();
    let create = &doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"]["post"];
    assert_eq!(create["operationId"], "createExampleComV1NamespacedWidget");
    assert_eq!(create["x-kubernetes-group-version-kind"]["kind"], "Widget");
    let apis = get(&client, "/apis", &[("accept", AGGREGATED_V2)]).await.json();
    let group = apis["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "example.com").unwrap();
    assert_eq!(group["versions"][0]["resources"][0]["resource"], "widgets");
    let v2 = get(&client, "/openapi/v2", &[]).await.json();
    assert!(v2["paths"]["/apis/example.com/v1/widgets"]["get"].is_object());

    // And leaves.
    table.remove("example.com", "v1", "widgets");
    assert!(get(&client, "/openapi/v3", &[]).await.json()["paths"].get("apis/example.com/v1").is_none());
    assert_eq!(get(&client, &url, &[]).await.code, 404);
    assert!(get(&client, "/openapi/v2", &[]).await.json()["paths"].get("/apis/example.com/v1/widgets").is_none());
}
