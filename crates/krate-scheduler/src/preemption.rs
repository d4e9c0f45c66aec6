//! DefaultPreemption: when a pod fits nowhere, find a node where removing lower-priority
//! pods makes it fit, keep as many of them as still allows it (reprieve, highest priority
//! first, pods whose eviction would break a PodDisruptionBudget before the others), and
//! pick the node whose victims break the fewest budgets and matter least. The scheduler
//! then nominates the node, marks the victims with the DisruptionTarget condition and
//! deletes them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::cache::Cache;
use crate::framework::{Diagnosis, Prepared, Profile};
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::inter_pod_affinity::NamespaceLookup;
use crate::selectors::Selector;

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

/// A PodDisruptionBudget as preemption reads it.
pub struct Budget {
    namespace: String,
    selector: Selector,
    allowed: i32,
    /// Pods the disruption controller already counts as disrupted.
    disrupted: HashSet<String>,
}

impl Budget {
    pub fn new(pdb: &PodDisruptionBudget) -> Budget {
        let spec = pdb.spec.as_ref();
        let status = pdb.status.as_ref();
        Budget {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            selector: Selector::from_label_selector(spec.and_then(|s| s.selector.as_ref())),
            allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }
}

/// Splits pods (kept in order) into those whose eviction would exceed some budget's
/// allowed disruptions, counting the pods before them, and the rest (upstream's
/// filterPodsWithPDBViolation; a budget selecting everything is ignored, as upstream).
fn split_by_budget(pods: Vec<Arc<PodInfo>>, budgets: &[Budget]) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for p in pods {
        let meta = &p.pod.metadata;
        let mut violates = false;
        if meta.labels.as_ref().is_some_and(|l| !l.is_empty()) {
            for (i, b) in budgets.iter().enumerate() {
                if meta.namespace.as_deref().unwrap_or("") != b.namespace
                    || b.selector.is_everything()
                    || !b.selector.matches(meta.labels.as_ref())
                    || meta.name.as_ref().is_some_and(|n| b.disrupted.contains(n))
                {
                    continue;
                }
                allowed[i] -= 1;
                violates |= allowed[i] < 0;
            }
        }
        if violates { violating.push(p) } else { fine.push(p) }
    }
    (violating, fine)
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
    budgets: &[Budget],
    _namespaces: NamespaceLookup,
) -> Outcome {
    let spec = pod.info.pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Outcome { not_eligible: Some("not eligible due to preemptionPolicy=Never."), ..Default::default() };
    }
    let mine = priority(&pod.info.pod);
    let mut outcome = Outcome::default();
    let mut best: Option<((usize, i32, i64, usize), Candidate)> = None;
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
        // Reprieve: give back the most important pods first while the pod still fits,
        // those protected by a disruption budget before the others.
        lower.sort_by_key(|p| std::cmp::Reverse(priority(&p.pod)));
        let (protected, unprotected) = split_by_budget(lower, budgets);
        let mut victims = Vec::new();
        let mut violations = 0;
        for (p, is_protected) in
            protected.into_iter().map(|p| (p, true)).chain(unprotected.into_iter().map(|p| (p, false)))
        {
            trial.add_pod(p.clone());
            if !fits(&trial) {
                trial.remove_pod(p.uid());
                victims.push(p.pod.clone());
                violations += usize::from(is_protected);
            }
        }
        let key = (
            violations,
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
        let incoming = Prepared::new(&profile, Arc::new(PodInfo::new(pod("new", "1", 10, None))), &cache, &none, None);
        let mut algo = crate::framework::Algorithm::default();
        let diagnosis = algo.schedule(&profile, &incoming, &cache).unwrap_err();
        let outcome = preempt(&profile, &incoming, &cache, &diagnosis, &[], &none);
        let c = outcome.candidate.unwrap();
        assert_eq!(c.victims.len(), 1);
        assert!(c.victims[0].metadata.name.as_deref().unwrap().ends_with("low"));

        let mut never = (*pod("never", "1", 10, None)).clone();
        never.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        let incoming = Prepared::new(&profile, Arc::new(PodInfo::new(Arc::new(never))), &cache, &none, None);
        let outcome = preempt(&profile, &incoming, &cache, &diagnosis, &[], &none);
        assert_eq!(outcome.message(2), "preemption: not eligible due to preemptionPolicy=Never.");

        let incoming = Prepared::new(&profile, Arc::new(PodInfo::new(pod("low", "1", 0, None))), &cache, &none, None);
        let outcome = preempt(&profile, &incoming, &cache, &diagnosis, &[], &none);
        assert_eq!(
            outcome.message(2),
            "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        );
    }

    fn labelled(name: &str, cpu: &str, priority: i32, node: &str) -> Arc<Pod> {
        let mut p = (*pod(name, cpu, priority, Some(node))).clone();
        p.metadata.labels = Some([("app".to_string(), name.trim_end_matches(char::is_numeric).to_string())].into());
        Arc::new(p)
    }

    fn budget(app: &str, allowed: i32) -> Budget {
        Budget::new(
            &serde_json::from_value(json!({"metadata": {"name": app, "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1, "observedGeneration": 1}}))
            .unwrap(),
        )
    }

    #[test]
    fn budgets_decide_which_pods_and_which_node() {
        let mut cache = Cache::default();
        for n in ["a", "b"] {
            cache.set_node(Arc::new(
                serde_json::from_value::<Node>(json!({"metadata": {"name": n},
                "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"}}}))
                .unwrap(),
            ));
        }
        // Node a: two "db" pods of priority 1 (budget allows none); node b: a "web" pod of
        // priority 5 (no budget) and one of priority 6.
        cache.update_bound_pod(labelled("db1", "1", 1, "a"));
        cache.update_bound_pod(labelled("db2", "1", 1, "a"));
        cache.update_bound_pod(labelled("web1", "1", 5, "b"));
        cache.update_bound_pod(labelled("web2", "1", 6, "b"));
        let profile = Profile::new("default-scheduler");
        let none = |_: &Selector| Vec::new();
        let incoming = Prepared::new(&profile, Arc::new(PodInfo::new(pod("new", "1", 10, None))), &cache, &none, None);
        let diagnosis = crate::framework::Algorithm::default().schedule(&profile, &incoming, &cache).unwrap_err();

        // Without budgets node a's victim matters least.
        let c = preempt(&profile, &incoming, &cache, &diagnosis, &[], &none).candidate.unwrap();
        assert_eq!(c.node, "a");
        // With the db budget, breaking it costs more than evicting a higher-priority web pod.
        let budgets = [budget("db", 0)];
        let c = preempt(&profile, &incoming, &cache, &diagnosis, &budgets, &none).candidate.unwrap();
        assert_eq!(c.node, "b");
        assert_eq!(c.victims[0].metadata.name.as_deref(), Some("web1"));

        // A budget allowing one disruption protects the second pod only.
        let (violating, fine) = split_by_budget(
            vec![
                Arc::new(PodInfo::new(labelled("db1", "1", 1, "a"))),
                Arc::new(PodInfo::new(labelled("db2", "1", 1, "a"))),
            ],
            &[budget("db", 1)],
        );
        assert_eq!((violating.len(), fine.len()), (1, 1));
        assert_eq!(violating[0].pod.metadata.name.as_deref(), Some("db2"));
    }
}
