//! What one DaemonSet sync does, decided from a snapshot (pure, so it is unit tested), as
//! upstream's manage and rollingUpdate: a pod on every node that should run one, none
//! elsewhere, failed pods replaced; then (RollingUpdate) outdated pods replaced either
//! delete-first within maxUnavailable or, with maxSurge, create-first on up to maxSurge
//! nodes at once, the old pod deleted once its replacement is available.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::jiff::Timestamp;

use super::placement::{self, Placement};
use crate::history::REVISION_LABEL;
use crate::pods;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Create {
        node: String,
    },
    Delete {
        pod: String,
    },
    /// A failed pod, deleted so that it is made again.
    DeleteFailed {
        pod: String,
        node: String,
    },
}

#[derive(Debug, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub requeue: Option<Duration>,
}

/// One node's daemon pods (not being deleted), oldest first, and where it stands.
pub struct NodePods<'a> {
    pub node: String,
    pub placement: Placement,
    pub pods: Vec<&'a Pod>,
}

pub fn template_spec(ds: &DaemonSet) -> PodSpec {
    ds.spec.as_ref().and_then(|s| s.template.spec.clone()).unwrap_or_default()
}

pub fn min_ready_seconds(ds: &DaemonSet) -> i32 {
    ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

fn hash_of(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(REVISION_LABEL).map(String::as_str)
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// Every node with its placement and pods; plus the pods on nodes that are gone.
pub fn by_node<'a>(ds: &DaemonSet, nodes: &[Node], pods: &'a [Pod]) -> (Vec<NodePods<'a>>, Vec<&'a Pod>) {
    let template = template_spec(ds);
    let mut on: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in pods.iter().filter(|p| !pods::is_terminating(p)) {
        if let Some(node) = p.spec.as_ref().and_then(placement::node_of) {
            on.entry(node).or_default().push(p);
        }
    }
    let mut list = Vec::new();
    for node in nodes {
        let n = node.metadata.name.clone().unwrap_or_default();
        let mut here = on.remove(n.as_str()).unwrap_or_default();
        here.sort_by_key(|p| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), p.metadata.name.clone()));
        list.push(NodePods { placement: placement::placement(&template, node), node: n, pods: here });
    }
    (list, on.into_values().flatten().collect())
}

pub fn plan(ds: &DaemonSet, nodes: &[NodePods<'_>], orphans: &[&Pod], hash: &str, now: Timestamp) -> Plan {
    let mut plan = Plan::default();
    let min_ready = min_ready_seconds(ds);
    for p in orphans {
        plan.steps.push(Step::Delete { pod: name(p) });
    }
    for n in nodes {
        if n.placement.should_run && n.pods.is_empty() {
            plan.steps.push(Step::Create { node: n.node.clone() });
        } else if n.placement.should_continue_running {
            let (failed, running): (Vec<&&Pod>, Vec<&&Pod>) = n.pods.iter().partition(|p| pods::is_failed(p));
            for p in failed {
                plan.steps.push(Step::DeleteFailed { pod: name(p), node: n.node.clone() });
            }
            // One pod per node: of several of the same revision keep the oldest (old and
            // new side by side are a surge, which the rollout resolves).
            let (new, old): (Vec<&&Pod>, Vec<&&Pod>) = running.iter().partition(|p| hash_of(p) == Some(hash));
            for extra in new.iter().skip(1).chain(old.iter().skip(1)) {
                plan.steps.push(Step::Delete { pod: name(extra) });
            }
        } else {
            plan.steps.extend(n.pods.iter().map(|p| Step::Delete { pod: name(p) }));
        }
    }
    if !plan.steps.is_empty() {
        return plan;
    }
    for n in nodes {
        if let Some(d) = n.pods.iter().filter_map(|p| pods::until_available(p, min_ready, now)).min() {
            plan.requeue = Some(plan.requeue.map_or(d, |r| r.min(d)));
        }
    }
    let rolling = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    if rolling.and_then(|u| u.type_.as_deref()) == Some("OnDelete") {
        return plan;
    }
    let desired = nodes.iter().filter(|n| n.placement.should_run).count() as i32;
    let ru = rolling.and_then(|u| u.rolling_update.as_ref());
    let max_surge = pods::scaled(ru.and_then(|r| r.max_surge.as_ref()), desired, true, 0).unwrap_or(0);
    let mut max_unavailable = pods::scaled(ru.and_then(|r| r.max_unavailable.as_ref()), desired, true, 1).unwrap_or(1);
    if max_surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }
    let available = |p: &Pod| pods::is_available(p, min_ready, now);
    let candidates = nodes.iter().filter(|n| n.placement.should_run).map(|n| {
        let new = n.pods.iter().copied().find(|p| hash_of(p) == Some(hash));
        let old = n.pods.iter().copied().find(|p| hash_of(p) != Some(hash));
        (n, new, old)
    });
    if max_surge == 0 {
        let mut unavailable = 0;
        let mut replace_now = Vec::new();
        let mut budgeted = Vec::new();
        for (_, new, old) in candidates {
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(new), None) => unavailable += i32::from(!available(new)),
                (None, Some(old)) if !available(old) => replace_now.push(old),
                (None, Some(old)) => budgeted.push(old),
            }
        }
        let room = (max_unavailable - unavailable).max(0) as usize;
        for p in replace_now.into_iter().chain(budgeted.into_iter().take(room)) {
            plan.steps.push(Step::Delete { pod: name(p) });
        }
    } else {
        let mut surging = 0;
        let mut create_now = Vec::new();
        let mut budgeted = Vec::new();
        for (n, new, old) in candidates {
            match (new, old) {
                (_, None) => {}
                (None, Some(old)) if !available(old) => create_now.push(n.node.clone()),
                (None, Some(_)) => budgeted.push(n.node.clone()),
                (Some(new), Some(old)) if available(new) => plan.steps.push(Step::Delete { pod: name(old) }),
                (Some(_), Some(_)) => surging += 1,
            }
        }
        let room = (max_surge - surging).max(0) as usize;
        for node in create_now.into_iter().chain(budgeted.into_iter().take(room)) {
            plan.steps.push(Step::Create { node });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(strategy: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "agent"}, "spec": {
            "selector": {"matchLabels": {"app": "a"}}, "updateStrategy": strategy,
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c"}]}}}}))
        .unwrap()
    }

    fn node(i: usize) -> Node {
        serde_json::from_value(json!({"metadata": {"name": format!("n{i}")}})).unwrap()
    }

    fn pod(node: usize, hash: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("agent-{hash}-{node}"), "labels": {REVISION_LABEL: hash}},
            "spec": {"nodeName": format!("n{node}"), "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "lastTransitionTime": "2020-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    fn steps(d: &DaemonSet, nodes: usize, pods: &[Pod]) -> Vec<Step> {
        let nodes: Vec<Node> = (0..nodes).map(node).collect();
        let (by, orphans) = by_node(d, &nodes, pods);
        plan(d, &by, &orphans, "new", Timestamp::now()).steps
    }

    #[test]
    fn every_eligible_node_gets_one_pod() {
        let d = ds(json!({"type": "RollingUpdate"}));
        let got = steps(&d, 3, &[pod(1, "new", true), pod(7, "new", true)]);
        assert_eq!(
            got,
            vec![
                Step::Delete { pod: "agent-new-7".into() },
                Step::Create { node: "n0".into() },
                Step::Create { node: "n2".into() },
            ]
        );
    }

    #[test]
    fn max_unavailable_deletes_old_pods_first() {
        let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2, "maxSurge": 0}}));
        let got = steps(&d, 3, &[pod(0, "old", true), pod(1, "old", true), pod(2, "old", true)]);
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|s| matches!(s, Step::Delete { .. })));
    }

    #[test]
    fn max_surge_creates_first_and_deletes_old_once_the_new_is_available() {
        let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}));
        let old: Vec<Pod> = (0..3).map(|i| pod(i, "old", true)).collect();
        assert_eq!(steps(&d, 3, &old), vec![Step::Create { node: "n0".into() }]);
        let mut surging = old.clone();
        surging.push(pod(0, "new", false));
        assert!(steps(&d, 3, &surging).is_empty());
        surging.pop();
        surging.push(pod(0, "new", true));
        // The replaced node no longer surges, so the next node starts (as upstream).
        assert_eq!(
            steps(&d, 3, &surging),
            vec![Step::Delete { pod: "agent-old-0".into() }, Step::Create { node: "n1".into() }]
        );
    }

    #[test]
    fn on_delete_leaves_old_pods() {
        let d = ds(json!({"type": "OnDelete"}));
        assert!(steps(&d, 2, &[pod(0, "old", true), pod(1, "old", true)]).is_empty());
    }
}
