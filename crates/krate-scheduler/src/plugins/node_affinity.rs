//! NodeAffinity: the pod's nodeSelector and required node affinity (filter), its
//! preferred node affinity terms (score).

use k8s_openapi::api::core::v1::Pod;

use super::{Failure, FilterResult};
use crate::node_info::NodeInfo;
use crate::selectors::{NodeTerm, node_selector_terms};

pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

/// What a pod requires of a node's labels, parsed once.
#[derive(Clone, Debug, Default)]
pub struct Required {
    node_selector: Vec<(String, String)>,
    /// ORed; None when the pod has no required node affinity.
    terms: Option<Vec<NodeTerm>>,
}

impl Required {
    pub fn of(pod: &Pod) -> Required {
        let spec = pod.spec.as_ref();
        let node_selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
            .map(node_selector_terms);
        Required { node_selector, terms }
    }

    pub fn matches(&self, node: &NodeInfo) -> bool {
        let labels = node.labels();
        let selected =
            self.node_selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)).is_some_and(|have| have == v));
        selected && self.terms.as_ref().is_none_or(|terms| terms.iter().any(|t| t.matches(&node.name, labels)))
    }
}

pub fn filter(required: &Required, node: &NodeInfo) -> FilterResult {
    if required.matches(node) { Ok(()) } else { Err(Failure::unresolvable(REASON)) }
}

/// The pod's preferred terms with their weights.
pub fn preferred(pod: &Pod) -> Vec<(i64, NodeTerm)> {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref());
    terms
        .into_iter()
        .flatten()
        .filter(|t| t.weight != 0)
        .map(|t| (i64::from(t.weight), NodeTerm::new(&t.preference)))
        .collect()
}

/// Sum of the weights of the preferred terms the node matches (normalized later).
pub fn score(preferred: &[(i64, NodeTerm)], node: &NodeInfo) -> i64 {
    preferred.iter().filter(|(_, t)| t.matches(&node.name, node.labels())).map(|(w, _)| *w).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;
    use std::sync::Arc;

    fn node(labels: serde_json::Value) -> NodeInfo {
        let mut info = NodeInfo::empty("n1");
        info.set_node(Arc::new(
            serde_json::from_value::<Node>(json!({"metadata": {"name": "n1", "labels": labels}})).unwrap(),
        ));
        info
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn selector_and_required_terms() {
        let p = pod(json!({"containers": [], "nodeSelector": {"disk": "ssd"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}}));
        let req = Required::of(&p);
        assert!(filter(&req, &node(json!({"disk": "ssd", "zone": "a"}))).is_ok());
        assert_eq!(filter(&req, &node(json!({"disk": "hdd", "zone": "a"}))).unwrap_err().reasons, [REASON]);
        assert!(filter(&req, &node(json!({"disk": "ssd", "zone": "c"}))).is_err());
    }

    #[test]
    fn preferred_weights() {
        let p = pod(
            json!({"containers": [], "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
            {"weight": 3, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}]}}}),
        );
        let pref = preferred(&p);
        assert_eq!(score(&pref, &node(json!({"zone": "a", "disk": "x"}))), 8);
        assert_eq!(score(&pref, &node(json!({"zone": "b"}))), 0);
    }
}
