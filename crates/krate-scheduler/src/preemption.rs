//! DefaultPreemption: when a pod fits nowhere, find a node where removing lower-priority
//! pods makes it fit, keep as many of them as still allows it (reprieve, highest priority
//! first), and pick the node whose victims matter least. The scheduler then nominates the
//! node, marks the victims with the DisruptionTarget condition and deletes them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::cache::Cache;
use crate::framework::{Diagnosis, Prepared, Profile};
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::inter_pod_affinity::NamespaceLookup;

pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

#[derive(Debug)]
pub struct Candidate {
    pub node: String,
    pub victims: Vec<Arc<Pod>>,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub candidate: Option<Candidate>,
    not_eligible: Option<&'static str>,
    reasons: BTreeMap<&'static str, usize>,
}

impl Outcome {
    /// The "preemption: ..." part of the FailedScheduling message.
    pub fn message(&self, num_nodes: usize) -> String {
        if let Some(why) = self.not_eligible {
            return format!("preemption: {why}");
        }
        if self.candidate.is_some() {
            return "preemption: nominated a node for the pod; waiting for victims to leave.".into();
        }
        let mut reasons: Vec<String> = self.reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
        reasons.sort();
        format!("preemption: 0/{num_nodes} nodes are available: {}.", reasons.join(", "))
    }
}

pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn trial_node(node: &NodeInfo, keep: impl Iterator<Item = Arc<PodInfo>>) -> Option<NodeInfo> {
    let mut trial = NodeInfo::empty(&node.name);
    trial.set_node(node.node.clone()?);
    for p in keep {
        trial.add_pod(p);
    }
    Some(trial)
}

pub fn preempt(
    profile: &Profile,
    pod: &Prepared,
    cache: &Cache,
    diagnosis: &Diagnosis,
    _namespaces: NamespaceLookup,
) -> Outcome {
    let spec = pod.info.pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Outcome { not_eligible: Some("not eligible due to preemptionPolicy=Never."), ..Default::default() };
    }
    let mine = priority(&pod.info.pod);
    let mut outcome = Outcome::default();
    let mut best: Option<((i32, i64, usize), Candidate)> = None;
    for (name, failure) in &diagnosis.failures {
        if failure.unresolvable {
            *outcome.reasons.entry(NOT_HELPFUL).or_default() += 1;
            continue;
        }
        let Some(node) = cache.node(name) else { continue };
        let (mut lower, higher): (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) =
            node.pods.iter().cloned().partition(|p| priority(&p.pod) < mine);
        let fits = |n: &NodeInfo| pod.filter(profile, n).is_ok();
        let Some(mut trial) = trial_node(node, higher.into_iter()) else { continue };
        if lower.is_empty() || !fits(&trial) {
            *outcome.reasons.entry(NO_VICTIMS).or_default() += 1;
            continue;
        }
        // Reprieve: give back the most important pods first while the pod still fits.
        lower.sort_by_key(|p| std::cmp::Reverse(priority(&p.pod)));
        let mut victims = Vec::new();
        for p in lower {
            trial.add_pod(p.clone());
            if !fits(&trial) {
                trial.remove_pod(p.uid());
                victims.push(p.pod.clone());
            }
        }
        let key = (
            victims.iter().map(|v| priority(v)).max().unwrap_or(i32::MIN),
            victims.iter().map(|v| i64::from(priority(v))).sum::<i64>(),
            victims.len(),
        );
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, Candidate { node: name.clone(), victims }));
        }
    }
    outcome.candidate = best.map(|(_, c)| c);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selectors::Selector;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    fn pod(name: &str, cpu: &str, priority: i32, node: Option<&str>) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "uid": name, "namespace": "default"},
            "spec": {"nodeName": node, "priority": priority,
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn evicts_the_fewest_least_important_pods() {
        let mut cache = Cache::default();
        for n in ["a", "b"] {
            cache.set_node(Arc::new(
                serde_json::from_value::<Node>(json!({"metadata": {"name": n},
                "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"}}}))
                .unwrap(),
            ));
        }
        cache.update_bound_pod(pod("a-low", "1", 1, Some("a")));
        cache.update_bound_pod(pod("a-mid", "1", 5, Some("a")));
        cache.update_bound_pod(pod("b-high", "1", 100, Some("b")));
        cache.update_bound_pod(pod("b-low", "1", 1, Some("b")));
        let profile = Profile::new("default-scheduler");
        let none = |_: &Selector| Vec::new();
        let incoming = Prepared::new(&profile, Arc::new(PodInfo::new(pod("new", "1", 10, None))), &cache, &none);
        let mut algo = crate::framework::Algorithm::default();
        let diagnosis = algo.schedule(&profile, &incoming, &cache).unwrap_err();
        let outcome = preempt(&profile, &incoming, &cache, &diagnosis, &none);
        let c = outcome.candidate.unwrap();
        assert_eq!(c.victims.len(), 1);
        assert!(c.victims[0].metadata.name.as_deref().unwrap().ends_with("low"));

        let mut never = (*pod("never", "1", 10, None)).clone();
        never.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        let incoming = Prepared::new(&profile, Arc::new(PodInfo::new(Arc::new(never))), &cache, &none);
        let outcome = preempt(&profile, &incoming, &cache, &diagnosis, &none);
        assert_eq!(outcome.message(2), "preemption: not eligible due to preemptionPolicy=Never.");

        let incoming = Prepared::new(&profile, Arc::new(PodInfo::new(pod("low", "1", 0, None))), &cache, &none);
        let outcome = preempt(&profile, &incoming, &cache, &diagnosis, &none);
        assert_eq!(
            outcome.message(2),
            "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        );
    }
}
