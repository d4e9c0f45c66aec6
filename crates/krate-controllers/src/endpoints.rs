//! The Endpoints controller (upstream's endpoint-controller): the core/v1 Endpoints of
//! every Service with a selector — ready pods in addresses, the others in
//! notReadyAddresses, subsets grouped by the pods' resolved ports, at most 1000
//! addresses (the rest cut, marked by the over-capacity annotation).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::endpointslice::HEADLESS_LABEL;
use crate::service_pods as sp;
use crate::{Context, Error};

pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
pub const OVER_CAPACITY_ANNOTATION: &str = "endpoints.kubernetes.io/over-capacity";
/// Endpoints this controller manages are not mirrored into EndpointSlices.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Upstream's maxCapacity of addresses in one Endpoints object.
pub const MAX_CAPACITY: usize = 1000;
const NAME: &str = "endpoints";

struct State {
    write: kube::Client,
    pods: Store<Pod>,
    endpoints: Store<Endpoints>,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("endpoint-controller");
    let (services, pods, endpoints) =
        (ctx.informers.get::<Service>(), ctx.informers.get::<Pod>(), ctx.informers.get::<Endpoints>());
    futures::join!(services.ready(), pods.ready(), endpoints.ready());
    let state = Arc::new(State { write: clients.write, pods: pods.store(), endpoints: endpoints.store() });
    let (svc_store, ep_store) = (services.store(), endpoints.store());
    let cleanup = crate::on_deleted(services.clone(), |svc| {
        let api: Api<Endpoints> = Api::namespaced(state.write.clone(), &svc.namespace().unwrap_or_default());
        async move {
            // Only Endpoints of Services with a selector are ours to remove.
            if sp::selector(&svc).is_some()
                && let Err(error) = api.delete(&svc.name_any(), &DeleteParams::default()).await
            {
                tracing::debug!(controller = NAME, service = %svc.name_any(), %error, "deleting a deleted Service's Endpoints");
            }
        }
    });
    // Endpoints written for a Service deleted meanwhile (a sync racing the delete) go too.
    let (svc_store2, orphans_state) = (services.store(), state.clone());
    let orphans = endpoints.subscribe().for_each(move |ep| {
        let (services, state) = (svc_store2.clone(), orphans_state.clone());
        async move {
            let ours = ep.labels().get(SKIP_MIRROR_LABEL).map(String::as_str) == Some("true");
            let service = ObjectRef::<Service>::new(&ep.name_any()).within(&ep.namespace().unwrap_or_default());
            let exists = state.endpoints.get(&ObjectRef::from_obj(ep.as_ref())).is_some();
            if ours && exists && services.get(&service).is_none() {
                let api: Api<Endpoints> = Api::namespaced(state.write.clone(), &ep.namespace().unwrap_or_default());
                let _ = api.delete(&ep.name_any(), &DeleteParams::default()).await;
            }
        }
    });
    let controller = Controller::for_shared_stream(services.subscribe(), services.store())
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| {
            let mut out: Vec<ObjectRef<Service>> =
                sp::services_selecting(&pod, &svc_store).iter().map(|s| ObjectRef::from_obj(s.as_ref())).collect();
            // Endpoints still listing the pod (it may have stopped matching).
            for ep in ep_store.state() {
                if ep.namespace() == pod.namespace() && lists_pod(&ep, &pod.name_any()) {
                    out.push(ObjectRef::new(&ep.name_any()).within(&ep.namespace().unwrap_or_default()));
                }
            }
            out
        })
        .watches_shared_stream(endpoints.subscribe(), |ep: Arc<Endpoints>| {
            Some(ObjectRef::<Service>::new(&ep.name_any()).within(&ep.namespace().unwrap_or_default()))
        })
        .run(
            |svc, state: Arc<State>| async move {
                let result = sync(&svc, &state).await;
                crate::metrics::record(NAME, result.is_ok());
                result
            },
            |svc, error, _| {
                tracing::warn!(controller = NAME, service = %svc.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state.clone(),
        )
        .for_each(|_| futures::future::ready(()));
    futures::join!(controller, cleanup, orphans);
}

fn lists_pod(ep: &Endpoints, pod: &str) -> bool {
    ep.subsets.iter().flatten().any(|s| {
        s.addresses
            .iter()
            .flatten()
            .chain(s.not_ready_addresses.iter().flatten())
            .any(|a| a.target_ref.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
    })
}

/// A resolved port: name, number, protocol.
type PortSpec = (String, i32, String);

/// The subsets for the Service's pods, and whether they were cut to MAX_CAPACITY.
pub fn subsets(service: &Service, pods: &[Arc<Pod>]) -> (Vec<EndpointSubset>, bool) {
    let tolerate_unready = sp::publish_not_ready(service);
    let family = crate::endpointslice::address_types(service).into_iter().next().unwrap_or_else(|| "IPv4".into());
    let service_ports = service.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    // Addresses grouped by the set of ports they serve (upstream's RepackSubsets).
    let mut groups: BTreeMap<Vec<PortSpec>, (Vec<EndpointAddress>, Vec<EndpointAddress>)> = BTreeMap::new();
    for pod in pods {
        if !sp::should_be_endpoint(pod, tolerate_unready) {
            continue;
        }
        let Some(ip) = sp::pod_ip_of_family(pod, &family) else { continue };
        let address = EndpointAddress {
            ip,
            hostname: sp::hostname(pod, service),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.namespace(),
                name: Some(pod.name_any()),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
        };
        let ports: BTreeSet<PortSpec> = service_ports
            .iter()
            .filter_map(|p| {
                let port = sp::resolve_port(pod, p)?;
                Some((p.name.clone().unwrap_or_default(), port, p.protocol.clone().unwrap_or_else(|| "TCP".into())))
            })
            .collect();
        if !service_ports.is_empty() && ports.is_empty() {
            continue;
        }
        let group = groups.entry(ports.into_iter().collect()).or_default();
        if tolerate_unready || sp::is_ready(pod) {
            group.0.push(address);
        } else {
            group.1.push(address);
        }
    }
    let app_protocols: BTreeMap<String, Option<String>> =
        service_ports.iter().map(|p| (p.name.clone().unwrap_or_default(), p.app_protocol.clone())).collect();
    let total: usize = groups.values().map(|(r, n)| r.len() + n.len()).sum();
    let truncated = total > MAX_CAPACITY;
    let mut budget = MAX_CAPACITY;
    let mut out: Vec<EndpointSubset> = Vec::new();
    let mut take = |list: &mut Vec<EndpointAddress>| {
        list.sort_by(|a, b| a.ip.cmp(&b.ip));
        list.truncate(budget);
        budget -= list.len();
    };
    // Ready addresses are kept before not-ready ones when cutting.
    let mut groups: Vec<_> = groups.into_iter().collect();
    for (_, (ready, _)) in groups.iter_mut() {
        take(ready);
    }
    for (_, (_, not_ready)) in groups.iter_mut() {
        take(not_ready);
    }
    for (ports, (ready, not_ready)) in groups {
        if ready.is_empty() && not_ready.is_empty() {
            continue;
        }
        let ports: Vec<EndpointPort> = ports
            .into_iter()
            .map(|(name, port, protocol)| EndpointPort {
                app_protocol: app_protocols.get(&name).cloned().flatten(),
                name: (!name.is_empty()).then_some(name),
                port,
                protocol: Some(protocol),
            })
            .collect();
        out.push(EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then_some(ports),
        });
    }
    (out, truncated)
}

/// Labels of the Endpoints: the Service's, the headless marker, and skip-mirror.
fn labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.labels().clone();
    labels.remove(HEADLESS_LABEL);
    if sp::is_headless(service) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels.insert(SKIP_MIRROR_LABEL.into(), "true".into());
    labels
}

/// The last change that made the Endpoints what they are: the Service's creation or a
/// pod's readiness change, whichever is latest.
fn trigger_time(service: &Service, pods: &[Arc<Pod>]) -> Option<Timestamp> {
    let created = service.metadata.creation_timestamp.as_ref().map(|t| t.0);
    pods.iter().filter_map(|p| sp::ready_transition(p)).chain(created).max()
}

async fn sync(service: &Service, state: &State) -> Result<Action, Error> {
    if sp::selector(service).is_none() || service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = service.namespace().unwrap_or_default();
    let pods = sp::pods_of(service, &state.pods);
    let (subsets, truncated) = subsets(service, &pods);
    let labels = labels(service);
    let existing = state.endpoints.get(&ObjectRef::new(&service.name_any()).within(&namespace));
    let over = |e: &Endpoints| e.annotations().get(OVER_CAPACITY_ANNOTATION).is_some();
    if let Some(current) = &existing
        && current.subsets.clone().unwrap_or_default() == subsets
        && current.labels() == &labels
        && over(current) == truncated
    {
        return Ok(Action::await_change());
    }
    let mut annotations = existing.as_ref().map(|e| e.annotations().clone()).unwrap_or_default();
    annotations.remove(OVER_CAPACITY_ANNOTATION);
    if truncated {
        annotations.insert(OVER_CAPACITY_ANNOTATION.into(), "truncated".into());
    }
    if let Some(at) = trigger_time(service, &pods) {
        annotations.insert(TRIGGER_TIME_ANNOTATION.into(), at.strftime("%Y-%m-%dT%H:%M:%S%.fZ").to_string());
    }
    let endpoints = Endpoints {
        metadata: ObjectMeta {
            name: Some(service.name_any()),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            resource_version: existing.as_ref().and_then(|e| e.resource_version()),
            ..Default::default()
        },
        subsets: (!subsets.is_empty()).then_some(subsets),
    };
    let api: Api<Endpoints> = Api::namespaced(state.write.clone(), &namespace);
    match existing {
        Some(_) => api.replace(&service.name_any(), &PostParams::default(), &endpoints).await.map(|_| ())?,
        None => match api.create(&PostParams::default(), &endpoints).await {
            Ok(_) => {}
            // Made meanwhile (our store is behind): the next event syncs it.
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::requeue(Duration::from_millis(200))),
            Err(e) => return Err(e.into()),
        },
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, ip: &str, ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"},
                "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip,
                    "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}}))
            .unwrap(),
        )
    }

    fn service(publish: bool) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": {"app": "web"}, "publishNotReadyAddresses": publish,
                "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}))
        .unwrap()
    }

    #[test]
    fn ready_and_not_ready_pods_split() {
        let pods = vec![pod("a", "10.0.0.2", true), pod("b", "10.0.0.1", false)];
        let (got, truncated) = subsets(&service(false), &pods);
        assert!(!truncated);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].addresses.as_ref().unwrap()[0].ip, "10.0.0.2");
        assert_eq!(got[0].not_ready_addresses.as_ref().unwrap()[0].ip, "10.0.0.1");
        assert_eq!(got[0].ports.as_ref().unwrap()[0].port, 8080);
        let (published, _) = subsets(&service(true), &pods);
        assert_eq!(published[0].addresses.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn more_than_1000_addresses_are_cut_keeping_ready_ones() {
        let pods: Vec<_> =
            (0..1100).map(|i| pod(&format!("p{i}"), &format!("10.1.{}.{}", i / 256, i % 256), i % 2 == 0)).collect();
        let (got, truncated) = subsets(&service(false), &pods);
        assert!(truncated);
        let ready = got[0].addresses.as_ref().unwrap().len();
        let not_ready = got[0].not_ready_addresses.as_ref().unwrap().len();
        assert_eq!((ready, ready + not_ready), (550, 1000));
    }
}
