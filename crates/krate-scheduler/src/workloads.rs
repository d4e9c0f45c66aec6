//! The workloads a pod belongs to, for PodTopologySpread's default constraints
//! (upstream's helper.DefaultSelector): the label selectors of the Services selecting the
//! pod, merged, plus those of its controlling ReplicationController, ReplicaSet or
//! StatefulSet.

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController, Service};
use krate_client::Informers;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::selectors::{Labels, Selector};

pub struct Workloads {
    services: Store<Service>,
    replication_controllers: Store<ReplicationController>,
    replica_sets: Store<ReplicaSet>,
    stateful_sets: Store<StatefulSet>,
}

impl Workloads {
    pub fn new(informers: &Informers) -> Workloads {
        Workloads {
            services: informers.get::<Service>().store(),
            replication_controllers: informers.get::<ReplicationController>().store(),
            replica_sets: informers.get::<ReplicaSet>().store(),
            stateful_sets: informers.get::<StatefulSet>().store(),
        }
    }

    /// The default spreading selector of `pod` (everything when nothing selects it).
    pub fn default_spread_selector(&self, pod: &Pod) -> Selector {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let labels = pod.metadata.labels.as_ref();
        let mut set = Labels::new();
        for service in self.services.state() {
            let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
            if service.metadata.namespace.as_deref() == Some(namespace)
                && let Some(selector) = selector
                && Selector::from_map(selector).matches(labels)
            {
                set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut selector = Selector::from_map(&set);
        let owner = pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
        let Some(owner) = owner else { return selector };
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("v1", "ReplicationController") => {
                if let Some(rc) = self.replication_controllers.get(&ObjectRef::new(&owner.name).within(namespace))
                    && let Some(map) = rc.spec.as_ref().and_then(|s| s.selector.as_ref())
                {
                    set.extend(map.iter().map(|(k, v)| (k.clone(), v.clone())));
                    selector = Selector::from_map(&set);
                }
            }
            ("apps/v1", "ReplicaSet") => {
                if let Some(rs) = self.replica_sets.get(&ObjectRef::new(&owner.name).within(namespace)) {
                    let own = rs.spec.as_ref().map(|s| &s.selector);
                    selector.add_requirements_of(&Selector::from_label_selector(own));
                }
            }
            ("apps/v1", "StatefulSet") => {
                if let Some(ss) = self.stateful_sets.get(&ObjectRef::new(&owner.name).within(namespace)) {
                    let own = ss.spec.as_ref().map(|s| &s.selector);
                    selector.add_requirements_of(&Selector::from_label_selector(own));
                }
            }
            _ => {}
        }
        selector
    }
}
