//! Which nodes a DaemonSet's pods belong on (upstream's NodeShouldRunDaemonPod): the
//! template's nodeName, nodeSelector and required node affinity must match the node, and
//! its taints be tolerated — counting the tolerations upstream adds to every daemon pod.
//! A pod is pinned to its node by a required node-affinity term on metadata.name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Toleration,
};

/// The tolerations every daemon pod gets (key, effect), and network-unavailable for
/// host-network pods.
const DAEMON_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];
const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// Adds the daemon tolerations the spec does not already have.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let host_network = spec.host_network == Some(true);
    let tolerations = spec.tolerations.get_or_insert_default();
    let extra = host_network.then_some((NETWORK_UNAVAILABLE, "NoSchedule"));
    for (key, effect) in DAEMON_TOLERATIONS.into_iter().chain(extra) {
        let present = tolerations.iter().any(|t| {
            t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect) && t.toleration_seconds.is_none()
        });
        if !present {
            tolerations.retain(|t| !(t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect)));
            tolerations.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                ..Default::default()
            });
        }
    }
}

pub use krate_client::v1helpers::tolerated as tolerates;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// A daemon pod should be made on the node.
    pub should_run: bool,
    /// A daemon pod already there may stay.
    pub should_continue_running: bool,
}

pub fn placement(template: &PodSpec, node: &Node) -> Placement {
    const NO: Placement = Placement { should_run: false, should_continue_running: false };
    let name = node.metadata.name.as_deref().unwrap_or("");
    if template.node_name.as_deref().is_some_and(|n| !n.is_empty() && n != name) {
        return NO;
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    if !template.node_selector.as_ref().is_none_or(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v))) {
        return NO;
    }
    let required = template
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    if let Some(required) = required
        && !required.node_selector_terms.iter().any(|t| term_matches(t, labels, name))
    {
        return NO;
    }
    let mut spec = template.clone();
    add_daemon_tolerations(&mut spec);
    let tolerations = spec.tolerations.unwrap_or_default();
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let untolerated =
        |effects: &[&str]| taints.iter().any(|t| effects.contains(&t.effect.as_str()) && !tolerates(&tolerations, t));
    if untolerated(&["NoSchedule", "NoExecute"]) {
        return Placement { should_run: false, should_continue_running: !untolerated(&["NoExecute"]) };
    }
    Placement { should_run: true, should_continue_running: true }
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    // A term with no requirements matches nothing.
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| r.key == "metadata.name" && requirement_matches(r, Some(name)))
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !value.is_some_and(|v| values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => match (value.and_then(number), values.first().and_then(|v| number(v))) {
            (Some(v), Some(bound)) => {
                if r.operator == "Gt" {
                    v > bound
                } else {
                    v < bound
                }
            }
            _ => false,
        },
        _ => false,
    }
}

/// Pins the pod to `node`: the required node-affinity terms become one matchFields term
/// on metadata.name (the scheduler binds it there).
pub fn pin_to_node(spec: &mut PodSpec, node: &str) {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        match_expressions: None,
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution =
        Some(NodeSelector { node_selector_terms: vec![term] });
}

/// The node a daemon pod is on or pinned to.
pub fn node_of(spec: &PodSpec) -> Option<&str> {
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n);
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().flat_map(|t| t.match_fields.iter().flatten()).find_map(|r| {
        (r.key == "metadata.name" && r.operator == "In")
            .then(|| r.values.as_ref()?.first().map(String::as_str))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}}))
            .unwrap()
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn node_selector_and_required_affinity_choose_nodes() {
        let s = spec(json!({"containers": [], "nodeSelector": {"disk": "ssd"}}));
        assert!(placement(&s, &node(json!({"disk": "ssd"}), json!([]))).should_run);
        assert!(!placement(&s, &node(json!({"disk": "hdd"}), json!([]))).should_run);
        let a = spec(
            json!({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]}}}}),
        );
        assert!(placement(&a, &node(json!({"zone": "a"}), json!([]))).should_run);
        assert!(!placement(&a, &node(json!({"zone": "b"}), json!([]))).should_run);
    }

    #[test]
    fn taints_need_tolerations_and_daemon_tolerations_are_implied() {
        let s = spec(json!({"containers": []}));
        let no_schedule = node(json!({}), json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]));
        assert_eq!(placement(&s, &no_schedule), Placement { should_run: false, should_continue_running: true });
        let no_execute = node(json!({}), json!([{"key": "dedicated", "effect": "NoExecute"}]));
        assert_eq!(placement(&s, &no_execute), Placement { should_run: false, should_continue_running: false });
        let tolerant =
            spec(json!({"containers": [], "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]}));
        assert!(placement(&tolerant, &no_schedule).should_run);
        // Upstream's automatic tolerations cover unschedulable, not-ready and pressure taints.
        let cordoned = node(
            json!({}),
            json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
        );
        assert!(placement(&s, &cordoned).should_run);
        let net = node(json!({}), json!([{"key": NETWORK_UNAVAILABLE, "effect": "NoSchedule"}]));
        assert!(!placement(&s, &net).should_run);
        assert!(placement(&spec(json!({"containers": [], "hostNetwork": true})), &net).should_run);
    }

    #[test]
    fn pods_are_pinned_by_a_match_fields_term() {
        let mut s = spec(
            json!({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}}}}),
        );
        pin_to_node(&mut s, "n7");
        assert_eq!(node_of(&s), Some("n7"));
        let terms = &s
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        assert!(terms[0].match_expressions.is_none());
    }
}
