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
