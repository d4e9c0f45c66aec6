//! Shared informers: one watch per kind (and selector) per process, kept in one
//! in-memory store, with every change fanned out to each consumer — what client-go's
//! SharedInformerFactory gives upstream's controllers. At 150,000 pods this is the
//! difference between one copy of every pod and one per controller.
//!
//! A consumer's stream carries the object as it is after each add or update, and its
//! last state after a delete (deletes found by a relist included), so a kube-runtime
//! `Controller` can take it through `for_shared_stream`, `owns_shared_stream` or
//! `watches_shared_stream` and see every change. A new subscriber first receives every
//! object already known, as client-go's AddEventHandler replays its cache.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, LazyLock};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use prometheus::{IntCounterVec, register_int_counter_vec};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

static EVENTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "krate_informer_events_total",
        "Watch events taken into shared informer stores, by kind and type.",
        &["kind", "type"]
    )
    .expect("metric registers once")
});

/// What an informed kind must be: a kube-rs resource with static type information.
pub trait Kind: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<K> Kind for K where K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}

/// The informers of one process, made on first use and stopped when this is dropped.
pub struct Informers {
    client: kube::Client,
    made: Mutex<HashMap<(TypeId, String), Box<dyn Any + Send + Sync>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Informers {
    pub fn new(client: kube::Client) -> Arc<Informers> {
        Arc::new(Informers { client, made: Mutex::default(), tasks: Mutex::default() })
    }

    /// The informer of every object of kind `K`, in all namespaces.
    pub fn get<K: Kind>(&self) -> Informer<K> {
        self.get_with(watcher::Config::default())
    }

    /// The informer of the objects of kind `K` that `config`'s selectors choose; one
    /// per distinct set of selectors.
    pub fn get_with<K: Kind>(&self, config: watcher::Config) -> Informer<K> {
        let key = (TypeId::of::<K>(), format!("{:?}|{:?}", config.label_selector, config.field_selector));
        let mut made = self.made.lock();
        if let Some(found) = made.get(&key) {
            return found.downcast_ref::<Informer<K>>().expect("keyed by type").clone();
        }
        let (informer, task) = Informer::start(Api::all(self.client.clone()), config);
        made.insert(key, Box::new(informer.clone()));
        self.tasks.lock().push(task);
        informer
    }
}

impl Drop for Informers {
    fn drop(&mut self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

/// One kind's store and change fan-out. Cheap to clone.
pub struct Informer<K: Kind> {
    shared: Arc<Shared<K>>,
}

impl<K: Kind> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer { shared: self.shared.clone() }
    }
}

struct Shared<K: Kind> {
    store: Store<K>,
    /// True once the first list is in. Not the Store's own readiness: that wakes only
    /// the last of several concurrent waiters (one oneshot receiver behind it), and
    /// shared informers have several.
    ready: tokio::sync::watch::Sender<bool>,
    /// Held while applying an event and sending it, so a new subscriber's replay and
    /// the live events it then receives neither overlap nor leave a gap.
    fan_out: Mutex<FanOut<K>>,
}

struct FanOut<K: Kind> {
    writer: reflector::store::Writer<K>,
    subscribers: Vec<mpsc::UnboundedSender<Arc<K>>>,
    /// Objects listed by a relist in progress, announced once it completes (when the
    /// store holds them, so consumers looking them up find them).
    relisted: Vec<ObjectRef<K>>,
}

impl<K: Kind> Informer<K> {
    fn start(api: Api<K>, config: watcher::Config) -> (Informer<K>, JoinHandle<()>) {
        let writer = reflector::store::Writer::default();
        let store = writer.as_reader();
        let shared = Arc::new(Shared {
            store,
            ready: tokio::sync::watch::Sender::new(false),
            fan_out: Mutex::new(FanOut { writer, subscribers: Vec::new(), relisted: Vec::new() }),
        });
        let driver = shared.clone();
        let task = tokio::spawn(async move {
            let kind = K::kind(&()).to_string();
            let mut events = kube::runtime::watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => driver.take(&kind, event),
                    Err(error) => tracing::warn!(kind, %error, "informer watch failed; retrying"),
                }
            }
        });
        (Informer { shared }, task)
    }

    /// The objects known so far (empty until the first list completes).
    pub fn store(&self) -> Store<K> {
        self.shared.store.clone()
    }

    /// Waits until the first list has been taken in.
    pub async fn ready(&self) {
        // The sender lives as long as the informer, so this only fails if it is gone.
        let _ = self.shared.ready.subscribe().wait_for(|ready| *ready).await;
    }

    /// Every object known now, then every change from here on.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut fan_out = self.shared.fan_out.lock();
        for object in self.shared.store.state() {
            let _ = tx.send(object);
        }
        fan_out.subscribers.push(tx);
        UnboundedReceiverStream::new(rx)
    }
}

impl<K: Kind> Shared<K> {
    fn take(&self, kind: &str, event: Event<K>) {
        let label = match &event {
            Event::Apply(_) => "apply",
            Event::Delete(_) => "delete",
            Event::Init => "init",
            Event::InitApply(_) => "init_apply",
            Event::InitDone => "init_done",
        };
        EVENTS.with_label_values(&[kind, label]).inc();
        let mut fan_out = self.fan_out.lock();
        let before: Option<Vec<Arc<K>>> = matches!(event, Event::InitDone).then(|| self.store.state());
        fan_out.writer.apply_watcher_event(&event);
        let mut changed: Vec<Arc<K>> = Vec::new();
        match &event {
            Event::Apply(object) => changed.extend(self.store.get(&ObjectRef::from(object))),
            Event::Delete(object) => changed.push(Arc::new(object.clone())),
            Event::Init => fan_out.relisted.clear(),
            Event::InitApply(object) => fan_out.relisted.push(ObjectRef::from(object)),
            Event::InitDone => {
                let relisted = std::mem::take(&mut fan_out.relisted);
                let present: HashSet<&ObjectRef<K>> = relisted.iter().collect();
                // What the relist no longer has was deleted while the watch was down.
                for gone in before.unwrap_or_default() {
                    if !present.contains(&ObjectRef::from(gone.as_ref())) {
                        changed.push(gone);
                    }
                }
                changed.extend(relisted.iter().filter_map(|r| self.store.get(r)));
                self.ready.send_replace(true);
            }
        }
        if !changed.is_empty() {
            fan_out.subscribers.retain(|tx| changed.iter().all(|object| tx.send(object.clone()).is_ok()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn shared() -> Shared<ConfigMap> {
        let writer = reflector::store::Writer::default();
        Shared {
            store: writer.as_reader(),
            ready: tokio::sync::watch::Sender::new(false),
            fan_out: Mutex::new(FanOut { writer, subscribers: Vec::new(), relisted: Vec::new() }),
        }
    }

    fn subscribe(shared: &Arc<Shared<ConfigMap>>) -> mpsc::UnboundedReceiver<Arc<ConfigMap>> {
        let (tx, rx) = mpsc::unbounded_channel();
        shared.fan_out.lock().subscribers.push(tx);
        rx
    }

    fn names(rx: &mut mpsc::UnboundedReceiver<Arc<ConfigMap>>) -> Vec<String> {
        std::iter::from_fn(|| rx.try_recv().ok()).map(|o| o.metadata.name.clone().unwrap()).collect()
    }

    #[test]
    fn relist_announces_objects_once_stored_and_deletes_missed_meanwhile() {
        let shared = Arc::new(shared());
        let mut rx = subscribe(&shared);
        for event in [Event::Init, Event::InitApply(cm("a", "1")), Event::InitApply(cm("b", "1"))] {
            shared.take("ConfigMap", event);
        }
        assert!(names(&mut rx).is_empty(), "nothing announced before the list completes");
        shared.take("ConfigMap", Event::InitDone);
        assert_eq!(names(&mut rx), ["a", "b"]);
        assert!(shared.store.get(&ObjectRef::new("a").within("default")).is_some());

        shared.take("ConfigMap", Event::Apply(cm("a", "2")));
        shared.take("ConfigMap", Event::Delete(cm("b", "1")));
        assert_eq!(names(&mut rx), ["a", "b"], "updates and deletes both reach consumers");

        // The watch broke; "a" was deleted and "c" created meanwhile.
        for event in [Event::Init, Event::InitApply(cm("c", "3")), Event::InitDone] {
            shared.take("ConfigMap", event);
        }
        let mut seen = names(&mut rx);
        seen.sort();
        assert_eq!(seen, ["a", "c"]);
        assert!(shared.store.get(&ObjectRef::new("a").within("default")).is_none());
    }

    #[tokio::test]
    async fn every_waiter_learns_the_informer_is_ready() {
        let shared = Arc::new(shared());
        let informer = Informer { shared: shared.clone() };
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let informer = informer.clone();
                tokio::spawn(async move { informer.ready().await })
            })
            .collect();
        tokio::task::yield_now().await;
        for event in [Event::Init, Event::InitDone] {
            shared.take("ConfigMap", event);
        }
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("woken").unwrap();
        }
    }

    #[test]
    fn closed_subscribers_are_dropped() {
        let shared = Arc::new(shared());
        drop(subscribe(&shared));
        shared.take("ConfigMap", Event::Apply(cm("a", "1")));
        assert!(shared.fan_out.lock().subscribers.is_empty());
    }
}
