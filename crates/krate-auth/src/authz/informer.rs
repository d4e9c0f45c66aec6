//! An in-memory copy of one resource, kept current by the registry's watch, so an
//! authorization decision is a memory lookup. Each object is parsed once, on its event,
//! into whatever the user needs (`T`). Like upstream's informers, a decision may lag a
//! write by the watch latency.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use krate_api::Registry;
use krate_api::registry::{Scope, WatchOptions};
use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::watch;

/// (namespace, name); "" for cluster-scoped objects.
pub type Key = (String, String);

pub struct Informer<T> {
    objects: RwLock<HashMap<Key, Arc<T>>>,
    /// Bumped after every applied change (initial sync included): loops that derive
    /// state (aggregation) wait on it.
    generation: watch::Sender<u64>,
    synced: watch::Sender<bool>,
}

fn key_of(obj: &Value) -> Key {
    let ns = krate_api::object::meta_str(obj, "namespace").unwrap_or("").to_string();
    (ns, krate_api::object::name(obj).to_string())
}

impl<T: Send + Sync + 'static> Informer<T> {
    /// Starts following `group/version/plural`; `parse` turns each object into a `T`.
    pub fn start(
        registry: &Arc<Registry>,
        group: &str,
        version: &str,
        plural: &str,
        parse: fn(&Value) -> T,
    ) -> Arc<Self> {
        let informer = Arc::new(Informer {
            objects: RwLock::new(HashMap::new()),
            generation: watch::channel(0).0,
            synced: watch::channel(false).0,
        });
        match registry.table.lookup(group, version, plural) {
            Some(resource) => {
                let scope = Scope { resource, namespace: None };
                tokio::spawn(follow(Arc::downgrade(registry), scope, Arc::downgrade(&informer), parse));
            }
            None => {
                tracing::warn!(group, plural, "authorization index: resource not served; staying empty");
                informer.synced.send_replace(true);
            }
        }
        informer
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<T>> {
        self.objects.read().get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// Every object (cheap: shared pointers).
    pub fn all(&self) -> Vec<(Key, Arc<T>)> {
        self.objects.read().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Objects of one namespace.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<T>> {
        self.objects.read().iter().filter(|((ns, _), _)| ns == namespace).map(|(_, v)| v.clone()).collect()
    }

    /// Whether `f` holds for some object; `f` runs under the read lock, so it must be quick.
    pub fn any(&self, mut f: impl FnMut(&Key, &T) -> bool) -> bool {
        self.objects.read().iter().any(|(k, v)| f(k, v))
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Waits (at most `timeout`) until the first full listing is in; false on timeout.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.synced.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await.is_ok_and(|r| r.is_ok())
    }
}

/// Watches until the registry or the informer is gone, re-watching (and replacing the
/// copy wholesale) whenever a watch ends.
async fn follow<T: Send + Sync + 'static>(
    registry: std::sync::Weak<Registry>,
    scope: Scope,
    informer: std::sync::Weak<Informer<T>>,
    parse: fn(&Value) -> T,
) {
    loop {
        let Some(reg) = registry.upgrade() else { return };
        let opts = WatchOptions { allow_bookmarks: true, send_initial_events: Some(true), ..Default::default() };
        let stream = match reg.watch(&scope, &opts).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, resource = %scope.resource.plural, "authorization index: watch failed; retrying");
                drop(reg);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        drop(reg);
        let mut stream = std::pin::pin!(stream);
        // The initial listing goes to a fresh map, swapped in at its end.
        let mut fresh: Option<HashMap<Key, Arc<T>>> = Some(HashMap::new());
        while let Some(item) = stream.next().await {
            let Some(inf) = informer.upgrade() else { return };
            let Ok(obj) = serde_json::from_slice::<Value>(&item.object) else { continue };
            match item.kind {
                "ADDED" | "MODIFIED" => {
                    let (k, v) = (key_of(&obj), Arc::new(parse(&obj)));
                    match fresh.as_mut() {
                        Some(map) => {
                            map.insert(k, v);
                        }
                        None => {
                            inf.objects.write().insert(k, v);
                        }
                    }
                }
                "DELETED" => {
                    let k = key_of(&obj);
                    match fresh.as_mut() {
                        Some(map) => {
                            map.remove(&k);
                        }
                        None => {
                            inf.objects.write().remove(&k);
                        }
                    }
                }
                "BOOKMARK" => {
                    let end = obj.pointer("/metadata/annotations/k8s.io~1initial-events-end").and_then(Value::as_str);
                    if end == Some("true")
                        && let Some(map) = fresh.take()
                    {
                        *inf.objects.write() = map;
                        inf.synced.send_replace(true);
                    }
                }
                _ => {
                    // ERROR: the watch is over; start again.
                    break;
                }
            }
            if fresh.is_none() {
                inf.generation.send_modify(|g| *g += 1);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
