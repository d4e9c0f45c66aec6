//! Watches of the config maps and secrets pods' volumes read, as upstream's
//! watch-based change detection: one watch per object (a field selector on its name,
//! which the Node authorizer allows for objects of the node's pods), shared by the pods
//! reading it; a change marks those pods' volumes for resync and wakes their workers.
//! The periodic resync stays as the fallback.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// One watched object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    ConfigMap { namespace: String, name: String },
    Secret { namespace: String, name: String },
}

/// How a pod's worker hears that a source changed.
#[derive(Default)]
pub struct PodWake {
    pub changed: AtomicBool,
    pub notify: Notify,
}

impl PodWake {
    /// Whether a source changed since the last call.
    pub fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::AcqRel)
    }
}

struct Watch {
    task: tokio::task::JoinHandle<()>,
    pods: HashMap<String, Arc<PodWake>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Watches = Arc<Mutex<HashMap<Source, Watch>>>;

impl Drop for SourceWatches {
    fn drop(&mut self) {
        self.watches.lock().clear();
    }
}

pub struct SourceWatches {
    client: kube::Client,
    watches: Watches,
}

fn wake_all(watches: &Weak<Mutex<HashMap<Source, Watch>>>, source: &Source) {
    let Some(watches) = watches.upgrade() else { return };
    if let Some(w) = watches.lock().get(source) {
        for pod in w.pods.values() {
            pod.changed.store(true, Ordering::Release);
            pod.notify.notify_one();
        }
    }
}

async fn run<K>(api: Api<K>, name: String, watches: Weak<Mutex<HashMap<Source, Watch>>>, source: Source)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut listed = false;
    while let Some(event) = events.next().await {
        match event {
            // A (re)list may already hold a change made between the pod's read of the
            // object and this watch's start, or during a gap in the watch: resync then too.
            Ok(watcher::Event::InitDone) => {
                listed = true;
                wake_all(&watches, &source);
            }
            Ok(watcher::Event::Init) | Ok(watcher::Event::InitApply(_)) => {}
            Ok(watcher::Event::Apply(_)) | Ok(watcher::Event::Delete(_)) if listed => {
                tracing::debug!(?source, "volume source changed");
                wake_all(&watches, &source);
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(?source, %error, "volume source watch failed; retrying"),
        }
    }
}

impl SourceWatches {
    pub fn new(client: kube::Client) -> SourceWatches {
        SourceWatches { client, watches: Arc::default() }
    }

    /// Makes `sources` the objects pod `uid` is woken for (none: forget the pod).
    /// Watches start for objects no pod watched and stop for those no pod reads now.
    pub fn set(&self, uid: &str, sources: BTreeSet<Source>, wake: &Arc<PodWake>) {
        let mut watches = self.watches.lock();
        watches.retain(|source, w| {
            if !sources.contains(source) {
                w.pods.remove(uid);
            }
            !w.pods.is_empty()
        });
        for source in sources {
            if let Some(w) = watches.get_mut(&source) {
                w.pods.insert(uid.to_string(), wake.clone());
                continue;
            }
            let shared = Arc::downgrade(&self.watches);
            let task = match &source {
                Source::ConfigMap { namespace, name } => tokio::spawn(run::<ConfigMap>(
                    Api::namespaced(self.client.clone(), namespace),
                    name.clone(),
                    shared,
                    source.clone(),
                )),
                Source::Secret { namespace, name } => tokio::spawn(run::<Secret>(
                    Api::namespaced(self.client.clone(), namespace),
                    name.clone(),
                    shared,
                    source.clone(),
                )),
            };
            watches.insert(source, Watch { task, pods: HashMap::from([(uid.to_string(), wake.clone())]) });
        }
    }
}
