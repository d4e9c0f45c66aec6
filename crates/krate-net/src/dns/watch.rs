//! Feeding the index: watches on Services and EndpointSlices in all namespaces, kept
//! in local stores, and every change rebuilding the entries of the Services it touches.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::index::{Entry, ServiceKey, slice_service};
use super::server::Shared;

/// One event from either watch.
// One lives at a time, on the way from the stream to the stores: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
enum Change {
    Service(Result<Event<Service>, watcher::Error>),
    Slice(Result<Event<EndpointSlice>, watcher::Error>),
}

/// Runs the watches for as long as the server does; failures are retried with
/// kube-runtime's default backoff.
pub(crate) async fn run(client: kube::Client, shared: Arc<Shared>) {
    let services = watcher::watcher(Api::<Service>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .map(Change::Service)
        .boxed();
    let slices = watcher::watcher(Api::<EndpointSlice>::all(client), watcher::Config::default())
        .default_backoff()
        .map(Change::Slice)
        .boxed();
    let mut changes = futures::stream::select(services, slices);
    let mut stores = Stores::default();
    while let Some(change) = changes.next().await {
        let touched = match change {
            Change::Service(Ok(event)) => stores.take_service(event),
            Change::Slice(Ok(event)) => stores.take_slice(event),
            Change::Service(Err(error)) => {
                tracing::warn!(%error, "DNS watch of Services failed; retrying");
                continue;
            }
            Change::Slice(Err(error)) => {
                tracing::warn!(%error, "DNS watch of EndpointSlices failed; retrying");
                continue;
            }
        };
        for key in touched {
            // Built outside the lock: queries wait only for the swap.
            let entry = stores.entry(&key);
            shared.index.write().set(key, entry);
        }
        if stores.services_listed && stores.slices_listed && !*shared.synced.borrow() {
            tracing::info!(services = shared.index.read().len(), "cluster DNS index synced");
            shared.synced.send_replace(true);
        }
    }
}

/// The objects seen so far, keyed for rebuilding one Service at a time.
#[derive(Default)]
struct Stores {
    services: HashMap<ServiceKey, Service>,
    /// By (namespace, slice name).
    slices: HashMap<(String, String), EndpointSlice>,
    /// Each Service's slice names.
    slices_of: HashMap<ServiceKey, BTreeSet<String>>,
    /// A relist in progress (between Init and InitDone).
    services_relist: Option<HashMap<ServiceKey, Service>>,
    slices_relist: Option<Vec<EndpointSlice>>,
    services_listed: bool,
    slices_listed: bool,
}

impl Stores {
    /// Takes one Service event; returns the Services to rebuild.
    fn take_service(&mut self, event: Event<Service>) -> Vec<ServiceKey> {
        match event {
            Event::Apply(service) => {
                let key = service_key(&service);
                self.services.insert(key.clone(), strip_service(service));
                vec![key]
            }
            Event::Delete(service) => {
                let key = service_key(&service);
                self.services.remove(&key);
                vec![key]
            }
            Event::Init => {
                self.services_relist = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(service) => {
                let relist = self.services_relist.get_or_insert_default();
                relist.insert(service_key(&service), strip_service(service));
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.services_relist.take().unwrap_or_default();
                let old = std::mem::replace(&mut self.services, listed);
                self.services_listed = true;
                // Everything either list has: gone, new or possibly changed.
                let keys: HashSet<ServiceKey> = old.into_keys().chain(self.services.keys().cloned()).collect();
                keys.into_iter().collect()
            }
        }
    }

    /// Takes one EndpointSlice event; returns the Services to rebuild.
    fn take_slice(&mut self, event: Event<EndpointSlice>) -> Vec<ServiceKey> {
        match event {
            Event::Apply(slice) => {
                let mut touched: Vec<ServiceKey> = self.remove_slice(&slice_key(&slice)).into_iter().collect();
                touched.extend(self.insert_slice(slice));
                touched
            }
            Event::Delete(slice) => self.remove_slice(&slice_key(&slice)).into_iter().collect(),
            Event::Init => {
                self.slices_relist = Some(Vec::new());
                Vec::new()
            }
            Event::InitApply(slice) => {
                self.slices_relist.get_or_insert_default().push(slice);
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.slices_relist.take().unwrap_or_default();
                let mut touched: HashSet<ServiceKey> = self.slices_of.keys().cloned().collect();
                self.slices.clear();
                self.slices_of.clear();
                for slice in listed {
                    touched.extend(self.insert_slice(slice));
                }
                self.slices_listed = true;
                touched.into_iter().collect()
            }
        }
    }

    fn insert_slice(&mut self, slice: EndpointSlice) -> Option<ServiceKey> {
        let (namespace, name) = slice_key(&slice);
        let owner = slice_service(&slice).map(|service| ServiceKey::new(&namespace, service));
        if let Some(owner) = &owner {
            self.slices_of.entry(owner.clone()).or_default().insert(name.clone());
        }
        self.slices.insert((namespace, name), strip_slice(slice));
        owner
    }

    /// Forgets a slice; returns the Service it belonged to.
    fn remove_slice(&mut self, key: &(String, String)) -> Option<ServiceKey> {
        let old = self.slices.remove(key)?;
        let owner = ServiceKey::new(&key.0, slice_service(&old)?);
        if let Some(names) = self.slices_of.get_mut(&owner) {
            names.remove(&key.1);
            if names.is_empty() {
                self.slices_of.remove(&owner);
            }
        }
        Some(owner)
    }

    /// The entry for `key` as the stores have it now (None: no such Service).
    fn entry(&self, key: &ServiceKey) -> Option<Entry> {
        let service = self.services.get(key)?;
        let names = self.slices_of.get(key);
        let slices =
            names.into_iter().flatten().filter_map(|name| self.slices.get(&(key.namespace.clone(), name.clone())));
        Some(Entry::build(service, slices))
    }
}

fn service_key(service: &Service) -> ServiceKey {
    ServiceKey::new(
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn slice_key(slice: &EndpointSlice) -> (String, String) {
    (slice.metadata.namespace.clone().unwrap_or_default(), slice.metadata.name.clone().unwrap_or_default())
}

/// What DNS never reads (managed fields, annotations such as the last applied
/// configuration) is dropped: the stores hold every Service and slice of the cluster.
fn strip_service(mut service: Service) -> Service {
    service.metadata.managed_fields = None;
    service.metadata.annotations = None;
    service.status = None;
    service
}

fn strip_slice(mut slice: EndpointSlice) -> EndpointSlice {
    slice.metadata.managed_fields = None;
    slice.metadata.annotations = None;
    slice
}

#[cfg(test)]
mod tests {
    use super::super::index::tests::{service, slice};
    use super::*;

    fn web() -> Service {
        service(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": "None"}
        }))
    }

    fn web_slice(name: &str, ip: &str) -> EndpointSlice {
        slice(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip]}]
        }))
    }

    #[test]
    fn slice_changes_touch_their_service() {
        let mut stores = Stores::default();
        let key = ServiceKey::new("ns", "web");
        assert_eq!(stores.take_service(Event::Apply(web())), vec![key.clone()]);
        assert_eq!(stores.take_slice(Event::Apply(web_slice("web-a", "10.0.0.1"))), vec![key.clone()]);
        assert_eq!(stores.take_slice(Event::Apply(web_slice("web-b", "10.0.0.2"))), vec![key.clone()]);
        assert_eq!(stores.entry(&key).unwrap().endpoints.len(), 2);
        // A slice relabelled to another Service touches both.
        let mut moved = web_slice("web-a", "10.0.0.1");
        moved.metadata.labels = Some([("kubernetes.io/service-name".to_string(), "other".to_string())].into());
        let touched: HashSet<ServiceKey> = stores.take_slice(Event::Apply(moved)).into_iter().collect();
        assert_eq!(touched, [key.clone(), ServiceKey::new("ns", "other")].into());
        assert_eq!(stores.entry(&key).unwrap().endpoints.len(), 1);
        stores.take_slice(Event::Delete(web_slice("web-b", "10.0.0.2")));
        assert!(stores.entry(&key).unwrap().endpoints.is_empty());
        stores.take_service(Event::Delete(web()));
        assert!(stores.entry(&key).is_none());
    }

    #[test]
    fn relist_drops_what_is_gone() {
        let mut stores = Stores::default();
        stores.take_service(Event::Apply(web()));
        stores.take_slice(Event::Apply(web_slice("web-a", "10.0.0.1")));
        // A relist with the slice gone and the Service still there.
        assert!(stores.take_slice(Event::Init).is_empty());
        let touched = stores.take_slice(Event::InitDone);
        assert_eq!(touched, vec![ServiceKey::new("ns", "web")]);
        assert!(stores.slices_listed);
        assert!(stores.entry(&ServiceKey::new("ns", "web")).unwrap().endpoints.is_empty());
        stores.take_service(Event::Init);
        let touched = stores.take_service(Event::InitDone);
        assert_eq!(touched, vec![ServiceKey::new("ns", "web")]);
        assert!(stores.entry(&ServiceKey::new("ns", "web")).is_none());
    }
}
