//! One scheduling cycle: prepare the pod (each plugin's pre-filter state), filter nodes
//! round-robin until enough are feasible (upstream's percentageOfNodesToScore), score
//! them with weighted plugins, pick the best (ties at random). Failures are gathered
//! into upstream's diagnosis for the FailedScheduling message.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Toleration;

use crate::cache::Cache;
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::node_resources::Scoring;
use crate::plugins::{
    self, Failure, FilterResult, default_normalize, inter_pod_affinity, node_affinity, topology_spread,
};
use crate::selectors::{NodeTerm, Selector};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    PodTopologySpread,
    InterPodAffinity,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Score {
    TaintToleration,
    NodeAffinity,
    NodeResourcesFit,
    PodTopologySpread,
    InterPodAffinity,
    BalancedAllocation,
    ImageLocality,
}

impl Filter {
    pub const DEFAULT: [Filter; 8] = [
        Filter::NodeUnschedulable,
        Filter::NodeName,
        Filter::TaintToleration,
        Filter::NodeAffinity,
        Filter::NodePorts,
        Filter::NodeResourcesFit,
        Filter::PodTopologySpread,
        Filter::InterPodAffinity,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Filter::NodeUnschedulable => plugins::NODE_UNSCHEDULABLE,
            Filter::NodeName => plugins::NODE_NAME,
            Filter::TaintToleration => plugins::TAINT_TOLERATION,
            Filter::NodeAffinity => plugins::NODE_AFFINITY,
            Filter::NodePorts => plugins::NODE_PORTS,
            Filter::NodeResourcesFit => plugins::NODE_RESOURCES_FIT,
            Filter::PodTopologySpread => plugins::POD_TOPOLOGY_SPREAD,
            Filter::InterPodAffinity => plugins::INTER_POD_AFFINITY,
        }
    }
}

impl Score {
    /// Upstream's default score plugins and weights (kubescheduler.config.k8s.io/v1).
    pub const DEFAULT: [(Score, i64); 7] = [
        (Score::TaintToleration, 3),
        (Score::NodeAffinity, 2),
        (Score::NodeResourcesFit, 1),
        (Score::PodTopologySpread, 2),
        (Score::InterPodAffinity, 2),
        (Score::BalancedAllocation, 1),
        (Score::ImageLocality, 1),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Score::TaintToleration => plugins::TAINT_TOLERATION,
            Score::NodeAffinity => plugins::NODE_AFFINITY,
            Score::NodeResourcesFit => plugins::NODE_RESOURCES_FIT,
            Score::PodTopologySpread => plugins::POD_TOPOLOGY_SPREAD,
            Score::InterPodAffinity => plugins::INTER_POD_AFFINITY,
            Score::BalancedAllocation => plugins::BALANCED_ALLOCATION,
            Score::ImageLocality => plugins::IMAGE_LOCALITY,
        }
    }
}

/// A scheduling profile: which plugins run, with what weights and arguments.
#[derive(Clone, Debug)]
pub struct Profile {
    pub scheduler_name: String,
    pub filters: Vec<Filter>,
    pub scores: Vec<(Score, i64)>,
    pub scoring: Scoring,
    pub hard_pod_affinity_weight: i64,
    /// 0 picks upstream's adaptive percentage.
    pub percentage_of_nodes_to_score: u32,
    pub preemption: bool,
    pub scheduling_gates: bool,
    /// PodTopologySpread's default constraints (upstream's system defaults unless configured).
    pub spread_defaults: topology_spread::Defaults,
}

impl Profile {
    pub fn new(scheduler_name: &str) -> Profile {
        Profile {
            scheduler_name: scheduler_name.to_string(),
            filters: Filter::DEFAULT.to_vec(),
            scores: Score::DEFAULT.to_vec(),
            scoring: Scoring::default(),
            hard_pod_affinity_weight: inter_pod_affinity::DEFAULT_HARD_POD_AFFINITY_WEIGHT,
            percentage_of_nodes_to_score: 0,
            preemption: true,
            scheduling_gates: true,
            spread_defaults: topology_spread::Defaults::default(),
        }
    }

    fn has(&self, f: Filter) -> bool {
        self.filters.contains(&f)
    }

    /// How many feasible nodes are enough to pick from (upstream's numFeasibleNodesToFind).
    pub fn feasible_nodes_to_find(&self, all: usize) -> usize {
        const MIN_FEASIBLE: usize = 100;
        if all < MIN_FEASIBLE || self.percentage_of_nodes_to_score >= 100 {
            return all;
        }
        let percentage = match self.percentage_of_nodes_to_score {
            0 => (50usize.saturating_sub(all / 125)).max(5),
            p => p as usize,
        };
        (all * percentage / 100).max(MIN_FEASIBLE)
    }
}

/// Why a pod fits no node: reasons with how many nodes gave each.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    pub num_nodes: usize,
    pub reasons: BTreeMap<String, usize>,
    /// Each failed node (by name) with its failure, for preemption.
    pub failures: Vec<(String, Failure)>,
    pub post_filter_message: Option<String>,
}

impl Diagnosis {
    /// Upstream's FitError message: "0/5 nodes are available: 3 Insufficient cpu, ... ."
    pub fn message(&self) -> String {
        if self.num_nodes == 0 {
            return "no nodes available to schedule pods".into();
        }
        let mut reasons: Vec<String> = self.reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
        reasons.sort();
        let mut msg = format!("0/{} nodes are available:", self.num_nodes);
        if !reasons.is_empty() {
            msg.push_str(&format!(" {}.", reasons.join(", ")));
        }
        if let Some(post) = &self.post_filter_message {
            msg.push_str(&format!(" {post}"));
        }
        msg
    }
}

/// The pod with every plugin's pre-filter and pre-score state.
pub struct Prepared {
    pub info: Arc<PodInfo>,
    pub required: node_affinity::Required,
    pub preferred: Vec<(i64, NodeTerm)>,
    /// The pod's topology spread constraints, its own or the profile's defaults.
    pub spread_rules: topology_spread::Spread,
    pub spread: Option<topology_spread::FilterState>,
    pub terms: inter_pod_affinity::Terms,
    pub inter_pod: Option<inter_pod_affinity::FilterState>,
}

impl Prepared {
    /// `default_spread` is the selector of the workloads the pod belongs to, for the
    /// default topology spread constraints (`Workloads::default_spread_selector`).
    pub fn new(
        profile: &Profile,
        info: Arc<PodInfo>,
        cache: &Cache,
        namespaces: inter_pod_affinity::NamespaceLookup,
        default_spread: Option<&Selector>,
    ) -> Prepared {
        let pod = &info.pod;
        let required = node_affinity::Required::of(pod);
        let tolerations = tolerations(&info);
        let spread_rules = topology_spread::Spread::of(pod, &profile.spread_defaults, default_spread);
        let spread = profile
            .has(Filter::PodTopologySpread)
            .then(|| topology_spread::FilterState::new(pod, &spread_rules, &required, tolerations, cache.nodes()))
            .flatten();
        let terms = inter_pod_affinity::Terms::of(pod, namespaces);
        let inter_pod = profile
            .has(Filter::InterPodAffinity)
            .then(|| inter_pod_affinity::FilterState::new(pod, &terms, cache.nodes(), namespaces))
            .flatten();
        Prepared { preferred: node_affinity::preferred(pod), required, spread_rules, spread, terms, inter_pod, info }
    }

    pub fn filter(&self, profile: &Profile, node: &NodeInfo) -> FilterResult {
        let pod = &self.info;
        for f in &profile.filters {
            match f {
                Filter::NodeUnschedulable => plugins::node_unschedulable::filter(tolerations(pod), node)?,
                Filter::NodeName => {
                    let wanted = pod.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("");
                    if !wanted.is_empty() && wanted != node.name {
                        return Err(Failure::unresolvable("node(s) didn't match the requested node name"));
                    }
                }
                Filter::TaintToleration => plugins::taint_toleration::filter(tolerations(pod), node)?,
                Filter::NodeAffinity => node_affinity::filter(&self.required, node)?,
                Filter::NodePorts => plugins::node_ports::filter(pod, node)?,
                Filter::NodeResourcesFit => plugins::node_resources::fit(pod, node)?,
                Filter::PodTopologySpread => {
                    if let Some(s) = &self.spread {
                        s.filter(node)?
                    }
                }
                Filter::InterPodAffinity => {
                    if let Some(s) = &self.inter_pod {
                        s.filter(node)?
                    }
                }
            }
        }
        Ok(())
    }
}

pub fn tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default()
}

/// A small fast generator for tie-breaks (upstream picks among equal scores at random).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The scheduling algorithm's state between cycles.
pub struct Algorithm {
    next_start: usize,
    rng: Rng,
}

impl Default for Algorithm {
    fn default() -> Self {
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64);
        Algorithm { next_start: 0, rng: Rng::new(seed) }
    }
}

impl Algorithm {
    /// Finds a node for the prepared pod, or says why none fits.
    pub fn schedule(&mut self, profile: &Profile, pod: &Prepared, cache: &Cache) -> Result<String, Diagnosis> {
        let nodes = cache.nodes();
        let real = cache.node_count();
        if real == 0 {
            return Err(Diagnosis::default());
        }
        let want = profile.feasible_nodes_to_find(real);
        let mut feasible: Vec<&NodeInfo> = Vec::with_capacity(want.min(nodes.len()));
        let mut diagnosis = Diagnosis { num_nodes: real, ..Default::default() };
        let start = self.next_start % nodes.len();
        let mut processed = 0;
        for i in 0..nodes.len() {
            if feasible.len() >= want {
                break;
            }
            processed += 1;
            let node = &nodes[(start + i) % nodes.len()];
            if node.node.is_none() {
                continue;
            }
            // Room promised to nominated pods of at least this priority is not free.
            let result = match cache.with_nominated(node, pod.info.uid(), crate::preemption::priority(&pod.info.pod)) {
                Some(trial) => pod.filter(profile, &trial).and_then(|()| pod.filter(profile, node)),
                None => pod.filter(profile, node),
            };
            match result {
                Ok(()) => feasible.push(node),
                Err(failure) => {
                    for reason in &failure.reasons {
                        *diagnosis.reasons.entry(reason.to_string()).or_default() += 1;
                    }
                    diagnosis.failures.push((node.name.clone(), failure));
                }
            }
        }
        self.next_start = (start + processed) % nodes.len();
        match feasible.len() {
            0 => Err(diagnosis),
            1 => Ok(feasible[0].name.clone()),
            _ => {
                let scores = self.score(profile, pod, cache, &feasible);
                Ok(feasible[self.pick(&scores)].name.clone())
            }
        }
    }

    fn pick(&mut self, scores: &[i64]) -> usize {
        let (mut best, mut ties) = (0, 0u64);
        for (i, s) in scores.iter().enumerate() {
            if i == 0 || *s > scores[best] {
                best = i;
                ties = 1;
            } else if *s == scores[best] {
                ties += 1;
                if self.rng.below(ties) == 0 {
                    best = i;
                }
            }
        }
        best
    }

    /// Weighted sum of the normalized scores of every enabled score plugin.
    pub fn score(&mut self, profile: &Profile, pod: &Prepared, cache: &Cache, feasible: &[&NodeInfo]) -> Vec<i64> {
        let mut total = vec![0i64; feasible.len()];
        let info = &pod.info;
        for (plugin, weight) in &profile.scores {
            let scores: Option<Vec<i64>> = match plugin {
                Score::TaintToleration => {
                    let mut s: Vec<i64> =
                        feasible.iter().map(|n| plugins::taint_toleration::score(tolerations(info), n)).collect();
                    default_normalize(&mut s, true);
                    Some(s)
                }
                Score::NodeAffinity if pod.preferred.is_empty() => None,
                Score::NodeAffinity => {
                    let mut s: Vec<i64> = feasible.iter().map(|n| node_affinity::score(&pod.preferred, n)).collect();
                    default_normalize(&mut s, false);
                    Some(s)
                }
                Score::NodeResourcesFit => {
                    Some(feasible.iter().map(|n| plugins::node_resources::score(&profile.scoring, info, n)).collect())
                }
                Score::BalancedAllocation => {
                    Some(feasible.iter().map(|n| plugins::node_resources::balanced(info, n)).collect())
                }
                Score::ImageLocality => {
                    let images = plugins::image_locality::images(&info.pod);
                    let total_nodes = cache.node_count();
                    Some(
                        feasible
                            .iter()
                            .map(|n| {
                                plugins::image_locality::score(&images, n, |i| cache.image_node_count(i), total_nodes)
                            })
                            .collect(),
                    )
                }
                Score::PodTopologySpread => {
                    let rules = &pod.spread_rules;
                    topology_spread::scores(&info.pod, rules, &pod.required, tolerations(info), cache.nodes(), feasible)
                }
                Score::InterPodAffinity => inter_pod_affinity::scores(
                    &info.pod,
                    &pod.terms,
                    cache.nodes(),
                    feasible,
                    profile.hard_pod_affinity_weight,
                    &|_: &Selector| Vec::new(),
                ),
            };
            if let Some(scores) = scores {
                for (t, s) in total.iter_mut().zip(scores) {
                    *t += s * weight;
                }
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    #[test]
    fn adaptive_percentage_of_nodes() {
        let p = Profile::new("default-scheduler");
        assert_eq!(p.feasible_nodes_to_find(50), 50);
        assert_eq!(p.feasible_nodes_to_find(1000), 420);
        assert_eq!(p.feasible_nodes_to_find(5000), 500);
        assert_eq!(p.feasible_nodes_to_find(100_000), 5000);
    }

    #[test]
    fn message_shape() {
        let mut d = Diagnosis { num_nodes: 5, ..Default::default() };
        d.reasons.insert("Insufficient cpu".into(), 3);
        d.reasons.insert("node(s) had untolerated taint {key: value}".into(), 2);
        d.post_filter_message =
            Some("preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.".into());
        assert_eq!(
            d.message(),
            "0/5 nodes are available: 2 node(s) had untolerated taint {key: value}, 3 Insufficient cpu. \
             preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
        );
    }

    fn cache_with(nodes: &[(&str, &str)]) -> Cache {
        let mut cache = Cache::default();
        for (name, cpu) in nodes {
            let node: Node = serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}))
            .unwrap();
            cache.set_node(Arc::new(node));
        }
        cache
    }

    #[test]
    fn picks_the_least_allocated_node_and_explains_failures() {
        let cache = cache_with(&[("small", "1"), ("big", "8")]);
        let profile = Profile::new("default-scheduler");
        let pod = |cpu: &str| {
            let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}}))
            .unwrap();
            Prepared::new(&profile, Arc::new(PodInfo::new(Arc::new(p))), &cache, &|_: &Selector| Vec::new(), None)
        };
        let mut algo = Algorithm::default();
        assert_eq!(algo.schedule(&profile, &pod("500m"), &cache).unwrap(), "big");
        let d = algo.schedule(&profile, &pod("16"), &cache).unwrap_err();
        assert_eq!(d.message(), "0/2 nodes are available: 2 Insufficient cpu.");
    }
}
