//! The API server's CustomResourceDefinition loop, as upstream's apiextensions
//! controllers (naming, establishing, finalizer) run inside kube-apiserver:
//!
//! - names: a CRD's requested names are accepted unless another CRD of its group has
//!   them (NamesAccepted, status.acceptedNames); accepted names make it Established;
//! - serving: an Established CRD's served versions enter the resource table (so
//!   discovery, OpenAPI and the registry see them) and their watch cache starts;
//! - cleanup: a deleted CRD (held by the customresourcecleanup finalizer, added by its
//!   strategy on delete) has its objects deleted, leaves the table, then loses the
//!   finalizer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use krate_api::admission::NoAdmission;
use krate_api::crd::validate::RuleEvaluator;
use krate_api::crd::{self, CLEANUP_FINALIZER};
use krate_api::kinds::apiextensions::set_condition;
use krate_api::registry::{Context, DeleteOptions, ListOptions, Patch, Scope, WatchOptions};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry, object};

/// How soon a CRD whose objects are still going away is looked at again.
const CLEANUP_RETRY: Duration = Duration::from_millis(500);

fn loop_user() -> UserInfo {
    UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

fn crd_scope(registry: &Registry) -> Scope {
    let resource =
        registry.table.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions").expect("CRDs are built in");
    Scope { resource, namespace: None }
}

/// A table entry: group, version, plural.
type Entry = (String, String, String);

/// What the loop has put in the resource table for each CRD.
#[derive(Default)]
struct Served {
    /// CRD name → its entries and the fingerprint (spec and accepted names) they came from.
    by_crd: HashMap<String, (Vec<Entry>, String)>,
}

struct Loop {
    registry: Weak<Registry>,
    rules: Arc<dyn RuleEvaluator>,
    served: Served,
    requeue: mpsc::UnboundedSender<String>,
}

/// Starts the loop for as long as the registry lives.
pub fn spawn(registry: Arc<Registry>, rules: Arc<dyn RuleEvaluator>) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(&registry);
    drop(registry);
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut this = Loop { registry: weak.clone(), rules, served: Served::default(), requeue: tx };
        loop {
            let Some(registry) = weak.upgrade() else { return };
            let scope = crd_scope(&registry);
            let stream = match registry.watch(&scope, &WatchOptions::default()).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e.message, "CRD watch failed");
                    drop(registry);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            drop(registry);
            let mut stream = Box::pin(stream);
            loop {
                tokio::select! {
                    item = stream.next() => {
                        let Some(item) = item else { break };
                        let Ok(obj) = serde_json::from_slice::<Value>(&item.object) else { continue };
                        if item.kind == "BOOKMARK" || item.kind == "ERROR" {
                            continue;
                        }
                        let name = object::name(&obj).to_string();
                        let group = obj.pointer("/spec/group").and_then(Value::as_str).unwrap_or("").to_string();
                        if item.kind == "DELETED" {
                            this.unserve(&name);
                        }
                        // A change may settle a name conflict of another CRD in the group.
                        this.sync_group(&group, &name).await;
                    }
                    Some(name) = rx.recv() => this.sync_named(&name).await,
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

impl Loop {
    fn registry(&self) -> Option<Arc<Registry>> {
        self.registry.upgrade()
    }

    async fn all_crds(&self) -> Vec<Value> {
        let Some(registry) = self.registry() else { return Vec::new() };
        match registry.list(&crd_scope(&registry), &ListOptions::default()).await {
            Ok(list) => list.items.iter().filter_map(|i| serde_json::from_slice(i).ok()).collect(),
            Err(e) => {
                tracing::warn!(error = %e.message, "listing CRDs failed");
                Vec::new()
            }
        }
    }

    /// Syncs `first`, then the other CRDs of its group.
    async fn sync_group(&mut self, group: &str, first: &str) {
        let crds = self.all_crds().await;
        let mut names: Vec<String> = vec![first.to_string()];
        names.extend(
            crds.iter()
                .filter(|c| c.pointer("/spec/group").and_then(Value::as_str) == Some(group))
                .map(|c| object::name(c).to_string())
                .filter(|n| n != first),
        );
        for name in names {
            if let Some(crd) = crds.iter().find(|c| object::name(c) == name) {
                self.sync(crd, &crds).await;
            }
        }
    }

    async fn sync_named(&mut self, name: &str) {
        let crds = self.all_crds().await;
        if let Some(crd) = crds.iter().find(|c| object::name(c) == name) {
            self.sync(crd, &crds).await;
        }
    }

    async fn sync(&mut self, crd: &Value, all: &[Value]) {
        let name = object::name(crd).to_string();
        if object::is_deleting(crd) {
            if let Err(e) = self.clean_up(crd).await {
                tracing::warn!(crd = %name, error = %e.message, "CRD cleanup failed; retrying");
                self.retry(name);
            }
            return;
        }
        let mut next = crd.clone();
        accept_names(&mut next, all);
        if next.get("status") != crd.get("status")
            && let Err(e) = self.write_status(&name, &next).await
        {
            tracing::debug!(crd = %name, error = %e.message, "CRD status not written; retrying");
            self.retry(name);
            return;
        }
        if is_established(&next) {
            self.serve(&name, &next);
        }
    }

    fn retry(&self, name: String) {
        let tx = self.requeue.clone();
        tokio::spawn(async move {
            tokio::time::sleep(CLEANUP_RETRY).await;
            let _ = tx.send(name);
        });
    }

    async fn write_status(&self, name: &str, crd: &Value) -> Result<(), ApiError> {
        let Some(registry) = self.registry() else { return Ok(()) };
        let user = loop_user();
        let ctx = Context::internal(&user, &NoAdmission);
        let patch = Patch::Merge(json!({"status": crd.get("status").cloned().unwrap_or(json!({}))}));
        registry.patch(&crd_scope(&registry), name, patch, Some("status"), &ctx).await.map(|_| ())
    }

    /// Puts the CRD's served versions in the table (replacing what it served before).
    fn serve(&mut self, name: &str, crd: &Value) {
        let Some(registry) = self.registry() else { return };
        let fingerprint =
            json!([crd.get("spec"), crd.pointer("/status/acceptedNames"), crd::is_terminating(crd)]).to_string();
        if self.served.by_crd.get(name).is_some_and(|(_, f)| *f == fingerprint) {
            return;
        }
        let infos = crd::resources(crd, self.rules.clone());
        let entries: Vec<Entry> =
            infos.iter().map(|r| (r.group.clone(), r.version.clone(), r.plural.clone())).collect();
        if let Some((old, _)) = self.served.by_crd.remove(name) {
            for (g, v, p) in old.iter().filter(|e| !entries.contains(e)) {
                registry.table.remove(g, v, p);
            }
        }
        for info in infos {
            let info = Arc::new(info);
            registry.table.add((*info).clone());
            registry.cache(&info);
        }
        tracing::info!(crd = %name, versions = entries.len(), "custom resource served");
        self.served.by_crd.insert(name.to_string(), (entries, fingerprint));
    }

    fn unserve(&mut self, name: &str) {
        let Some(registry) = self.registry() else { return };
        if let Some((entries, _)) = self.served.by_crd.remove(name) {
            for (g, v, p) in entries {
                registry.table.remove(&g, &v, &p);
            }
            tracing::info!(crd = %name, "custom resource no longer served");
        }
    }

    /// Upstream's finalizer controller: delete every object, stop serving, release.
    async fn clean_up(&mut self, crd: &Value) -> Result<(), ApiError> {
        let Some(registry) = self.registry() else { return Ok(()) };
        let name = object::name(crd).to_string();
        if !object::finalizers(crd).iter().any(|f| f == CLEANUP_FINALIZER) {
            return Ok(());
        }
        let user = loop_user();
        let ctx = Context::internal(&user, &NoAdmission);
        let mut next = crd.clone();
        set_condition(
            &mut next,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
        if next.get("status") != crd.get("status") {
            self.write_status(&name, &next).await?;
        }
        // Served as terminating from here on: creates are refused while objects go.
        if self.served.by_crd.contains_key(&name) {
            self.serve(&name, &next);
        }
        // The storage version's resource addresses every object, whatever its version.
        let storage = crd::storage_version(crd).unwrap_or_default();
        let resource = crd::resources(crd, self.rules.clone())
            .into_iter()
            .find(|r| r.version == storage)
            .or_else(|| crd::resources(crd, self.rules.clone()).into_iter().next());
        if let Some(resource) = resource {
            let scope = Scope { resource: Arc::new(resource), namespace: None };
            registry.delete_collection(&scope, &ListOptions::default(), &DeleteOptions::default(), &ctx).await?;
            let left = registry.list(&scope, &ListOptions { limit: 1, ..Default::default() }).await?;
            if !left.items.is_empty() {
                // Objects held by their own finalizers: look again shortly.
                self.retry(name);
                return Ok(());
            }
        }
        self.unserve(&name);
        let finalizers: Vec<String> = object::finalizers(crd).into_iter().filter(|f| f != CLEANUP_FINALIZER).collect();
        let patch = Patch::Merge(json!({"metadata": {"finalizers": finalizers}}));
        match registry.patch(&crd_scope(&registry), &name, patch, None, &ctx).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Established")
            && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

fn strs(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// Upstream's naming controller: the requested names are accepted unless another CRD of
/// the group already accepted one of them; on a conflict the previously accepted names
/// stay. Accepted names establish the CRD.
pub fn accept_names(crd: &mut Value, all: &[Value]) {
    let name = object::name(crd).to_string();
    let group = crd.pointer("/spec/group").and_then(Value::as_str).unwrap_or("").to_string();
    let mut used: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for other in all.iter().filter(|o| object::name(o) != name) {
        if other.pointer("/spec/group").and_then(Value::as_str) != Some(group.as_str()) {
            continue;
        }
        let Some(names) = other.pointer("/status/acceptedNames") else { continue };
        for field in ["plural", "singular", "kind", "listKind"] {
            if let Some(v) = names.get(field).and_then(Value::as_str).filter(|v| !v.is_empty()) {
                used.entry(field).or_default().insert(v.to_string());
            }
        }
        used.entry("shortNames").or_default().extend(strs(names.get("shortNames")));
    }
    let requested = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let taken = |field: &str, v: &str| used.get(field).is_some_and(|s| s.contains(v));
    let get = |field: &str| requested.get(field).and_then(Value::as_str).unwrap_or("").to_string();
    let conflict = if taken("plural", &get("plural")) {
        Some(("PluralConflict", format!("\"{}\" is already in use", get("plural"))))
    } else if !get("singular").is_empty() && taken("singular", &get("singular")) {
        Some(("SingularConflict", format!("\"{}\" is already in use", get("singular"))))
    } else if let Some(s) = strs(requested.get("shortNames")).into_iter().find(|s| taken("shortNames", s)) {
        Some(("ShortNamesConflict", format!("\"{s}\" is already in use")))
    } else if taken("kind", &get("kind")) {
        Some(("KindConflict", format!("\"{}\" is already in use", get("kind"))))
    } else if taken("listKind", &get("listKind")) {
        Some(("ListKindConflict", format!("\"{}\" is already in use", get("listKind"))))
    } else {
        None
    };
    match conflict {
        None => {
            crd["status"]["acceptedNames"] = requested;
            set_condition(crd, "NamesAccepted", "True", "NoConflicts", "no conflicts found");
            set_condition(crd, "Established", "True", "InitialNamesAccepted", "the initial names have been accepted");
        }
        Some((reason, message)) => {
            set_condition(crd, "NamesAccepted", "False", reason, &message);
            let accepted = crd.pointer("/status/acceptedNames/plural").and_then(Value::as_str).unwrap_or("");
            if accepted.is_empty() {
                set_condition(crd, "Established", "False", "NotAccepted", "not all names are accepted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str, plural: &str, kind: &str, short: &[&str]) -> Value {
        json!({"metadata": {"name": name}, "spec": {"group": "example.com",
            "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": kind, "listKind": format!("{kind}List"), "shortNames": short}},
            "status": {}})
    }

    #[test]
    fn free_names_are_accepted_and_establish() {
        let mut c = crd("widgets.example.com", "widgets", "Widget", &["wd"]);
        accept_names(&mut c, &[]);
        assert_eq!(c["status"]["acceptedNames"]["plural"], "widgets");
        assert!(is_established(&c));
    }

    #[test]
    fn names_in_use_in_the_group_conflict() {
        let mut first = crd("widgets.example.com", "widgets", "Widget", &["wd"]);
        accept_names(&mut first, &[]);
        let mut second = crd("gadgets.example.com", "gadgets", "Gadget", &["wd"]);
        accept_names(&mut second, std::slice::from_ref(&first));
        let cond = second["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "NamesAccepted")
            .unwrap()
            .clone();
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "ShortNamesConflict");
        assert_eq!(cond["message"], "\"wd\" is already in use");
        assert!(!is_established(&second));
    }
}
