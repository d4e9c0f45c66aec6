//! Legacy discovery documents (/api, /apis, /apis/GROUP, /api/v1, /apis/GROUP/VERSION),
//! built from the live resource table.

use serde_json::{Value, json};

use krate_api::{ResourceInfo, ResourceTable};

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let gv = |v: &String| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({
        "name": group,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(gv).unwrap_or(Value::Null),
    })
}

pub fn api_group_list(table: &ResourceTable) -> Value {
    let groups: Vec<Value> =
        table.groups().iter().filter(|(g, _)| !g.is_empty()).map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(table: &ResourceTable, group: &str) -> Option<Value> {
    let (g, versions) = table.groups().into_iter().find(|(g, _)| g == group && !g.is_empty())?;
    let mut doc = group_json(&g, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn resource_json(r: &ResourceInfo) -> Vec<Value> {
    let mut main = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        main["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        main["categories"] = json!(r.categories);
    }
    let mut out = vec![main];
    for s in &r.subresources {
        let mut sub = json!({
            "name": format!("{}/{}", r.plural, s.name),
            "singularName": "",
            "namespaced": r.namespaced,
            "kind": s.kind,
            "verbs": s.verbs,
        });
        if !s.group.is_empty() || !s.version.is_empty() {
            sub["group"] = json!(s.group);
            sub["version"] = json!(s.version);
        }
        out.push(sub);
    }
    out
}

pub fn api_resource_list(table: &ResourceTable, group: &str, version: &str) -> Option<Value> {
    let resources = table.resources(group, version)?;
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let list: Vec<Value> = resources.iter().flat_map(|r| resource_json(r)).collect();
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}))
}

/// Which aggregated discovery version (apidiscovery.k8s.io v2 or v2beta1) Accept asks
/// for before any plain form, if any: clients list it first and fall back to the legacy
/// documents with `application/json`.
pub fn aggregated_version(headers: &http::HeaderMap) -> Option<&'static str> {
    let accept = headers.get(http::header::ACCEPT)?.to_str().ok()?;
    for item in accept.split(',') {
        let mut parts = item.split(';').map(|p| p.trim().to_ascii_lowercase());
        let mt = parts.next().unwrap_or_default();
        let params: Vec<String> = parts.collect();
        let param = |k: &str| params.iter().find_map(|p| p.strip_prefix(&format!("{k}=")).map(String::from));
        if param("as").is_none() {
            if matches!(mt.as_str(), "application/json" | "*/*" | "application/*" | "application/yaml") {
                return None;
            }
            continue;
        }
        let aggregated = param("as").as_deref() == Some("apigroupdiscoverylist")
            && param("g").as_deref() == Some("apidiscovery.k8s.io")
            && matches!(mt.as_str(), "application/json" | "*/*");
        match param("v").as_deref() {
            Some("v2") if aggregated => return Some("v2"),
            Some("v2beta1") if aggregated => return Some("v2beta1"),
            _ => {}
        }
    }
    None
}

/// The Content-Type of an aggregated discovery answer, echoing what was asked.
pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

fn resource_discovery(r: &ResourceInfo) -> Value {
    let mut v = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    if !r.subresources.is_empty() {
        let subs: Vec<Value> = r
            .subresources
            .iter()
            .map(|s| {
                let (g, ver) = if s.group.is_empty() && s.version.is_empty() {
                    (r.group.as_str(), r.version.as_str())
                } else {
                    (s.group.as_str(), s.version.as_str())
                };
                json!({
                    "subresource": s.name,
                    "responseKind": {"group": g, "version": ver, "kind": s.kind},
                    "verbs": s.verbs,
                })
            })
            .collect();
        v["subresources"] = Value::Array(subs);
    }
    v
}

/// The APIGroupDiscoveryList of /api (`core`: the core group alone) or /apis (every
/// other group), in the order of the legacy documents.
pub fn aggregated(table: &ResourceTable, core: bool, version: &str) -> Value {
    let items: Vec<Value> = table
        .groups()
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .filter_map(|v| {
                    let resources = table.resources(g, v)?;
                    let list: Vec<Value> = resources.iter().map(|r| resource_discovery(r)).collect();
                    Some(json!({"version": v, "resources": list, "freshness": "Current"}))
                })
                .collect();
            let metadata = if g.is_empty() {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": g, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::ACCEPT, v.parse().unwrap());
        h
    }

    #[test]
    fn aggregated_form_only_when_asked_first() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        assert_eq!(aggregated_version(&http::HeaderMap::new()), None);
        assert_eq!(aggregated_version(&accept(&format!("{v2},{beta},application/json;q=0.9"))), Some("v2"));
        assert_eq!(aggregated_version(&accept(&format!("{beta},application/json;q=0.9"))), Some("v2beta1"));
        assert_eq!(aggregated_version(&accept(&format!("application/json,{v2}"))), None);
        assert_eq!(
            aggregated_version(&accept("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList")),
            None
        );
        assert_eq!(aggregated_version(&accept("application/json;as=Table;g=meta.k8s.io;v=v1")), None);
    }

    #[test]
    fn aggregated_documents_split_core_from_groups() {
        let table = ResourceTable::builtin();
        let core = aggregated(&table, true, "v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        let pods = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap();
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["shortNames"], json!(["po"]));
        let scale = json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
        let apis = aggregated(&table, false, "v2");
        let apps = apis["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "apps").unwrap();
        let deployments = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        let sub = deployments["subresources"].as_array().unwrap().iter().find(|s| s["subresource"] == "scale").unwrap();
        assert_eq!(sub["responseKind"], scale);
    }
}
