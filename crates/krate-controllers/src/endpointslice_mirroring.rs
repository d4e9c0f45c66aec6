//! EndpointSlice mirroring (upstream's endpointslice-mirroring-controller): the
//! hand-made Endpoints of a Service without a selector are mirrored into EndpointSlices
//! (managed by endpointslicemirroring-controller.k8s.io, owned by the Endpoints), so
//! consumers of slices see them too. Endpoints the Endpoints controller manages carry
//! the skip-mirror label and are left alone.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::endpoints::SKIP_MIRROR_LABEL;
use crate::endpointslice::packing::{self, Desired, MAX_ENDPOINTS_PER_SLICE};
use crate::endpointslice::{MANAGED_BY_LABEL, SERVICE_NAME_LABEL, revision, slice_prefix, write_plan};
use crate::expectations::Expectations;
use crate::{Context, Error};

pub const MANAGED_BY: &str = "endpointslicemirroring-controller.k8s.io";
/// Endpoints used for leader election are never mirrored.
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";
/// Upstream mirrors at most this many addresses of each subset.
pub const MAX_PER_SUBSET: usize = 1000;
const NAME: &str = "endpointslice-mirroring";

struct State {
    write: kube::Client,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    expectations: Expectations,
}

fn is_mirrored(slice: &EndpointSlice) -> bool {
    slice.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
}

fn endpoints_ref(namespace: Option<String>, name: &str) -> ObjectRef<Endpoints> {
    ObjectRef::new(name).within(&namespace.unwrap_or_default())
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("endpointslicemirroring-controller");
    let (endpoints, services, slices) =
        (ctx.informers.get::<Endpoints>(), ctx.informers.get::<Service>(), ctx.informers.get::<EndpointSlice>());
    futures::join!(endpoints.ready(), services.ready(), slices.ready());
    let state = Arc::new(State {
        write: clients.write,
        services: services.store(),
        slices: slices.store(),
        expectations: Expectations::default(),
    });
    let ep_store = endpoints.store();
    // Slices of Endpoints deleted meanwhile (or never ours to keep) go.
    let orphans_state = state.clone();
    let orphans = slices.subscribe().for_each(move |slice| {
        let (state, ep_store) = (orphans_state.clone(), ep_store.clone());
        async move {
            if !is_mirrored(&slice) || state.slices.get(&ObjectRef::from_obj(slice.as_ref())).is_none() {
                return;
            }
            let Some(name) = slice.labels().get(SERVICE_NAME_LABEL) else { return };
            let owner = slice.owner_references().first().map(|o| o.uid.clone());
            let alive = ep_store.get(&endpoints_ref(slice.namespace(), name)).is_some_and(|e| e.metadata.uid == owner);
            if !alive {
                let api: Api<EndpointSlice> =
                    Api::namespaced(state.write.clone(), &slice.namespace().unwrap_or_default());
                let _ = api.delete(&slice.name_any(), &DeleteParams::default()).await;
            }
        }
    });
    let gone_state = state.clone();
    let cleanup = crate::on_deleted(endpoints.clone(), move |ep| {
        let state = gone_state.clone();
        async move {
            let namespace = ep.namespace().unwrap_or_default();
            state.expectations.forget(&format!("{namespace}/{}", ep.name_any()));
            let api: Api<EndpointSlice> = Api::namespaced(state.write.clone(), &namespace);
            for slice in state.slices.state() {
                let of_it = slice.namespace().as_deref() == Some(namespace.as_str())
                    && is_mirrored(&slice)
                    && slice.labels().get(SERVICE_NAME_LABEL) == Some(&ep.name_any());
                if of_it {
                    let _ = api.delete(&slice.name_any(), &DeleteParams::default()).await;
                }
            }
        }
    });
    let controller = Controller::for_shared_stream(endpoints.subscribe(), endpoints.store())
        .watches_shared_stream(services.subscribe(), |svc: Arc<Service>| {
            Some(endpoints_ref(svc.namespace(), &svc.name_any()))
        })
        .watches_shared_stream(slices.subscribe(), |slice: Arc<EndpointSlice>| {
            let name = slice.labels().get(SERVICE_NAME_LABEL).cloned();
            is_mirrored(&slice).then(|| name.map(|n| endpoints_ref(slice.namespace(), &n))).flatten()
        })
        .run(
            |ep, state: Arc<State>| async move {
                let result = sync(&ep, &state).await;
                crate::metrics::record(NAME, result.is_ok());
                result
            },
            |ep, error, _| {
                tracing::warn!(controller = NAME, endpoints = %ep.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state,
        )
        .for_each(|_| futures::future::ready(()));
    futures::join!(controller, orphans, cleanup);
}

/// Whether these Endpoints are to be mirrored: their Service exists without a
/// selector, and they are neither the Endpoints controller's nor a leader lock.
fn should_mirror(ep: &Endpoints, services: &Store<Service>) -> bool {
    if ep.labels().get(SKIP_MIRROR_LABEL).map(String::as_str) == Some("true")
        || ep.annotations().contains_key(LEADER_ANNOTATION)
        || ep.metadata.deletion_timestamp.is_some()
    {
        return false;
    }
    let service = services.get(&ObjectRef::new(&ep.name_any()).within(&ep.namespace().unwrap_or_default()));
    service.is_some_and(|s| s.spec.as_ref().and_then(|spec| spec.selector.as_ref()).is_none_or(|sel| sel.is_empty()))
}

fn address_type(ip: &str) -> &'static str {
    if ip.contains(':') { "IPv6" } else { "IPv4" }
}

/// The mirrored endpoints by address type.
pub fn desired(ep: &Endpoints) -> BTreeMap<&'static str, Desired> {
    let mut out: BTreeMap<&'static str, Desired> = BTreeMap::new();
    for subset in ep.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset.not_ready_addresses.iter().flatten().map(|a| (a, false));
        for (address, ready) in ready.chain(not_ready).take(MAX_PER_SUBSET) {
            out.entry(address_type(&address.ip)).or_default().add(ports.clone(), endpoint(address, ready));
        }
    }
    out
}

fn endpoint(address: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![address.ip.clone()],
        conditions: Some(EndpointConditions { ready: Some(ready), serving: None, terminating: None }),
        hostname: address.hostname.clone(),
        node_name: address.node_name.clone(),
        target_ref: address.target_ref.clone(),
        ..Default::default()
    }
}

async fn sync(ep: &Endpoints, state: &State) -> Result<Action, Error> {
    let namespace = ep.namespace().unwrap_or_default();
    let name = ep.name_any();
    let key = format!("{namespace}/{name}");
    let mine: Vec<Arc<EndpointSlice>> = state
        .slices
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(namespace.as_str())
                && is_mirrored(s)
                && s.labels().get(SERVICE_NAME_LABEL) == Some(&name)
        })
        .collect();
    let seen: HashMap<String, i64> = mine.iter().map(|s| (s.name_any(), revision(s))).collect();
    if !state.expectations.satisfied(&key, &seen) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let want = if should_mirror(ep, &state.services) { desired(ep) } else { BTreeMap::new() };
    let mut labels: BTreeMap<String, String> = ep.labels().clone();
    labels.insert(SERVICE_NAME_LABEL.into(), name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let api: Api<EndpointSlice> = Api::namespaced(state.write.clone(), &namespace);
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Endpoints".into(),
        name: name.clone(),
        uid: ep.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let empty = Desired::default();
    for address_type in ["IPv4", "IPv6"] {
        let existing: Vec<EndpointSlice> =
            mine.iter().filter(|s| s.address_type == address_type).map(|s| s.as_ref().clone()).collect();
        let desired = want.get(address_type).unwrap_or(&empty);
        let plan = packing::plan(address_type, desired, &existing, &labels, false, MAX_ENDPOINTS_PER_SLICE);
        write_plan(&api, plan, &slice_prefix(&name), &labels, &owner, &state.expectations, &key).await?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subsets_mirror_by_family_with_readiness() {
        let ep: Endpoints = serde_json::from_value(json!({"metadata": {"name": "ext"}, "subsets": [
            {"addresses": [{"ip": "192.0.2.1"}, {"ip": "2001:db8::1"}], "notReadyAddresses": [{"ip": "192.0.2.2"}],
             "ports": [{"name": "https", "port": 443}]}]}))
        .unwrap();
        let d = desired(&ep);
        let v4: Vec<&Endpoint> = d["IPv4"].groups.values().flat_map(|(_, e)| e.values()).collect();
        assert_eq!(v4.len(), 2);
        assert_eq!(v4.iter().filter(|e| e.conditions.as_ref().unwrap().ready == Some(true)).count(), 1);
        assert_eq!(d["IPv6"].groups.values().map(|(_, e)| e.len()).sum::<usize>(), 1);
        let (ports, _) = d["IPv4"].groups.values().next().unwrap();
        assert_eq!((ports[0].name.as_deref(), ports[0].port), (Some("https"), Some(443)));
    }
}
