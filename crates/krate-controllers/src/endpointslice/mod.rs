//! The EndpointSlice controller (upstream's endpointslice-controller): for every Service
//! with a selector, EndpointSlices of each of its IP families holding the selected pods
//! as endpoints (ready/serving/terminating, nodeName, zone, hostname, ports resolved
//! per pod), at most 100 per slice, owned by the Service.

pub mod packing;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice, ForNode, ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::expectations::Expectations;
use crate::service_pods as sp;
use crate::{Context, Error};
use packing::{Desired, MAX_ENDPOINTS_PER_SLICE};

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const NAME: &str = "endpointslice";

struct State {
    slices_api: kube::Client,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
    nodes: Store<Node>,
    expectations: Expectations,
    recorder: Recorder,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("endpointslice-controller");
    let informers = &ctx.informers;
    let (services, pods, slices, nodes) =
        (informers.get::<Service>(), informers.get::<Pod>(), informers.get::<EndpointSlice>(), informers.get::<Node>());
    futures::join!(services.ready(), pods.ready(), slices.ready(), nodes.ready());
    let state = Arc::new(State {
        slices_api: clients.write.clone(),
        pods: pods.store(),
        slices: slices.store(),
        nodes: nodes.store(),
        expectations: Expectations::default(),
        recorder: Recorder::new(
            clients.write,
            Reporter { controller: "endpointslice-controller".into(), instance: None },
        ),
    });
    let (svc_store, slice_store) = (services.store(), slices.store());
    let cleanup = crate::on_deleted(services.clone(), |svc| {
        let state = state.clone();
        async move { delete_slices_of(&svc, &state).await }
    });
    // A slice written for a Service deleted meanwhile (a sync racing the delete) goes too.
    let (svc_store2, orphans_state) = (services.store(), state.clone());
    let orphans = slices.subscribe().for_each(move |slice| {
        let (services, state) = (svc_store2.clone(), orphans_state.clone());
        async move {
            let Some(owner) = owner_service(&slice).filter(|_| is_managed(&slice)) else { return };
            let owner_uid = slice.owner_references().first().map(|o| o.uid.clone());
            let alive = services.get(&owner).is_some_and(|s| s.metadata.uid == owner_uid);
            let exists = state.slices.get(&ObjectRef::from_obj(slice.as_ref())).is_some();
            if !alive && exists {
                let api: Api<EndpointSlice> =
                    Api::namespaced(state.slices_api.clone(), &slice.namespace().unwrap_or_default());
                let _ = api.delete(&slice.name_any(), &DeleteParams::default()).await;
            }
        }
    });
    let controller = Controller::for_shared_stream(services.subscribe(), services.store())
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| {
            services_for_pod(&pod, &svc_store, &slice_store, is_managed)
        })
        .watches_shared_stream(slices.subscribe(), |slice: Arc<EndpointSlice>| {
            is_managed(&slice).then(|| owner_service(&slice)).flatten()
        })
        .run(reconcile, error_policy, state.clone())
        .for_each(|_| futures::future::ready(()));
    futures::join!(controller, cleanup, orphans);
}

/// A deleted Service's slices go with it (the garbage collector would remove them as
/// their owner's dependents too; doing it here does not wait for it).
async fn delete_slices_of(service: &Service, state: &State) {
    let namespace = service.namespace().unwrap_or_default();
    let key = format!("{namespace}/{}", service.name_any());
    state.expectations.forget(&key);
    let api: Api<EndpointSlice> = Api::namespaced(state.slices_api.clone(), &namespace);
    for slice in state.slices.state() {
        let owned = slice.namespace().as_deref() == Some(namespace.as_str())
            && is_managed(&slice)
            && slice.labels().get(SERVICE_NAME_LABEL) == Some(&service.name_any());
        if owned && let Err(error) = api.delete(&slice.name_any(), &DeleteParams::default()).await {
            tracing::debug!(controller = NAME, slice = %slice.name_any(), %error, "deleting a deleted Service's slice");
        }
    }
}

fn is_managed(slice: &EndpointSlice) -> bool {
    slice.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
}

fn owner_service(slice: &EndpointSlice) -> Option<ObjectRef<Service>> {
    let name = slice.labels().get(SERVICE_NAME_LABEL)?;
    Some(ObjectRef::new(name).within(&slice.namespace()?))
}

/// The Services a pod change may concern: those selecting it now, and those whose
/// slices still list it (it may have stopped matching).
pub fn services_for_pod(
    pod: &Pod,
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    managed: impl Fn(&EndpointSlice) -> bool,
) -> Vec<ObjectRef<Service>> {
    let mut out: Vec<ObjectRef<Service>> =
        sp::services_selecting(pod, services).iter().map(|s| ObjectRef::from_obj(s.as_ref())).collect();
    let (namespace, name) = (pod.namespace(), pod.name_any());
    for slice in slices.state() {
        if slice.namespace() != namespace || !managed(&slice) {
            continue;
        }
        let lists = slice
            .endpoints
            .iter()
            .flatten()
            .any(|e| e.target_ref.as_ref().is_some_and(|r| r.name.as_deref() == Some(name.as_str())));
        if lists
            && let Some(svc) = owner_service(&slice)
            && !out.contains(&svc)
        {
            out.push(svc);
        }
    }
    out
}

fn error_policy(service: Arc<Service>, error: &Error, _: Arc<State>) -> Action {
    tracing::warn!(controller = NAME, service = %service.name_any(), %error, "sync failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

/// The address types the Service's slices have: its ipFamilies, else its clusterIP's.
pub fn address_types(service: &Service) -> Vec<String> {
    let spec = service.spec.as_ref();
    let families: Vec<String> = spec.and_then(|s| s.ip_families.clone()).unwrap_or_default();
    if !families.is_empty() {
        return families;
    }
    match spec.and_then(|s| s.cluster_ip.as_deref()) {
        Some(ip) if ip.contains(':') => vec!["IPv6".into()],
        _ => vec!["IPv4".into()],
    }
}

/// The labels every slice of the Service carries: the Service's own (but
/// `service.kubernetes.io/headless` is ours to set), the service name and manager.
pub fn slice_labels(service: &Service, managed_by: &str) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = service.labels().clone();
    labels.remove(HEADLESS_LABEL);
    if sp::is_headless(service) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels.insert(SERVICE_NAME_LABEL.into(), service.name_any());
    labels.insert(MANAGED_BY_LABEL.into(), managed_by.into());
    labels
}

fn endpoint_for(pod: &Pod, service: &Service, address: String, nodes: &Store<Node>) -> Endpoint {
    let serving = sp::is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let zone = node_name
        .as_ref()
        .and_then(|n| nodes.get(&ObjectRef::new(n)))
        .and_then(|node| node.labels().get(ZONE_LABEL).cloned());
    let ready = sp::publish_not_ready(service) || (serving && !terminating);
    Endpoint {
        addresses: vec![address],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hints: ready.then(|| hints(service, zone.as_deref(), node_name.as_deref())).flatten(),
        hostname: sp::hostname(pod, service),
        node_name,
        zone,
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.namespace(),
            name: Some(pod.name_any()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A ready endpoint's routing hints under the Service's trafficDistribution (upstream's
/// trafficdist heuristics): PreferClose and PreferSameZone hint the endpoint's zone,
/// PreferSameNode its node too; otherwise none.
fn hints(service: &Service, zone: Option<&str>, node: Option<&str>) -> Option<EndpointHints> {
    let distribution = service.spec.as_ref().and_then(|s| s.traffic_distribution.as_deref());
    let for_nodes = match distribution {
        Some("PreferClose" | "PreferSameZone") => None,
        Some("PreferSameNode") => node.map(|n| vec![ForNode { name: n.to_string() }]),
        _ => return None,
    };
    let for_zones = zone.map(|z| vec![ForZone { name: z.to_string() }]);
    (for_zones.is_some() || for_nodes.is_some()).then_some(EndpointHints { for_zones, for_nodes })
}

/// The pod's ports for the Service's ports, each resolved for this pod; ports it cannot
/// resolve are left out.
fn endpoint_ports(pod: &Pod, service: &Service) -> Vec<EndpointPort> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    ports
        .iter()
        .filter_map(|p| {
            Some(EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(sp::resolve_port(pod, p)?),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
        })
        .collect()
}

/// The desired endpoints of one address type.
fn desired(service: &Service, address_type: &str, pods: &[Arc<Pod>], nodes: &Store<Node>) -> Desired {
    let mut desired = Desired::default();
    for pod in pods {
        // Terminating pods stay as endpoints (serving/terminating tell their state).
        if !sp::should_be_endpoint(pod, true) {
            continue;
        }
        let Some(address) = sp::pod_ip_of_family(pod, address_type) else { continue };
        desired.add(endpoint_ports(pod, service), endpoint_for(pod, service, address, nodes));
    }
    desired
}

pub(crate) fn revision(slice: &EndpointSlice) -> i64 {
    slice.resource_version().and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

async fn reconcile(service: Arc<Service>, state: Arc<State>) -> Result<Action, Error> {
    let result = sync(&service, &state).await;
    crate::metrics::record(NAME, result.is_ok());
    if let Err(error) = &result {
        let note = format!(
            "Error updating Endpoint Slices for Service {}/{}: {error}",
            service.namespace().unwrap_or_default(),
            service.name_any()
        );
        let event = Event {
            type_: EventType::Warning,
            reason: "FailedToUpdateEndpointSlices".into(),
            note: Some(note),
            action: "UpdateEndpointSlices".into(),
            secondary: None,
        };
        let _ = state.recorder.publish(&event, &service.object_ref(&())).await;
    }
    result
}

async fn sync(service: &Service, state: &State) -> Result<Action, Error> {
    let namespace = service.namespace().unwrap_or_default();
    let key = format!("{namespace}/{}", service.name_any());
    let mine: Vec<Arc<EndpointSlice>> = state
        .slices
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(namespace.as_str())
                && is_managed(s)
                && s.labels().get(SERVICE_NAME_LABEL) == Some(&service.name_any())
        })
        .collect();
    let seen: HashMap<String, i64> = mine.iter().map(|s| (s.name_any(), revision(s))).collect();
    if !state.expectations.satisfied(&key, &seen) {
        // Our last writes are not in the informer yet: acting now could duplicate slices.
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if sp::selector(service).is_none() || service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let pods = sp::pods_of(service, &state.pods);
    let labels = slice_labels(service, MANAGED_BY);
    let types = address_types(service);
    let api: Api<EndpointSlice> = Api::namespaced(state.slices_api.clone(), &namespace);
    let any_endpoints = types.iter().any(|t| !desired(service, t, &pods, &state.nodes).is_empty());
    let mut plans = Vec::new();
    // Slices of address types the Service no longer has go away.
    for slice in mine.iter().filter(|s| !types.contains(&s.address_type)) {
        plans.push(packing::Plan { delete: vec![slice.as_ref().clone()], ..Default::default() });
    }
    for (i, address_type) in types.iter().enumerate() {
        let existing: Vec<EndpointSlice> =
            mine.iter().filter(|s| &s.address_type == address_type).map(|s| s.as_ref().clone()).collect();
        let want = desired(service, address_type, &pods, &state.nodes);
        // One placeholder for a Service without endpoints, of its primary family.
        let placeholder = i == 0 && !any_endpoints;
        plans.push(packing::plan(address_type, &want, &existing, &labels, placeholder, MAX_ENDPOINTS_PER_SLICE));
    }
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: service.name_any(),
        uid: service.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    for plan in plans {
        write_plan(&api, plan, &slice_prefix(&service.name_any()), &labels, &owner, &state.expectations, &key).await?;
    }
    Ok(Action::await_change())
}

/// Carries out a packing plan for one owner (a Service, or mirrored Endpoints): new slices
/// named after `prefix` with the owner's labels and reference, then updates, then
/// deletions, each noted in `expectations` under `key` so the next sync waits for them.
pub(crate) async fn write_plan(
    api: &Api<EndpointSlice>,
    plan: packing::Plan,
    prefix: &str,
    labels: &BTreeMap<String, String>,
    owner: &OwnerReference,
    expectations: &Expectations,
    key: &str,
) -> Result<(), Error> {
    for mut slice in plan.create {
        slice.metadata = ObjectMeta {
            generate_name: Some(prefix.to_string()),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        };
        let made = api.create(&PostParams::default(), &slice).await?;
        expectations.wrote(key, &made.name_any(), Some(revision(&made)));
    }
    for slice in plan.update {
        let written = api.replace(&slice.name_any(), &PostParams::default(), &slice).await?;
        expectations.wrote(key, &written.name_any(), Some(revision(&written)));
    }
    for slice in plan.delete {
        let name = slice.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => expectations.deleted(key, &name),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// generateName for a Service's slices: its name and a dash, cut to leave room for the
/// random suffix within the 63 characters of a name (upstream's getEndpointSlicePrefix).
pub fn slice_prefix(service: &str) -> String {
    let mut prefix = format!("{service}-");
    if prefix.len() > 58 {
        prefix.truncate(58);
    }
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_types_follow_ip_families() {
        let svc: Service = serde_json::from_value(serde_json::json!({"metadata": {"name": "s"},
            "spec": {"ipFamilies": ["IPv6", "IPv4"], "clusterIP": "fd00::1"}}))
        .unwrap();
        assert_eq!(address_types(&svc), vec!["IPv6", "IPv4"]);
        let legacy: Service =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "fd00::1"}}))
                .unwrap();
        assert_eq!(address_types(&legacy), vec!["IPv6"]);
    }

    #[test]
    fn headless_services_label_their_slices() {
        let svc: Service =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "db", "labels": {"app": "db"}},
            "spec": {"clusterIP": "None"}}))
            .unwrap();
        let labels = slice_labels(&svc, MANAGED_BY);
        assert_eq!(labels[HEADLESS_LABEL], "");
        assert_eq!(labels[SERVICE_NAME_LABEL], "db");
        assert_eq!(labels["app"], "db");
    }
}
