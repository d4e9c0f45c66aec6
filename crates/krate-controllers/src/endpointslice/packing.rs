//! Which EndpointSlices to create, update and delete so that a Service's slices hold
//! exactly the desired endpoints, changing as few slices as possible — upstream's
//! reconciler: slices whose endpoints are all still wanted and unchanged are left alone,
//! new endpoints fill the slices being updated anyway before new slices are made, and a
//! remainder goes into an untouched slice only if it fits.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};

/// Upstream's default --max-endpoints-per-slice.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// A canonical form of a slice's ports: slices group endpoints by identical port sets.
pub type PortKey = String;

pub fn port_key(ports: &[EndpointPort]) -> PortKey {
    let mut parts: Vec<String> = ports
        .iter()
        .map(|p| {
            format!(
                "{}/{}/{}/{}",
                p.name.as_deref().unwrap_or(""),
                p.protocol.as_deref().unwrap_or("TCP"),
                p.port.unwrap_or(0),
                p.app_protocol.as_deref().unwrap_or("")
            )
        })
        .collect();
    parts.sort();
    parts.join(",")
}

/// An endpoint's identity across syncs: the object it stands for, else its first address.
pub fn endpoint_key(endpoint: &Endpoint) -> String {
    match &endpoint.target_ref {
        Some(r) => format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name.as_deref().unwrap_or("")),
        None => endpoint.addresses.first().cloned().unwrap_or_default(),
    }
}

/// The endpoints wanted for one address type, grouped by their port set.
#[derive(Default, Debug)]
pub struct Desired {
    pub groups: BTreeMap<PortKey, (Vec<EndpointPort>, BTreeMap<String, Endpoint>)>,
}

impl Desired {
    pub fn add(&mut self, ports: Vec<EndpointPort>, endpoint: Endpoint) {
        let group = self.groups.entry(port_key(&ports)).or_insert_with(|| (ports, BTreeMap::new()));
        group.1.insert(endpoint_key(&endpoint), endpoint);
    }

    pub fn is_empty(&self) -> bool {
        self.groups.values().all(|(_, eps)| eps.is_empty())
    }
}

/// What to write. New slices carry only ports and endpoints (and the address type); the
/// caller gives them names, labels and owners.
#[derive(Default, Debug)]
pub struct Plan {
    pub create: Vec<EndpointSlice>,
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<EndpointSlice>,
}

fn new_slice(address_type: &str, ports: &[EndpointPort], endpoints: Vec<Endpoint>) -> EndpointSlice {
    EndpointSlice {
        address_type: address_type.into(),
        ports: Some(ports.to_vec()),
        endpoints: Some(endpoints),
        ..Default::default()
    }
}

/// Plans one address type's slices. `existing` are the Service's slices of that type;
/// `labels` what each slice's labels must be; `placeholder` whether an empty slice
/// should stand for the Service when it has no endpoints at all.
pub fn plan(
    address_type: &str,
    desired: &Desired,
    existing: &[EndpointSlice],
    labels: &BTreeMap<String, String>,
    placeholder: bool,
    max_per_slice: usize,
) -> Plan {
    let mut plan = Plan::default();
    let max = max_per_slice.max(1);
    if desired.is_empty() {
        // Keep one empty placeholder (an existing one if any), drop everything else.
        let mut kept = false;
        for slice in existing {
            let empty = slice.endpoints.as_ref().is_none_or(|e| e.is_empty());
            if placeholder && !kept && empty {
                kept = true;
                if slice.metadata.labels.as_ref() != Some(labels) {
                    let mut s = slice.clone();
                    s.metadata.labels = Some(labels.clone());
                    plan.update.push(s);
                }
            } else {
                plan.delete.push(slice.clone());
            }
        }
        if placeholder && !kept {
            plan.create.push(new_slice(address_type, &[], Vec::new()));
        }
        return plan;
    }

    let mut placed: BTreeSet<(PortKey, String)> = BTreeSet::new();
    // Slices to be updated and those left alone, by port key.
    let mut updating: BTreeMap<PortKey, Vec<EndpointSlice>> = BTreeMap::new();
    let mut untouched: BTreeMap<PortKey, Vec<EndpointSlice>> = BTreeMap::new();
    for slice in existing {
        let ports = slice.ports.clone().unwrap_or_default();
        let key = port_key(&ports);
        let wanted = desired.groups.get(&key).map(|(_, eps)| eps);
        let mut kept = Vec::new();
        let mut changed = slice.metadata.labels.as_ref() != Some(labels);
        for endpoint in slice.endpoints.iter().flatten() {
            let ek = endpoint_key(endpoint);
            match wanted.and_then(|w| w.get(&ek)) {
                Some(want) if !placed.contains(&(key.clone(), ek.clone())) => {
                    changed |= want != endpoint;
                    kept.push(want.clone());
                    placed.insert((key.clone(), ek));
                }
                _ => changed = true,
            }
        }
        if kept.is_empty() {
            plan.delete.push(slice.clone());
            continue;
        }
        let mut s = slice.clone();
        s.endpoints = Some(kept);
        s.metadata.labels = Some(labels.clone());
        if changed {
            updating.entry(key).or_default().push(s);
        } else {
            untouched.entry(key).or_default().push(s);
        }
    }

    for (key, (ports, endpoints)) in &desired.groups {
        let mut remaining: Vec<Endpoint> = endpoints
            .iter()
            .filter(|(ek, _)| !placed.contains(&(key.clone(), (*ek).clone())))
            .map(|(_, e)| e.clone())
            .collect();
        // 1. Fill slices that are being written anyway.
        for slice in updating.entry(key.clone()).or_default().iter_mut() {
            let eps = slice.endpoints.get_or_insert_with(Vec::new);
            while eps.len() < max {
                match remaining.pop() {
                    Some(e) => eps.push(e),
                    None => break,
                }
            }
        }
        // 2. Full new slices.
        while remaining.len() >= max {
            let chunk: Vec<Endpoint> = remaining.drain(..max).collect();
            plan.create.push(new_slice(address_type, ports, chunk));
        }
        if remaining.is_empty() {
            continue;
        }
        // 3. The remainder into the untouched slice with most room, if it fits; else new.
        let candidates = untouched.entry(key.clone()).or_default();
        let best = candidates
            .iter()
            .enumerate()
            .filter(|(_, s)| s.endpoints.as_ref().map_or(0, Vec::len) + remaining.len() <= max)
            .min_by_key(|(_, s)| s.endpoints.as_ref().map_or(0, Vec::len))
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut slice = candidates.remove(i);
                slice.endpoints.get_or_insert_with(Vec::new).append(&mut remaining);
                updating.entry(key.clone()).or_default().push(slice);
            }
            None => plan.create.push(new_slice(address_type, ports, remaining)),
        }
    }
    plan.update.extend(updating.into_values().flatten());
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ep(name: &str, ready: bool) -> Endpoint {
        Endpoint {
            addresses: vec![format!("10.0.0.{}", name.len())],
            conditions: Some(k8s_openapi::api::discovery::v1::EndpointConditions {
                ready: Some(ready),
                serving: Some(ready),
                terminating: Some(false),
            }),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn http() -> Vec<EndpointPort> {
        vec![EndpointPort {
            name: Some("http".into()),
            port: Some(80),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]
    }

    fn desired(n: usize) -> Desired {
        let mut d = Desired::default();
        for i in 0..n {
            d.add(http(), ep(&format!("p{i}"), true));
        }
        d
    }

    fn with_names(plan: Plan, labels: &BTreeMap<String, String>) -> Vec<EndpointSlice> {
        plan.create
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                s.metadata =
                    ObjectMeta { name: Some(format!("s{i}")), labels: Some(labels.clone()), ..Default::default() };
                s
            })
            .chain(plan.update)
            .collect()
    }

    #[test]
    fn endpoints_are_packed_at_most_100_per_slice() {
        let labels = BTreeMap::new();
        let plan = plan("IPv4", &desired(250), &[], &labels, true, MAX_ENDPOINTS_PER_SLICE);
        let sizes: Vec<usize> = plan.create.iter().map(|s| s.endpoints.as_ref().unwrap().len()).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
        assert!(plan.update.is_empty() && plan.delete.is_empty());
    }

    #[test]
    fn unchanged_slices_are_left_alone_and_one_change_updates_one_slice() {
        let labels = BTreeMap::new();
        let slices = with_names(plan("IPv4", &desired(250), &[], &labels, true, 100), &labels);
        let again = plan("IPv4", &desired(250), &slices, &labels, true, 100);
        assert!(again.create.is_empty() && again.update.is_empty() && again.delete.is_empty(), "{again:?}");

        let mut d = desired(250);
        d.add(http(), ep("p7", false)); // p7 went not-ready
        let once = plan("IPv4", &d, &slices, &labels, true, 100);
        assert_eq!((once.create.len(), once.update.len(), once.delete.len()), (0, 1, 0));
    }

    #[test]
    fn a_new_endpoint_goes_into_a_slice_with_room_instead_of_a_new_one() {
        let labels = BTreeMap::new();
        let slices = with_names(plan("IPv4", &desired(150), &[], &labels, true, 100), &labels);
        let grown = plan("IPv4", &desired(151), &slices, &labels, true, 100);
        assert!(grown.create.is_empty());
        assert_eq!(grown.update.len(), 1);
        assert_eq!(grown.update[0].endpoints.as_ref().unwrap().len(), 51);
    }

    #[test]
    fn no_endpoints_leaves_one_placeholder() {
        let labels = BTreeMap::new();
        let slices = with_names(plan("IPv4", &desired(5), &[], &labels, true, 100), &labels);
        let empty = plan("IPv4", &Desired::default(), &slices, &labels, true, 100);
        assert_eq!(empty.delete.len(), 1);
        assert_eq!(empty.create.len(), 1);
        assert_eq!(empty.create[0].endpoints.as_ref().unwrap().len(), 0);
        let placeholder = with_names(empty, &labels);
        let stays = plan("IPv4", &Desired::default(), &placeholder, &labels, true, 100);
        assert!(stays.create.is_empty() && stays.delete.is_empty() && stays.update.is_empty());
    }
}
