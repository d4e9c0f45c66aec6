//! The garbage collector (upstream's generic-garbage-collector): an ownership graph of
//! every deletable kind from metadata-only watches, and the three propagations —
//! Background (dependents whose owners are all gone are deleted), Foreground (the owner
//! keeps its foregroundDeletion finalizer until its blocking dependents are gone) and
//! Orphan (dependents lose their references to the owner, then the owner its orphan
//! finalizer). Owners missing from the graph are looked up live before anything is
//! deleted, as upstream does, so a lagging watch never deletes a live object's dependents.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::core::PartialObjectMeta;
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::mpsc;

use crate::Clients;

const ORPHAN: &str = "orphan";
const FOREGROUND: &str = "foregroundDeletion";
/// Upstream ignores Events.
const IGNORED: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

/// (apiVersion, kind) → the resource and whether it is namespaced.
type Kinds = HashMap<(String, String), (ApiResource, bool)>;

#[derive(Clone, Debug)]
struct Node {
    ar: ApiResource,
    namespace: Option<String>,
    name: String,
    uid: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    finalizers: Vec<String>,
}

enum Change {
    Upsert(Box<Node>),
    Remove(String),
}

#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    /// owner uid → dependent uids.
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    fn remove(&mut self, uid: &str) -> Option<Node> {
        let node = self.nodes.remove(uid)?;
        for o in &node.owners {
            if let Some(d) = self.dependents.get_mut(&o.uid) {
                d.remove(uid);
            }
        }
        Some(node)
    }

    fn upsert(&mut self, node: Node) {
        self.remove(&node.uid);
        for o in &node.owners {
            self.dependents.entry(o.uid.clone()).or_default().insert(node.uid.clone());
        }
        self.nodes.insert(node.uid.clone(), node);
    }

    fn dependents_of(&self, uid: &str) -> Vec<Node> {
        self.dependents.get(uid).into_iter().flatten().filter_map(|d| self.nodes.get(d).cloned()).collect()
    }
}

pub async fn run(clients: Clients) {
    let client = clients.write;
    let (tx, mut rx) = mpsc::unbounded_channel::<Change>();
    let kinds: Arc<parking_lot::Mutex<Kinds>> = Arc::default();
    // Discovery, again every 30 s (upstream's resync), starts a watch per new resource.
    let watching = tokio::spawn({
        let (client, kinds) = (client.clone(), kinds.clone());
        async move {
            let mut started: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
            loop {
                match Discovery::new(client.clone()).run().await {
                    Ok(discovery) => {
                        for group in discovery.groups() {
                            for (ar, caps) in group.recommended_resources() {
                                let deletable = [verbs::LIST, verbs::WATCH, verbs::DELETE]
                                    .iter()
                                    .all(|v| caps.supports_operation(v));
                                if !deletable || IGNORED.contains(&(ar.group.as_str(), ar.plural.as_str())) {
                                    continue;
                                }
                                let namespaced = caps.scope == Scope::Namespaced;
                                kinds
                                    .lock()
                                    .insert((ar.api_version.clone(), ar.kind.clone()), (ar.clone(), namespaced));
                                let key = format!("{}/{}", ar.group, ar.plural);
                                started
                                    .entry(key)
                                    .or_insert_with(|| tokio::spawn(watch(client.clone(), ar, tx.clone())));
                            }
                        }
                    }
                    Err(error) => tracing::warn!(%error, "garbage collector: discovery failed"),
                }
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        }
    });
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _watching = Abort(watching);

    let mut graph = Graph::default();
    let mut dirty: HashSet<String> = HashSet::new();
    loop {
        let first = if dirty.is_empty() {
            match rx.recv().await {
                Some(c) => Some(c),
                None => return,
            }
        } else {
            // Dirty work waits a little for more changes, then runs.
            tokio::time::timeout(Duration::from_millis(50), rx.recv()).await.ok().flatten()
        };
        for change in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            match change {
                Change::Upsert(node) => {
                    dirty.insert(node.uid.clone());
                    dirty.extend(node.owners.iter().map(|o| o.uid.clone()));
                    dirty.extend(graph.dependents.get(&node.uid).into_iter().flatten().cloned());
                    graph.upsert(*node);
                }
                Change::Remove(uid) => {
                    if let Some(node) = graph.remove(&uid) {
                        dirty.extend(node.owners.iter().map(|o| o.uid.clone()));
                    }
                    dirty.extend(graph.dependents.get(&uid).into_iter().flatten().cloned());
                }
            }
        }
        let work: Vec<String> = dirty.drain().collect();
        for uid in work {
            let Some(node) = graph.nodes.get(&uid).cloned() else { continue };
            let kinds = kinds.lock().clone();
            if let Err(error) = process(&client, &graph, &kinds, &node).await {
                tracing::debug!(%error, object = %node.name, "garbage collector: will retry");
                dirty.insert(uid);
            }
        }
        if !dirty.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn watch(client: kube::Client, ar: ApiResource, tx: mpsc::UnboundedSender<Change>) {
    // Metadata only: the graph needs owners, finalizers and deletion, not the objects.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let mut events = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut listed: HashSet<String> = HashSet::new();
    let mut known: HashSet<String> = HashSet::new();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(error) => {
                tracing::debug!(%error, kind = %ar.kind, "garbage collector: watch failed; retrying");
                continue;
            }
        };
        let node = |m: &PartialObjectMeta<DynamicObject>| Node {
            ar: ar.clone(),
            namespace: m.metadata.namespace.clone(),
            name: m.metadata.name.clone().unwrap_or_default(),
            uid: m.metadata.uid.clone().unwrap_or_default(),
            owners: m.metadata.owner_references.clone().unwrap_or_default(),
            deleting: m.metadata.deletion_timestamp.is_some(),
            finalizers: m.metadata.finalizers.clone().unwrap_or_default(),
        };
        let sent = match event {
            Event::Apply(m) | Event::InitApply(m) => {
                let n = node(&m);
                listed.insert(n.uid.clone());
                known.insert(n.uid.clone());
                tx.send(Change::Upsert(Box::new(n))).map_err(|_| ())
            }
            Event::Delete(m) => {
                let uid = m.metadata.uid.clone().unwrap_or_default();
                known.remove(&uid);
                tx.send(Change::Remove(uid)).map_err(|_| ())
            }
            Event::Init => {
                listed.clear();
                Ok(())
            }
            Event::InitDone => {
                // Objects deleted while the watch was down.
                let gone: Vec<String> = known.difference(&listed).cloned().collect();
                known = listed.clone();
                gone.into_iter().try_for_each(|uid| tx.send(Change::Remove(uid)).map_err(|_| ()))
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

fn api_for(client: &kube::Client, node: &Node) -> Api<DynamicObject> {
    match &node.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &node.ar),
        None => Api::all_with(client.clone(), &node.ar),
    }
}

fn ignore_gone(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        other => other,
    }
}

/// Removes the references to `owner_uids` from `node` (a merge patch with its
/// resourceVersion would need a fresh read; the list is read live first).
async fn drop_owner_refs(client: &kube::Client, node: &Node, owner_uids: &[&str]) -> Result<(), kube::Error> {
    let api = api_for(client, node);
    let Some(live) = api.get_metadata_opt(&node.name).await? else { return Ok(()) };
    if live.metadata.uid.as_deref() != Some(&node.uid) {
        return Ok(());
    }
    let refs: Vec<OwnerReference> = live
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .filter(|r| !owner_uids.contains(&r.uid.as_str()))
        .collect();
    let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": live.metadata.resource_version, "uid": node.uid}});
    ignore_gone(api.patch_metadata(&node.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ()))
}

async fn drop_finalizer(client: &kube::Client, node: &Node, finalizer: &str) -> Result<(), kube::Error> {
    let api = api_for(client, node);
    let Some(live) = api.get_metadata_opt(&node.name).await? else { return Ok(()) };
    if live.metadata.uid.as_deref() != Some(&node.uid) {
        return Ok(());
    }
    let finalizers: Vec<String> =
        live.metadata.finalizers.unwrap_or_default().into_iter().filter(|f| f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": live.metadata.resource_version}});
    tracing::debug!(object = %node.name, finalizer, "garbage collector: removing finalizer");
    ignore_gone(api.patch_metadata(&node.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ()))
}

async fn delete(client: &kube::Client, node: &Node, policy: PropagationPolicy) -> Result<(), kube::Error> {
    tracing::debug!(object = %node.name, kind = %node.ar.kind, ?policy, "garbage collector: deleting");
    let dp = DeleteParams {
        propagation_policy: Some(policy),
        preconditions: Some(Preconditions { uid: Some(node.uid.clone()), resource_version: None }),
        ..Default::default()
    };
    ignore_gone(api_for(client, node).delete(&node.name, &dp).await.map(|_| ()))
}

/// How an owner reference stands (upstream's classifyReferences).
enum Owner {
    Solid,
    Dangling,
    WaitingForDependents,
}

async fn classify(
    client: &kube::Client,
    graph: &Graph,
    kinds: &Kinds,
    node: &Node,
    r: &OwnerReference,
) -> Result<Owner, kube::Error> {
    if let Some(owner) = graph.nodes.get(&r.uid) {
        return Ok(if owner.deleting && owner.finalizers.iter().any(|f| f == FOREGROUND) {
            Owner::WaitingForDependents
        } else {
            Owner::Solid
        });
    }
    // Not (yet) seen: ask the server, as upstream does before deleting anything.
    let Some((ar, namespaced)) = kinds.get(&(r.api_version.clone(), r.kind.clone())) else { return Ok(Owner::Solid) };
    let namespace = if *namespaced { node.namespace.clone() } else { None };
    let owner = Node {
        ar: ar.clone(),
        namespace,
        name: r.name.clone(),
        uid: r.uid.clone(),
        owners: vec![],
        deleting: false,
        finalizers: vec![],
    };
    let api = api_for(client, &owner);
    let found = match api.get_metadata_opt(&r.name).await {
        Ok(found) => found,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e),
    };
    Ok(match found {
        Some(o) if o.metadata.uid.as_deref() == Some(&r.uid) => {
            let waiting = o.metadata.deletion_timestamp.is_some()
                && o.metadata.finalizers.iter().flatten().any(|f| f == FOREGROUND);
            if waiting { Owner::WaitingForDependents } else { Owner::Solid }
        }
        _ => Owner::Dangling,
    })
}

async fn process(client: &kube::Client, graph: &Graph, kinds: &Kinds, node: &Node) -> Result<(), kube::Error> {
    let dependents = graph.dependents_of(&node.uid);
    if node.deleting && node.finalizers.iter().any(|f| f == ORPHAN) {
        for d in &dependents {
            drop_owner_refs(client, d, &[&node.uid]).await?;
        }
        return drop_finalizer(client, node, ORPHAN).await;
    }
    if node.deleting && node.finalizers.iter().any(|f| f == FOREGROUND) {
        let blocking: Vec<&Node> = dependents
            .iter()
            .filter(|d| d.owners.iter().any(|r| r.uid == node.uid && r.block_owner_deletion == Some(true)))
            .collect();
        if blocking.is_empty() {
            // Non-blocking dependents are still collected, in the background, once it is gone.
            return drop_finalizer(client, node, FOREGROUND).await;
        }
        for d in dependents.iter().filter(|d| !d.deleting) {
            process_dependent(client, graph, kinds, d).await?;
        }
        return Ok(());
    }
    if node.deleting || node.owners.is_empty() {
        return Ok(());
    }
    process_dependent(client, graph, kinds, node).await
}

/// Upstream's attemptToDeleteItem for an object with owners.
async fn process_dependent(
    client: &kube::Client,
    graph: &Graph,
    kinds: &Kinds,
    node: &Node,
) -> Result<(), kube::Error> {
    let (mut solid, mut gone) = (0, Vec::new());
    let mut waiting = false;
    for r in &node.owners {
        match classify(client, graph, kinds, node, r).await? {
            Owner::Solid => solid += 1,
            Owner::Dangling => gone.push(r.uid.as_str()),
            Owner::WaitingForDependents => {
                waiting = true;
                gone.push(r.uid.as_str());
            }
        }
    }
    if solid > 0 {
        if !gone.is_empty() {
            return drop_owner_refs(client, node, &gone).await;
        }
        return Ok(());
    }
    let has_dependents = !graph.dependents_of(&node.uid).is_empty();
    let policy = if waiting && has_dependents || node.finalizers.iter().any(|f| f == FOREGROUND) {
        PropagationPolicy::Foreground
    } else if node.finalizers.iter().any(|f| f == ORPHAN) {
        PropagationPolicy::Orphan
    } else {
        PropagationPolicy::Background
    };
    delete(client, node, policy).await
}
