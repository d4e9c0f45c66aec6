//! OpenAPI documents built from the live resource table: the v3 index and one v3
//! document per group-version (/openapi/v3), and the Swagger 2.0 document (/openapi/v2).
//! Documents are built on first request and kept until the table changes.

mod custom;
mod ops;
mod proto;
mod schemas;
mod types;
mod v2;
mod v3;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, header};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use krate_api::{ApiError, ResourceTable};

use crate::body::{self, Body};
use crate::conditional;

/// A built document and its hash (the ETag, and the `?hash=` of the v3 index).
pub struct Doc {
    pub bytes: Bytes,
    pub hash: String,
}

impl Doc {
    fn new(value: &Value) -> Arc<Doc> {
        let bytes = Bytes::from(serde_json::to_vec(value).unwrap_or_default());
        let hash = conditional::hash(&bytes);
        Arc::new(Doc { bytes, hash })
    }
}

#[derive(Default)]
struct Cache {
    /// The table generation the documents were built from.
    generation: u64,
    /// By group-version path: "api/v1", "apis/apps/v1".
    v3: HashMap<String, Arc<Doc>>,
    v2: Option<Arc<Doc>>,
    /// The v2 document in gnostic's protobuf form.
    v2_proto: Option<Arc<Doc>>,
}

#[derive(Default)]
pub struct OpenApi {
    cache: Mutex<Cache>,
}

/// The v3 path of a group-version ("api/v1", "apis/apps/v1").
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

const NO_CACHE: &str = "no-cache, private";
/// What upstream answers protobuf requests for /openapi/v2 with.
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V2Form {
    Json,
    Protobuf,
}

/// The first form of /openapi/v2 Accept lists that is served (no Accept: JSON). JSON
/// is also the only form of the v3 documents.
fn v2_form(headers: &HeaderMap) -> Option<V2Form> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else { return Some(V2Form::Json) };
    accept.split(',').map(|i| i.split(';').next().unwrap_or("").trim().to_ascii_lowercase()).find_map(|mt| {
        match mt.as_str() {
            "" | "*/*" | "application/*" | "application/json" => Some(V2Form::Json),
            // Clients write the version with '@' (kubectl) or '.' (upstream's answer).
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
            | "application/com.github.proto-openapi.spec.v2.v1.0+protobuf" => Some(V2Form::Protobuf),
            _ => None,
        }
    })
}

impl OpenApi {
    /// The cache, emptied first if the table changed since it was filled.
    fn fresh(&self, table: &ResourceTable) -> parking_lot::MutexGuard<'_, Cache> {
        let generation = table.generation();
        let mut cache = self.cache.lock();
        if cache.generation != generation {
            *cache = Cache { generation, ..Cache::default() };
        }
        cache
    }

    /// The v3 document of one group-version, if it is served.
    pub fn v3(&self, table: &ResourceTable, path: &str) -> Option<Arc<Doc>> {
        if let Some(doc) = self.fresh(table).v3.get(path) {
            return Some(doc.clone());
        }
        let (group, version) = match path.split('/').collect::<Vec<_>>().as_slice() {
            ["api", v] => (String::new(), v.to_string()),
            ["apis", g, v] => (g.to_string(), v.to_string()),
            _ => return None,
        };
        let generation = table.generation();
        let resources = table.resources(&group, &version)?;
        let doc = Doc::new(&v3::document(&ops::paths(&resources), &resources));
        // A document built while the table changed is served once but not kept.
        let mut cache = self.fresh(table);
        if cache.generation == generation {
            cache.v3.insert(path.to_string(), doc.clone());
        }
        Some(doc)
    }

    /// The v3 index: every served group-version with the hash of its document.
    pub fn v3_index(&self, table: &ResourceTable) -> Value {
        let mut paths = Map::new();
        for (group, versions) in table.groups() {
            for version in versions {
                let path = gv_path(&group, &version);
                if let Some(doc) = self.v3(table, &path) {
                    let url = format!("/openapi/v3/{path}?hash={}", doc.hash);
                    paths.insert(path, json!({"serverRelativeURL": url}));
                }
            }
        }
        json!({"paths": paths})
    }

    pub fn v2(&self, table: &ResourceTable) -> Arc<Doc> {
        if let Some(doc) = &self.fresh(table).v2 {
            return doc.clone();
        }
        let generation = table.generation();
        let mut all = Vec::new();
        for (group, versions) in table.groups() {
            for version in versions {
                all.extend(table.resources(&group, &version).unwrap_or_default());
            }
        }
        let doc = Doc::new(&v2::document(&ops::paths(&all), &all));
        let mut cache = self.fresh(table);
        if cache.generation == generation {
            cache.v2 = Some(doc.clone());
        }
        doc
    }

    /// The v2 document as gnostic's protobuf `openapi.v2.Document`.
    pub fn v2_proto(&self, table: &ResourceTable) -> Arc<Doc> {
        if let Some(doc) = &self.fresh(table).v2_proto {
            return doc.clone();
        }
        let generation = table.generation();
        let json: Value = serde_json::from_slice(&self.v2(table).bytes).unwrap_or_default();
        let bytes = Bytes::from(proto::document(&json));
        let doc = Arc::new(Doc { hash: conditional::hash(&bytes), bytes });
        let mut cache = self.fresh(table);
        if cache.generation == generation {
            cache.v2_proto = Some(doc.clone());
        }
        doc
    }

    /// Serves /openapi/v2 and /openapi/v3[/…] (`rest` is the path after /openapi).
    pub fn serve(
        &self,
        table: &ResourceTable,
        rest: &[&str],
        headers: &HeaderMap,
        query: &HashMap<String, String>,
    ) -> Response<Body> {
        match rest {
            ["v2"] => match v2_form(headers) {
                Some(V2Form::Json) => {
                    let doc = self.v2(table);
                    conditional::respond(headers, &doc.hash, doc.bytes.clone(), "application/json", NO_CACHE)
                }
                Some(V2Form::Protobuf) => {
                    let doc = self.v2_proto(table);
                    conditional::respond(headers, &doc.hash, doc.bytes.clone(), V2_PROTOBUF, NO_CACHE)
                }
                None => {
                    let asked = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
                    let e = ApiError::not_acceptable(format!(
                        "/openapi/v2 is served as application/json or {V2_PROTOBUF} (asked for {asked})"
                    ));
                    body::error(&e, body::Format::Json)
                }
            },
            ["v3"] => {
                let index = Doc::new(&self.v3_index(table));
                conditional::respond(headers, &index.hash, index.bytes.clone(), "application/json", NO_CACHE)
            }
            ["v3", gv @ ..] => {
                if v2_form(headers) != Some(V2Form::Json) {
                    // Upstream also offers v3 as protobuf; here only JSON is.
                    let asked = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
                    let e = ApiError::not_acceptable(format!(
                        "/openapi/v3 is served as application/json (asked for {asked})"
                    ));
                    return body::error(&e, body::Format::Json);
                }
                let path = gv.join("/");
                let Some(doc) = self.v3(table, &path) else {
                    return body::error(&ApiError::not_found_path(), body::Format::Json);
                };
                match query.get("hash") {
                    // An outdated link: upstream redirects to the current document.
                    Some(h) if *h != doc.hash => Response::builder()
                        .status(StatusCode::MOVED_PERMANENTLY)
                        .header(header::LOCATION, format!("/openapi/v3/{path}?hash={}", doc.hash))
                        .header(header::CACHE_CONTROL, NO_CACHE)
                        .body(body::full(Bytes::new()))
                        .expect("the path was matched against served group-versions"),
                    Some(_) => conditional::respond(
                        headers,
                        &doc.hash,
                        doc.bytes.clone(),
                        "application/json",
                        "public, immutable",
                    ),
                    None => conditional::respond(headers, &doc.hash, doc.bytes.clone(), "application/json", NO_CACHE),
                }
            }
            _ => body::error(&ApiError::not_found_path(), body::Format::Json),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_follow_table_changes() {
        let table = ResourceTable::builtin();
        let api = OpenApi::default();
        let apps = api.v3(&table, "apis/apps/v1").expect("apps/v1 is served");
        let doc: Value = serde_json::from_slice(&apps.bytes).unwrap();
        assert_eq!(doc["openapi"], "3.0.0");
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        assert!(doc["components"]["schemas"]["io.k8s.api.apps.v1.DeploymentSpec"].is_object());
        assert!(api.v3(&table, "apis/nothing/v1").is_none());
        let index = api.v3_index(&table);
        assert!(
            index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap().starts_with("/openapi/v3/api/v1?hash=")
        );
        // A table change rebuilds: a removed group-version disappears from the index.
        for r in table.resources("batch", "v1").unwrap() {
            table.remove("batch", "v1", &r.plural);
        }
        assert!(api.v3_index(&table)["paths"].get("apis/batch/v1").is_none());
        assert!(api.v3(&table, "apis/batch/v1").is_none());
    }
}
