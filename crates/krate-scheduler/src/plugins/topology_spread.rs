//! PodTopologySpread: hard constraints (DoNotSchedule) filter nodes whose domain would
//! exceed maxSkew; soft ones (ScheduleAnyway) score nodes with fewer matching pods
//! higher. Counting follows upstream: only nodes carrying every constraint's topology
//! key count, filtered by nodeAffinityPolicy (default Honor) and nodeTaintsPolicy
//! (default Ignore); matchLabelKeys narrow the selector to the pod's own label values;
//! with fewer than minDomains domains the global minimum is taken as 0. A pod without
//! constraints of its own gets the profile's default constraints (upstream's system
//! defaults: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway) over the selector
//! of the Services, ReplicationController, ReplicaSet or StatefulSet it belongs to.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Pod, Toleration};

use super::node_affinity::Required;
use super::taint_toleration::tolerates;
use super::{Failure, FilterResult, MAX_NODE_SCORE};
use crate::node_info::NodeInfo;
use crate::selectors::Selector;

pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
pub const REASON_MISSING_LABEL: &str = "node(s) didn't match pod topology spread constraints (missing required label)";
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

#[derive(Clone, Debug)]
pub struct Constraint {
    pub max_skew: i64,
    pub topology_key: String,
    pub selector: Selector,
    pub min_domains: i64,
    pub honor_node_affinity: bool,
    pub honor_node_taints: bool,
}

/// A default constraint of a profile (PodTopologySpreadArgs.defaultConstraints).
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultConstraint {
    pub max_skew: i64,
    pub topology_key: String,
    pub when_unsatisfiable: String,
}

/// The constraints pods without their own get (PodTopologySpreadArgs).
#[derive(Clone, Debug, PartialEq)]
pub struct Defaults {
    pub constraints: Vec<DefaultConstraint>,
    /// defaultingType System: then nodes lacking a topology key are still scored.
    pub system: bool,
}

impl Default for Defaults {
    /// Upstream's system defaults.
    fn default() -> Self {
        let soft = |key: &str, max_skew| DefaultConstraint {
            max_skew,
            topology_key: key.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
        };
        Defaults { constraints: vec![soft(HOSTNAME, 3), soft(ZONE, 5)], system: true }
    }
}

/// The spreading a pod is scheduled with.
#[derive(Clone, Debug, Default)]
pub struct Spread {
    pub hard: Vec<Constraint>,
    pub soft: Vec<Constraint>,
    /// Whether scored nodes must carry every topology key (false only for system defaults).
    pub require_all_keys: bool,
}

impl Spread {
    /// The pod's own constraints, else `defaults` over `default_selector` (the selector
    /// of the workloads the pod belongs to; no defaults without one).
    pub fn of(pod: &Pod, defaults: &Defaults, default_selector: Option<&Selector>) -> Spread {
        let own = pod.spec.as_ref().and_then(|s| s.topology_spread_constraints.as_ref()).filter(|c| !c.is_empty());
        if let Some(own) = own {
            let labels = pod.metadata.labels.as_ref();
            let pick = |when: &str| -> Vec<Constraint> {
                own.iter()
                    .filter(|c| c.when_unsatisfiable == when)
                    .map(|c| {
                        let mut selector = Selector::from_label_selector(c.label_selector.as_ref());
                        for key in c.match_label_keys.iter().flatten() {
                            if let Some(value) = labels.and_then(|l| l.get(key)) {
                                selector.require(key, value, true);
                            }
                        }
                        Constraint {
                            max_skew: i64::from(c.max_skew),
                            topology_key: c.topology_key.clone(),
                            selector,
                            min_domains: i64::from(c.min_domains.unwrap_or(1)),
                            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
                        }
                    })
                    .collect()
            };
            return Spread { hard: pick("DoNotSchedule"), soft: pick("ScheduleAnyway"), require_all_keys: true };
        }
        let Some(selector) = default_selector.filter(|s| !s.is_everything()) else {
            return Spread { require_all_keys: !defaults.system, ..Default::default() };
        };
        let pick = |when: &str| -> Vec<Constraint> {
            defaults
                .constraints
                .iter()
                .filter(|c| c.when_unsatisfiable == when)
                .map(|c| Constraint {
                    max_skew: c.max_skew,
                    topology_key: c.topology_key.clone(),
                    selector: selector.clone(),
                    min_domains: 1,
                    honor_node_affinity: true,
                    honor_node_taints: false,
                })
                .collect()
        };
        Spread { hard: pick("DoNotSchedule"), soft: pick("ScheduleAnyway"), require_all_keys: !defaults.system }
    }
}

fn has_all_keys(constraints: &[Constraint], node: &NodeInfo) -> bool {
    constraints.iter().all(|c| node.label(&c.topology_key).is_some())
}

fn untolerated_taint(tolerations: &[Toleration], node: &NodeInfo) -> bool {
    node.taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

fn count_matching(node: &NodeInfo, selector: &Selector, namespace: &str) -> i64 {
    node.pods
        .iter()
        .filter(|p| {
            p.pod.metadata.deletion_timestamp.is_none()
                && p.pod.metadata.namespace.as_deref() == Some(namespace)
                && selector.matches(p.pod.metadata.labels.as_ref())
        })
        .count() as i64
}

/// Matching pods per domain for each constraint, over the nodes the policies let count
/// (without `require_all_keys`, a node lacking a key counts in that key's "" domain).
fn domain_counts<'a>(
    pod: &Pod,
    constraints: &[Constraint],
    require_all_keys: bool,
    required: &Required,
    tolerations: &[Toleration],
    nodes: impl Iterator<Item = &'a NodeInfo>,
) -> Vec<HashMap<String, i64>> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut counts = vec![HashMap::new(); constraints.len()];
    for node in nodes.filter(|n| n.node.is_some() && (!require_all_keys || has_all_keys(constraints, n))) {
        for (c, counts) in constraints.iter().zip(counts.iter_mut()) {
            if c.honor_node_affinity && !required.matches(node) {
                continue;
            }
            if c.honor_node_taints && untolerated_taint(tolerations, node) {
                continue;
            }
            let value = node.label(&c.topology_key).unwrap_or_default();
            *counts.entry(value.to_string()).or_insert(0) += count_matching(node, &c.selector, namespace);
        }
    }
    counts
}

/// What the filter needs, computed once per pod over every node.
#[derive(Debug)]
pub struct FilterState {
    constraints: Vec<Constraint>,
    counts: Vec<HashMap<String, i64>>,
    self_match: Vec<bool>,
}

impl FilterState {
    pub fn new(
        pod: &Pod,
        spread: &Spread,
        required: &Required,
        tolerations: &[Toleration],
        nodes: &[NodeInfo],
    ) -> Option<FilterState> {
        let constraints = spread.hard.clone();
        if constraints.is_empty() {
            return None;
        }
        let counts = domain_counts(pod, &constraints, true, required, tolerations, nodes.iter());
        let self_match = constraints.iter().map(|c| c.selector.matches(pod.metadata.labels.as_ref())).collect();
        Some(FilterState { constraints, counts, self_match })
    }

    fn min_match(&self, i: usize) -> i64 {
        let counts = &self.counts[i];
        if (counts.len() as i64) < self.constraints[i].min_domains {
            return 0;
        }
        counts.values().copied().min().unwrap_or(0)
    }

    pub fn filter(&self, node: &NodeInfo) -> FilterResult {
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = node.label(&c.topology_key) else {
                return Err(Failure::unresolvable(REASON_MISSING_LABEL));
            };
            let matched = self.counts[i].get(value).copied().unwrap_or(0);
            let skew = matched + i64::from(self.self_match[i]) - self.min_match(i);
            if skew > c.max_skew {
                return Err(Failure::unschedulable(REASON));
            }
        }
        Ok(())
    }

    /// Takes `pod` (placed on `node`) into the counts, as if it were bound (preemption
    /// uses the opposite when it removes victims).
    pub fn update(&mut self, pod: &Pod, node: &NodeInfo, delta: i64) {
        if pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        for (i, c) in self.constraints.iter().enumerate() {
            if let Some(value) = node.label(&c.topology_key)
                && c.selector.matches(pod.metadata.labels.as_ref())
                && let Some(n) = self.counts[i].get_mut(value)
            {
                *n += delta;
            }
        }
    }
}

/// Scores for soft constraints over the feasible nodes (normalized: fewer matching pods
/// in a node's domains scores higher). Nodes lacking a topology key score 0 when every
/// key is required; otherwise (system defaults) they are scored on the keys they have.
pub fn scores(
    pod: &Pod,
    spread: &Spread,
    required: &Required,
    tolerations: &[Toleration],
    all: &[NodeInfo],
    feasible: &[&NodeInfo],
) -> Option<Vec<i64>> {
    let constraints = &spread.soft;
    if constraints.is_empty() {
        return None;
    }
    let require_all = spread.require_all_keys;
    let counts = domain_counts(pod, constraints, require_all, required, tolerations, all.iter());
    let eligible: Vec<&&NodeInfo> = feasible.iter().filter(|n| !require_all || has_all_keys(constraints, n)).collect();
    let weights: Vec<f64> = constraints
        .iter()
        .map(|c| {
            let size = if c.topology_key == HOSTNAME {
                eligible.len()
            } else {
                eligible.iter().map(|n| n.label(&c.topology_key).unwrap_or_default()).collect::<HashSet<_>>().len()
            };
            ((size + 2) as f64).ln()
        })
        .collect();
    let raw: Vec<Option<i64>> = feasible
        .iter()
        .map(|node| {
            if require_all && !has_all_keys(constraints, node) {
                return None;
            }
            let mut score = 0.0;
            for (i, c) in constraints.iter().enumerate() {
                let Some(value) = node.label(&c.topology_key) else { continue };
                let count = counts[i].get(value).copied().unwrap_or(0);
                score += count as f64 * weights[i] + (c.max_skew - 1) as f64;
            }
            Some(score.round() as i64)
        })
        .collect();
    let counted = raw.iter().flatten();
    let (min, max) = (counted.clone().copied().min().unwrap_or(0), counted.copied().max().unwrap_or(0));
    Some(
        raw.into_iter()
            .map(|s| match s {
                None => 0,
                Some(_) if max == 0 => MAX_NODE_SCORE,
                Some(s) => MAX_NODE_SCORE * (max + min - s) / max,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_info::PodInfo;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;
    use std::sync::Arc;

    fn own(p: &Pod) -> Spread {
        Spread::of(p, &Defaults::default(), None)
    }

    fn node(name: &str, zone: Option<&str>, extra: serde_json::Value) -> NodeInfo {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(z) = zone {
            labels["zone"] = json!(z);
        }
        for (k, v) in extra.as_object().unwrap() {
            labels[k] = v.clone();
        }
        let mut info = NodeInfo::empty(name);
        info.set_node(Arc::new(
            serde_json::from_value::<Node>(json!({"metadata": {"name": name, "labels": labels}})).unwrap(),
        ));
        info
    }

    fn pod(name: &str, labels: serde_json::Value, spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "i"}]);
        serde_json::from_value(
            json!({"metadata": {"name": name, "uid": name, "namespace": "default", "labels": labels},
            "spec": spec}),
        )
        .unwrap()
    }

    fn place(node: &mut NodeInfo, name: &str, labels: serde_json::Value) {
        node.add_pod(Arc::new(PodInfo::new(Arc::new(pod(name, labels, json!({}))))));
    }

    fn spread(extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        json!({"topologySpreadConstraints": [c]})
    }

    fn feasible(state: &FilterState, nodes: &[NodeInfo]) -> Vec<String> {
        nodes.iter().filter(|n| state.filter(n).is_ok()).map(|n| n.name.clone()).collect()
    }

    #[test]
    fn max_skew_and_missing_label() {
        let mut nodes =
            vec![node("a", Some("z1"), json!({})), node("b", Some("z2"), json!({})), node("c", None, json!({}))];
        place(&mut nodes[0], "w1", json!({"app": "web"}));
        let p = pod("new", json!({"app": "web"}), spread(json!({})));
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        assert_eq!(feasible(&state, &nodes), ["b"]);
        assert_eq!(state.filter(&nodes[2]).unwrap_err().reasons, [REASON_MISSING_LABEL]);
        assert_eq!(state.filter(&nodes[0]).unwrap_err().reasons, [REASON]);
    }

    #[test]
    fn min_domains_counts_missing_domains_as_empty() {
        let mut nodes = vec![node("a", Some("z1"), json!({})), node("b", Some("z2"), json!({}))];
        place(&mut nodes[0], "w1", json!({"app": "web"}));
        place(&mut nodes[1], "w2", json!({"app": "web"}));
        let p = pod("new", json!({"app": "web"}), spread(json!({"minDomains": 3})));
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        assert!(feasible(&state, &nodes).is_empty(), "with 2 of 3 domains the minimum is 0: skew 2");
        let p = pod("new", json!({"app": "web"}), spread(json!({})));
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        assert_eq!(feasible(&state, &nodes).len(), 2);
    }

    #[test]
    fn match_label_keys_narrow_the_selector() {
        let mut nodes = vec![node("a", Some("z1"), json!({})), node("b", Some("z2"), json!({}))];
        place(&mut nodes[0], "old", json!({"app": "web", "rev": "1"}));
        let p = pod("new", json!({"app": "web", "rev": "2"}), spread(json!({"matchLabelKeys": ["rev"]})));
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        assert_eq!(feasible(&state, &nodes).len(), 2, "pods of another revision do not count");
    }

    #[test]
    fn node_affinity_and_taints_policies() {
        // z3 is excluded by the pod's nodeSelector (Honor) or by a taint (Honor).
        let mut nodes = vec![
            node("a", Some("z1"), json!({"pool": "x"})),
            node("b", Some("z2"), json!({"pool": "x"})),
            node("c", Some("z3"), json!({})),
        ];
        nodes[2].taints = vec![k8s_openapi::api::core::v1::Taint {
            key: "k".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        place(&mut nodes[0], "w1", json!({"app": "web"}));
        let mut spec = spread(json!({}));
        spec["nodeSelector"] = json!({"pool": "x"});
        let p = pod("new", json!({"app": "web"}), spec.clone());
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        // Honor: z3 ignored, so the minimum is 0 (z2) and z1 is at skew 2.
        assert_eq!(feasible(&state, &nodes[..2]), ["b"]);
        spec["topologySpreadConstraints"][0]["nodeAffinityPolicy"] = json!("Ignore");
        let p = pod("new", json!({"app": "web"}), spec.clone());
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        assert_eq!(state.min_match(0), 0);
        // Taints: with Honor the tainted z3 does not count; only z1, z2 domains remain.
        nodes[1].add_pod(Arc::new(PodInfo::new(Arc::new(pod("w2", json!({"app": "web"}), json!({}))))));
        let mut spec = spread(json!({"nodeTaintsPolicy": "Honor"}));
        spec["nodeSelector"] = json!({});
        let p = pod("new", json!({"app": "web"}), spec);
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        assert_eq!(state.min_match(0), 1, "z3 (0 pods) ignored: its taint is not tolerated");
        let p = pod("new", json!({"app": "web"}), spread(json!({})));
        let state = FilterState::new(&p, &own(&p), &Required::of(&p), &[], &nodes).unwrap();
        assert_eq!(state.min_match(0), 0, "taints ignored by default");
    }

    #[test]
    fn soft_constraints_prefer_emptier_domains() {
        let mut nodes = vec![node("a", Some("z1"), json!({})), node("b", Some("z2"), json!({}))];
        place(&mut nodes[0], "w1", json!({"app": "web"}));
        place(&mut nodes[0], "w2", json!({"app": "web"}));
        let mut spec = spread(json!({}));
        spec["topologySpreadConstraints"][0]["whenUnsatisfiable"] = json!("ScheduleAnyway");
        let p = pod("new", json!({"app": "web"}), spec);
        let feasible: Vec<&NodeInfo> = nodes.iter().collect();
        let s = scores(&p, &own(&p), &Required::of(&p), &[], &nodes, &feasible).unwrap();
        assert!(s[1] > s[0], "{s:?}");
        assert_eq!(s[1], 100);
    }

    #[test]
    fn pods_without_constraints_spread_by_their_workloads_selector() {
        // Three nodes in two zones, one without a zone label; two "web" pods on a1.
        let mut nodes = vec![
            node("a1", None, json!({ZONE: "a"})),
            node("a2", None, json!({ZONE: "a"})),
            node("b1", None, json!({ZONE: "b"})),
            node("bare", None, json!({})),
        ];
        place(&mut nodes[0], "w1", json!({"app": "web"}));
        place(&mut nodes[0], "w2", json!({"app": "web"}));
        let p = pod("new", json!({"app": "web"}), json!({}));
        // No workload selects it: no defaults.
        let none = Spread::of(&p, &Defaults::default(), None);
        assert!(none.hard.is_empty() && none.soft.is_empty());
        let everything = Selector::from_map(&Default::default());
        assert!(Spread::of(&p, &Defaults::default(), Some(&everything)).soft.is_empty());
        let selector = Selector::from_map(&[("app".to_string(), "web".to_string())].into());
        let defaulted = Spread::of(&p, &Defaults::default(), Some(&selector));
        assert!(defaulted.hard.is_empty() && !defaulted.require_all_keys);
        let keys: Vec<(&str, i64)> = defaulted.soft.iter().map(|c| (c.topology_key.as_str(), c.max_skew)).collect();
        assert_eq!(keys, [(HOSTNAME, 3), (ZONE, 5)]);
        let feasible: Vec<&NodeInfo> = nodes.iter().collect();
        let s = scores(&p, &defaulted, &Required::of(&p), &[], &nodes, &feasible).unwrap();
        // a1 holds the pods: lowest; b1 (empty zone and host) highest; the node without
        // a zone is still scored on its hostname.
        assert!(s[0] < s[1] && s[1] < s[2], "{s:?}");
        assert!(s[3] > s[0], "{s:?}");
        // The pod's own constraints win over the defaults.
        let own_p = pod("new", json!({"app": "web"}), spread(json!({})));
        let own_rules = Spread::of(&own_p, &Defaults::default(), Some(&selector));
        assert!(own_rules.soft.is_empty() && own_rules.hard.len() == 1 && own_rules.require_all_keys);
    }
}
