//! The table of served resources. Built-in entries come from the generated table;
//! entries can be added and removed at run time (custom resources, aggregated APIs).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use crate::generated::resources::{GROUP_VERSIONS, RESOURCES, ResourceDef};
use crate::strategy::{self, Strategy};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubresourceInfo {
    pub name: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub verbs: Vec<String>,
}

/// One resource in one group-version, with how it is stored and the strategy that
/// supplies its per-kind semantics.
#[derive(Clone)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub subresources: Vec<SubresourceInfo>,
    /// Store key prefix shared by every version of the resource, ending in '/'.
    pub key_prefix: String,
    pub strategy: Arc<dyn Strategy>,
}

impl std::fmt::Debug for ResourceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResourceInfo({}/{} {})", self.group, self.version, self.plural)
    }
}

impl ResourceInfo {
    pub fn from_def(def: &ResourceDef) -> Self {
        ResourceInfo {
            group: def.group.into(),
            version: def.version.into(),
            kind: def.kind.into(),
            plural: def.plural.into(),
            singular: def.singular.into(),
            namespaced: def.namespaced,
            verbs: def.verbs.iter().map(|s| s.to_string()).collect(),
            short_names: def.short_names.iter().map(|s| s.to_string()).collect(),
            categories: def.categories.iter().map(|s| s.to_string()).collect(),
            subresources: def
                .subresources
                .iter()
                .map(|s| SubresourceInfo {
                    name: s.name.into(),
                    group: s.group.into(),
                    version: s.version.into(),
                    kind: s.kind.into(),
                    verbs: s.verbs.iter().map(|v| v.to_string()).collect(),
                })
                .collect(),
            key_prefix: storage_prefix(def.group, def.plural),
            strategy: strategy::for_kind(def.group, def.kind),
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    pub fn subresource(&self, name: &str) -> Option<&SubresourceInfo> {
        self.subresources.iter().find(|s| s.name == name)
    }

    pub fn has_status(&self) -> bool {
        self.subresource("status").is_some()
    }

    /// Objects kept only while a request is served (reviews): never stored.
    pub fn is_virtual(&self) -> bool {
        !self.has_verb("get") && !self.has_verb("list") && self.has_verb("create")
    }

    /// The store key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/{name}", self.key_prefix),
            _ => format!("{}{name}", self.key_prefix),
        }
    }

    /// The key prefix of a collection: one namespace, or all of them.
    pub fn collection_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/", self.key_prefix),
            _ => self.key_prefix.clone(),
        }
    }
}

/// Where a resource lives in the store. Versions of one resource share it, and so do
/// resources upstream stores together (events.k8s.io Events are core Events).
fn storage_prefix(group: &str, plural: &str) -> String {
    match (group, plural) {
        ("" | "events.k8s.io", "events") => "/registry/events/".into(),
        ("", _) => format!("/registry/{plural}/"),
        _ => format!("/registry/{group}/{plural}/"),
    }
}

/// Served resources by group-version, and the discovery order of groups.
pub struct ResourceTable {
    inner: RwLock<TableInner>,
    /// Bumped on every change, so documents built from the table (OpenAPI) know when
    /// they are stale.
    generation: AtomicU64,
}

#[derive(Default)]
struct TableInner {
    /// group → versions, preferred first, in discovery order.
    groups: Vec<(String, Vec<String>)>,
    /// (group, version) → resources in discovery order.
    resources: BTreeMap<(String, String), Vec<Arc<ResourceInfo>>>,
}

impl ResourceTable {
    /// Every resource upstream v1.36 serves by default.
    pub fn builtin() -> Self {
        let mut inner = TableInner {
            groups: GROUP_VERSIONS
                .iter()
                .map(|(g, vs)| (g.to_string(), vs.iter().map(|v| v.to_string()).collect()))
                .collect(),
            resources: BTreeMap::new(),
        };
        for def in RESOURCES {
            inner
                .resources
                .entry((def.group.to_string(), def.version.to_string()))
                .or_default()
                .push(Arc::new(ResourceInfo::from_def(def)));
        }
        ResourceTable { inner: RwLock::new(inner), generation: AtomicU64::new(0) }
    }

    /// Changes with every `add` and `remove`.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Groups in discovery order with their versions, preferred first (core is "").
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        self.inner.read().groups.clone()
    }

    pub fn resources(&self, group: &str, version: &str) -> Option<Vec<Arc<ResourceInfo>>> {
        self.inner.read().resources.get(&(group.to_string(), version.to_string())).cloned()
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let inner = self.inner.read();
        inner.resources.get(&(group.to_string(), version.to_string()))?.iter().find(|r| r.plural == plural).cloned()
    }

    /// Every served resource.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.inner.read().resources.values().flatten().cloned().collect()
    }

    /// Adds (or replaces) a resource, creating its group-version if new. Used for custom
    /// resources and aggregated APIs.
    pub fn add(&self, info: ResourceInfo) {
        let mut inner = self.inner.write();
        let gv = (info.group.clone(), info.version.clone());
        match inner.groups.iter_mut().find(|(g, _)| *g == info.group) {
            Some((_, versions)) if !versions.contains(&info.version) => versions.push(info.version.clone()),
            Some(_) => {}
            None => inner.groups.push((info.group.clone(), vec![info.version.clone()])),
        }
        let list = inner.resources.entry(gv).or_default();
        list.retain(|r| r.plural != info.plural);
        list.push(Arc::new(info));
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Removes a resource; a group-version left empty disappears from discovery.
    pub fn remove(&self, group: &str, version: &str, plural: &str) {
        let mut inner = self.inner.write();
        self.generation.fetch_add(1, Ordering::SeqCst);
        let gv = (group.to_string(), version.to_string());
        let empty = inner.resources.get_mut(&gv).map(|list| {
            list.retain(|r| r.plural != plural);
            list.is_empty()
        });
        if empty == Some(true) {
            inner.resources.remove(&gv);
            for (g, versions) in inner.groups.iter_mut() {
                if g == group {
                    versions.retain(|v| v != version);
                }
            }
            inner.groups.retain(|(_, versions)| !versions.is_empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_serves_upstream_defaults() {
        let t = ResourceTable::builtin();
        let pods = t.lookup("", "v1", "pods").unwrap();
        assert!(pods.namespaced && pods.has_status());
        assert_eq!(pods.key(Some("default"), "web"), "/registry/pods/default/web");
        let deploy = t.lookup("apps", "v1", "deployments").unwrap();
        assert_eq!(deploy.short_names, vec!["deploy"]);
        assert_eq!(deploy.key_prefix, "/registry/apps/deployments/");
        assert!(t.lookup("batch", "v1beta1", "cronjobs").is_none(), "removed versions are not served");
        let ev1 = t.lookup("", "v1", "events").unwrap();
        let ev2 = t.lookup("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(ev1.key_prefix, ev2.key_prefix, "one storage for both Event versions");
        assert!(t.lookup("authorization.k8s.io", "v1", "subjectaccessreviews").unwrap().is_virtual());
        let ns = t.lookup("", "v1", "namespaces").unwrap();
        assert_eq!(ns.key(Some("x"), "default"), "/registry/namespaces/default");
    }

    #[test]
    fn resources_come_and_go_at_run_time() {
        let t = ResourceTable::builtin();
        let mut info = ResourceInfo::from_def(
            crate::generated::resources::RESOURCES.iter().find(|r| r.plural == "configmaps").unwrap(),
        );
        info.group = "example.com".into();
        info.plural = "widgets".into();
        t.add(info);
        assert!(t.lookup("example.com", "v1", "widgets").is_some());
        assert!(t.groups().iter().any(|(g, _)| g == "example.com"));
        t.remove("example.com", "v1", "widgets");
        assert!(t.lookup("example.com", "v1", "widgets").is_none());
        assert!(!t.groups().iter().any(|(g, _)| g == "example.com"));
    }
}
