//! InterPodAffinity: required pod affinity and anti-affinity of the incoming pod, and
//! the required anti-affinity of pods already placed (filter); preferred terms of both,
//! and existing pods' required affinity at hardPodAffinityWeight (score).

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm};

use super::{Failure, FilterResult, MAX_NODE_SCORE};
use crate::node_info::{NodeInfo, PodInfo};
use crate::selectors::{Labels, Selector};

pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const REASON_EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// Which namespaces a namespace selector picks (from the namespaces informer).
pub type NamespaceLookup<'a> = &'a dyn Fn(&Selector) -> Vec<String>;

#[derive(Clone, Debug)]
pub struct Term {
    namespaces: HashSet<String>,
    all_namespaces: bool,
    selector: Selector,
    pub topology_key: String,
    pub weight: i64,
}

impl Term {
    pub fn new(t: &PodAffinityTerm, owner: &Pod, weight: i64, lookup: NamespaceLookup) -> Term {
        let labels = owner.metadata.labels.as_ref();
        let mut selector = Selector::from_label_selector(t.label_selector.as_ref());
        for (keys, equal) in [(&t.match_label_keys, true), (&t.mismatch_label_keys, false)] {
            for key in keys.iter().flatten() {
                if let Some(value) = labels.and_then(|l| l.get(key)) {
                    selector.require(key, value, equal);
                }
            }
        }
        let mut namespaces: HashSet<String> = t.namespaces.iter().flatten().cloned().collect();
        let mut all_namespaces = false;
        match &t.namespace_selector {
            Some(ns) => {
                let ns = Selector::from_label_selector(Some(ns));
                if ns.is_everything() {
                    all_namespaces = true;
                } else {
                    namespaces.extend(lookup(&ns));
                }
            }
            None if namespaces.is_empty() => {
                namespaces.insert(owner.metadata.namespace.clone().unwrap_or_else(|| "default".into()));
            }
            None => {}
        }
        Term { namespaces, all_namespaces, selector, topology_key: t.topology_key.clone(), weight }
    }

    pub fn matches(&self, pod: &Pod) -> bool {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        (self.all_namespaces || self.namespaces.contains(ns)) && self.selector.matches(pod.metadata.labels.as_ref())
    }
}

/// A pod's affinity terms, parsed.
#[derive(Clone, Debug, Default)]
pub struct Terms {
    pub required_affinity: Vec<Term>,
    pub required_anti: Vec<Term>,
    pub preferred_affinity: Vec<Term>,
    pub preferred_anti: Vec<Term>,
}

impl Terms {
    pub fn of(pod: &Pod, lookup: NamespaceLookup) -> Terms {
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let a = affinity.and_then(|a| a.pod_affinity.as_ref());
        let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let required = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<Term> {
            terms.into_iter().flatten().map(|t| Term::new(t, pod, 0, lookup)).collect()
        };
        let preferred = |terms: Option<&Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>| -> Vec<Term> {
            terms
                .into_iter()
                .flatten()
                .map(|w| Term::new(&w.pod_affinity_term, pod, i64::from(w.weight), lookup))
                .collect()
        };
        Terms {
            required_affinity: required(a.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())),
            required_anti: required(anti.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())),
            preferred_affinity: preferred(
                a.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
            ),
            preferred_anti: preferred(
                anti.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
            ),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.required_anti.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti.is_empty()
    }
}

type Pair = (String, String);

fn pair(key: &str, node: &NodeInfo) -> Option<Pair> {
    node.label(key).map(|v| (key.to_string(), v.to_string()))
}

/// Counts by topology pair, computed once per pod over every node.
#[derive(Debug, Default)]
pub struct FilterState {
    existing_anti: HashMap<Pair, i64>,
    affinity: HashMap<Pair, i64>,
    anti: HashMap<Pair, i64>,
    required_affinity: Vec<Term>,
    required_anti: Vec<Term>,
    /// The pod matches all its own affinity terms (it may then be the first of its group).
    self_affine: bool,
}

impl FilterState {
    pub fn new(pod: &Pod, terms: &Terms, nodes: &[NodeInfo], lookup: NamespaceLookup) -> Option<FilterState> {
        let any_existing_anti = nodes.iter().any(|n| n.pods_with_required_anti_affinity > 0);
        if terms.required_affinity.is_empty() && terms.required_anti.is_empty() && !any_existing_anti {
            return None;
        }
        let mut state = FilterState {
            required_affinity: terms.required_affinity.clone(),
            required_anti: terms.required_anti.clone(),
            self_affine: terms.required_affinity.iter().all(|t| t.matches(pod)),
            ..Default::default()
        };
        for node in nodes.iter().filter(|n| n.node.is_some()) {
            if node.pods_with_required_anti_affinity > 0 {
                for existing in node.pods.iter().filter(|p| p.has_required_anti_affinity) {
                    for term in Terms::of(&existing.pod, lookup).required_anti {
                        if term.matches(pod)
                            && let Some(p) = pair(&term.topology_key, node)
                        {
                            *state.existing_anti.entry(p).or_default() += 1;
                        }
                    }
                }
            }
            if state.required_affinity.is_empty() && state.required_anti.is_empty() {
                continue;
            }
            for existing in &node.pods {
                state.count(existing, node, 1);
            }
        }
        Some(state)
    }

    fn count(&mut self, existing: &PodInfo, node: &NodeInfo, delta: i64) {
        if !self.required_affinity.is_empty() && self.required_affinity.iter().all(|t| t.matches(&existing.pod)) {
            for t in &self.required_affinity {
                if let Some(p) = pair(&t.topology_key, node) {
                    *self.affinity.entry(p).or_default() += delta;
                }
            }
        }
        for t in &self.required_anti {
            if t.matches(&existing.pod)
                && let Some(p) = pair(&t.topology_key, node)
            {
                *self.anti.entry(p).or_default() += delta;
            }
        }
    }

    pub fn filter(&self, node: &NodeInfo) -> FilterResult {
        if let Some(labels) = node.labels()
            && !self.existing_anti.is_empty()
            && labels.iter().any(|(k, v)| self.existing_anti.get(&(k.clone(), v.clone())).is_some_and(|n| *n > 0))
        {
            return Err(Failure::unschedulable(REASON_EXISTING_ANTI_AFFINITY));
        }
        for t in &self.required_anti {
            if let Some(p) = pair(&t.topology_key, node)
                && self.anti.get(&p).is_some_and(|n| *n > 0)
            {
                return Err(Failure::unschedulable(REASON_ANTI_AFFINITY));
            }
        }
        let mut pods_exist = true;
        for t in &self.required_affinity {
            match pair(&t.topology_key, node) {
                None => return Err(Failure::unresolvable(REASON_AFFINITY)),
                Some(p) => pods_exist &= self.affinity.get(&p).is_some_and(|n| *n > 0),
            }
        }
        // No pod matches the terms anywhere: a pod matching its own terms may go first.
        let may_go_first = self.affinity.values().all(|n| *n <= 0) && self.self_affine;
        if !pods_exist && !may_go_first {
            return Err(Failure::unresolvable(REASON_AFFINITY));
        }
        Ok(())
    }
}

/// Preferred inter-pod affinity scores of the feasible nodes, normalized to 0..=100.
pub fn scores(
    pod: &Pod,
    terms: &Terms,
    all: &[NodeInfo],
    feasible: &[&NodeInfo],
    hard_weight: i64,
    lookup: NamespaceLookup,
) -> Option<Vec<i64>> {
    let incoming_preferred = !terms.preferred_affinity.is_empty() || !terms.preferred_anti.is_empty();
    if !incoming_preferred && all.iter().all(|n| n.pods_with_affinity == 0) {
        return None;
    }
    let mut by_pair: HashMap<Pair, i64> = HashMap::new();
    let mut add = |term: &Term, node: &NodeInfo, w: i64| {
        if let Some(p) = pair(&term.topology_key, node) {
            *by_pair.entry(p).or_default() += w;
        }
    };
    for node in all.iter().filter(|n| n.node.is_some()) {
        if !incoming_preferred && node.pods_with_affinity == 0 {
            continue;
        }
        for existing in &node.pods {
            for t in terms.preferred_affinity.iter().filter(|t| t.matches(&existing.pod)) {
                add(t, node, t.weight);
            }
            for t in terms.preferred_anti.iter().filter(|t| t.matches(&existing.pod)) {
                add(t, node, -t.weight);
            }
            if existing.has_affinity {
                let theirs = Terms::of(&existing.pod, lookup);
                if hard_weight > 0 {
                    for t in theirs.required_affinity.iter().filter(|t| t.matches(pod)) {
                        add(t, node, hard_weight);
                    }
                }
                for t in theirs.preferred_affinity.iter().filter(|t| t.matches(pod)) {
                    add(t, node, t.weight);
                }
                for t in theirs.preferred_anti.iter().filter(|t| t.matches(pod)) {
                    add(t, node, -t.weight);
                }
            }
        }
    }
    let raw: Vec<i64> = feasible
        .iter()
        .map(|node| {
            let labels: Option<&Labels> = node.labels();
            labels.into_iter().flatten().filter_map(|(k, v)| by_pair.get(&(k.clone(), v.clone()))).sum()
        })
        .collect();
    let (min, max) = (raw.iter().copied().fold(0, i64::min), raw.iter().copied().fold(0, i64::max));
    let diff = max - min;
    Some(raw.into_iter().map(|s| if diff > 0 { MAX_NODE_SCORE * (s - min) / diff } else { 0 }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;
    use std::sync::Arc;

    fn none(_: &Selector) -> Vec<String> {
        Vec::new()
    }

    fn node(name: &str, zone: &str) -> NodeInfo {
        let mut info = NodeInfo::empty(name);
        info.set_node(Arc::new(
            serde_json::from_value::<Node>(
                json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": zone}}}),
            )
            .unwrap(),
        ));
        info
    }

    fn pod(name: &str, labels: serde_json::Value, affinity: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name, "uid": name, "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i"}], "affinity": affinity}}),
        )
        .unwrap()
    }

    fn term(key: &str, app: &str) -> serde_json::Value {
        json!({"topologyKey": key, "labelSelector": {"matchLabels": {"app": app}}})
    }

    fn place(node: &mut NodeInfo, p: Pod) {
        node.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
    }

    fn fits(p: &Pod, nodes: &[NodeInfo]) -> Vec<Result<(), Vec<String>>> {
        let terms = Terms::of(p, &none);
        let Some(state) = FilterState::new(p, &terms, nodes, &none) else {
            return nodes.iter().map(|_| Ok(())).collect();
        };
        nodes.iter().map(|n| state.filter(n).map_err(|f| f.reasons.iter().map(|r| r.to_string()).collect())).collect()
    }

    #[test]
    fn anti_affinity_both_ways() {
        let mut nodes = vec![node("a", "z1"), node("b", "z1"), node("c", "z2")];
        place(&mut nodes[0], pod("db", json!({"app": "db"}), json!({})));
        let p = pod(
            "new",
            json!({"app": "web"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("zone", "db")]}}),
        );
        let r = fits(&p, &nodes);
        assert_eq!(r[0], Err(vec![REASON_ANTI_AFFINITY.to_string()]));
        assert!(r[1].is_err() && r[2].is_ok());
        // An existing pod that repels web pods from its host.
        place(
            &mut nodes[2],
            pod(
                "solo",
                json!({"app": "solo"}),
                json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("kubernetes.io/hostname", "web")]}}),
            ),
        );
        let r = fits(&pod("w", json!({"app": "web"}), json!({})), &nodes);
        assert_eq!(r[2], Err(vec![REASON_EXISTING_ANTI_AFFINITY.to_string()]));
        assert!(r[0].is_ok());
    }

    #[test]
    fn affinity_and_the_first_pod_of_a_group() {
        let mut nodes = vec![node("a", "z1"), node("b", "z2")];
        let p = pod(
            "first",
            json!({"app": "cache"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("zone", "cache")]}}),
        );
        assert!(fits(&p, &nodes).iter().all(|r| r.is_ok()), "matches itself: may go anywhere");
        let other = pod(
            "other",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("zone", "cache")]}}),
        );
        assert!(fits(&other, &nodes).iter().all(|r| r.is_err()));
        place(&mut nodes[1], pod("c1", json!({"app": "cache"}), json!({})));
        let r = fits(&other, &nodes);
        assert_eq!(r[0], Err(vec![REASON_AFFINITY.to_string()]));
        assert!(r[1].is_ok());
    }

    #[test]
    fn preferred_scores() {
        let mut nodes = vec![node("a", "z1"), node("b", "z2")];
        place(&mut nodes[1], pod("c1", json!({"app": "cache"}), json!({})));
        let p = pod(
            "new",
            json!({}),
            json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": term("zone", "cache")}]}}),
        );
        let feasible: Vec<&NodeInfo> = nodes.iter().collect();
        let s = scores(&p, &Terms::of(&p, &none), &nodes, &feasible, 1, &none).unwrap();
        assert_eq!(s, [0, 100]);
    }
}
