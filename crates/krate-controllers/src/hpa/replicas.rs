//! The replica calculation for resource metrics, as upstream's ReplicaCalculator
//! (GetResourceReplicas for utilization targets, GetRawResourceReplicas for average
//! value targets): pods are grouped into ready, unready (pending, not ready, or still
//! warming up their CPU), missing (no metrics) and ignored (deleted or failed); a change
//! within the tolerance is no change; missing pods count as 100% of their request on a
//! scale-down and 0% on a scale-up, unready ones as 0% on a scale-up, and a result that
//! would reverse the direction is dropped.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

use super::quantity;

/// One pod's usage from the metrics API, in milli-units.
#[derive(Clone, Debug, PartialEq)]
pub struct PodMetric {
    pub value: i64,
    /// When the sample was taken and over how long, in Unix milliseconds.
    pub timestamp_ms: i64,
    pub window_ms: i64,
}

pub type PodMetrics = BTreeMap<String, PodMetric>;

/// How far the usage ratio may stray from 1 without a change (upstream's
/// --horizontal-pod-autoscaler-tolerance, or behavior's per-direction tolerance).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerances {
    pub scale_down: f64,
    pub scale_up: f64,
}

impl Tolerances {
    pub fn within(&self, ratio: f64) -> bool {
        ratio >= 1.0 - self.scale_down && ratio <= 1.0 + self.scale_up
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Calculator {
    pub tolerances: Tolerances,
    /// Upstream's --horizontal-pod-autoscaler-cpu-initialization-period (5 min).
    pub cpu_initialization_period_ms: i64,
    /// Upstream's --horizontal-pod-autoscaler-initial-readiness-delay (30 s).
    pub initial_readiness_delay_ms: i64,
}

/// What a resource metric target asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// Percent of the pods' requests.
    Utilization(i32),
    /// Milli-units per pod.
    AverageValue(i64),
}

/// The calculation's result: the replica count, the current utilization (for
/// utilization targets) and the average raw value per pod (milli-units).
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    pub replicas: i32,
    pub utilization: Option<i32>,
    pub average: i64,
}

#[derive(Debug, Default, PartialEq)]
pub struct Groups {
    pub ready: usize,
    pub unready: BTreeSet<String>,
    pub missing: BTreeSet<String>,
    pub ignored: BTreeSet<String>,
}

fn ms(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    t.0.as_millisecond()
}

/// Upstream's groupPods.
pub fn group_pods(pods: &[&Pod], metrics: &PodMetrics, resource: &str, calc: &Calculator, now_ms: i64) -> Groups {
    let mut g = Groups::default();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let phase = status.phase.as_deref().unwrap_or("");
        if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
            g.ignored.insert(name);
            continue;
        }
        if phase == "Pending" {
            g.unready.insert(name);
            continue;
        }
        let Some(metric) = metrics.get(&name) else {
            g.missing.insert(name);
            continue;
        };
        if resource == "cpu" {
            let ready = status.conditions.as_deref().unwrap_or_default().iter().find(|c| c.type_ == "Ready");
            let unready = match (ready, status.start_time.as_ref()) {
                (Some(c), Some(start)) => {
                    let transition = c.last_transition_time.as_ref().map_or(0, ms);
                    if ms(start) + calc.cpu_initialization_period_ms > now_ms {
                        // Still warming up: only a sample taken wholly after becoming ready counts.
                        c.status == "False" || metric.timestamp_ms < transition + metric.window_ms
                    } else {
                        // Ignore pods that have never been ready.
                        c.status == "False" && ms(start) + calc.initial_readiness_delay_ms > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(name);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// Each pod's request for `resource` (milli-units): the pod-level request if set, else
/// the sum over its containers and restartable init containers; a container without one
/// is an error, as upstream.
pub fn pod_requests(pods: &[&Pod], resource: &str) -> Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(spec) = pod.spec.as_ref() else { continue };
        let pod_level = spec.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get(resource));
        if let Some(q) = pod_level {
            out.insert(name, quantity::milli(&q.0).unwrap_or(0));
            continue;
        }
        let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut sum = 0;
        for c in spec.containers.iter().chain(sidecars) {
            match c.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get(resource)) {
                Some(q) => sum += quantity::milli(&q.0).unwrap_or(0),
                None => return Err(format!("missing request for {resource} in container {} of Pod {name}", c.name)),
            }
        }
        out.insert(name, sum);
    }
    Ok(out)
}

/// Upstream's GetResourceUtilizationRatio: (ratio, utilization %, average raw value).
fn utilization_ratio(
    metrics: &PodMetrics,
    requests: &BTreeMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut used, mut requested, mut n) = (0i64, 0i64, 0i64);
    for (name, m) in metrics {
        if let Some(r) = requests.get(name) {
            used += m.value;
            requested += r;
            n += 1;
        }
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = (used * 100 / requested) as i32;
    Ok((utilization as f64 / target as f64, utilization, used / n))
}

/// Upstream's GetMetricUsageRatio: (ratio, average).
fn usage_ratio(metrics: &PodMetrics, target: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let average = total / metrics.len() as i64;
    (average as f64 / target as f64, average)
}

fn ceil(x: f64) -> i32 {
    x.ceil().min(i32::MAX as f64) as i32
}

impl Calculator {
    /// The replicas for a resource metric of the pods `pods` (those the target's
    /// selector picks) given their `metrics`.
    pub fn resource_replicas(
        &self,
        current: i32,
        target: Target,
        resource: &str,
        pods: &[&Pod],
        mut metrics: PodMetrics,
        now_ms: i64,
    ) -> Result<Proposal, String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let g = group_pods(pods, &metrics, resource, self, now_ms);
        metrics.retain(|name, _| !g.ignored.contains(name) && !g.unready.contains(name));
        let requests = match target {
            Target::Utilization(_) => pod_requests(pods, resource)?,
            Target::AverageValue(_) => BTreeMap::new(),
        };
        if metrics.is_empty() {
            return Err("did not receive metrics for any ready pods".into());
        }
        let ratio_of = |metrics: &PodMetrics| -> Result<(f64, Option<i32>, i64), String> {
            match target {
                Target::Utilization(t) => utilization_ratio(metrics, &requests, t).map(|(r, u, a)| (r, Some(u), a)),
                Target::AverageValue(t) => {
                    let (r, a) = usage_ratio(metrics, t);
                    Ok((r, None, a))
                }
            }
        };
        let (ratio, utilization, average) = ratio_of(&metrics)?;
        let keep = Proposal { replicas: current, utilization, average };
        let rebalance_unready = !g.unready.is_empty() && ratio > 1.0;
        if !rebalance_unready && g.missing.is_empty() {
            if self.tolerances.within(ratio) {
                return Ok(keep);
            }
            return Ok(Proposal { replicas: ceil(ratio * g.ready as f64), ..keep });
        }
        if !g.missing.is_empty() {
            for name in &g.missing {
                // A scale-down assumes the missing pods use what they asked for (the
                // target, for plain values); a scale-up assumes they use nothing.
                let value = match target {
                    _ if ratio < 1.0 => match target {
                        Target::Utilization(_) => requests.get(name).copied().unwrap_or(0),
                        Target::AverageValue(t) => t,
                    },
                    // At exactly 100% utilization upstream leaves the missing pods out.
                    Target::Utilization(_) if ratio == 1.0 => continue,
                    _ => 0,
                };
                metrics.insert(name.clone(), PodMetric { value, timestamp_ms: 0, window_ms: 0 });
            }
        }
        if rebalance_unready {
            for name in &g.unready {
                metrics.insert(name.clone(), PodMetric { value: 0, timestamp_ms: 0, window_ms: 0 });
            }
        }
        let (new_ratio, _, _) = ratio_of(&metrics)?;
        if self.tolerances.within(new_ratio) || (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0) {
            return Ok(keep);
        }
        let replicas = ceil(new_ratio * metrics.len() as f64);
        if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
            return Ok(keep);
        }
        Ok(Proposal { replicas, ..keep })
    }
}

#[cfg(test)]
mod tests {
    //! Cases from upstream's replica_calculator_test.go, as facts: two containers per
    //! pod each requesting 1 CPU, metric levels per container, a 2 minute CPU
    //! initialization period and a 10 second readiness delay as upstream's tests use.
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;
    const HOT: i64 = NOW - 10_000;
    const COOL: i64 = NOW - 180_000;

    fn calc() -> Calculator {
        Calculator {
            tolerances: Tolerances { scale_down: 0.1, scale_up: 0.1 },
            cpu_initialization_period_ms: 120_000,
            initial_readiness_delay_ms: 10_000,
        }
    }

    fn time(ms: i64) -> String {
        jiff::Timestamp::from_millisecond(ms).unwrap().to_string()
    }

    struct PodSpec {
        ready: bool,
        phase: &'static str,
        start: i64,
        deleting: bool,
        request: &'static str,
    }

    fn spec() -> PodSpec {
        PodSpec { ready: true, phase: "Running", start: COOL, deleting: false, request: "1.0" }
    }

    fn pod(i: usize, s: &PodSpec) -> Pod {
        let res = json!({"requests": {"cpu": s.request}});
        let mut p = json!({
            "metadata": {"name": format!("test-pod-{i}")},
            "spec": {"containers": [{"name": "container1", "resources": res}, {"name": "container2", "resources": res}]},
            "status": {"phase": s.phase, "startTime": time(s.start), "conditions": [
                {"type": "Ready", "status": if s.ready { "True" } else { "False" }, "lastTransitionTime": time(s.start)}
            ]},
        });
        if s.deleting {
            p["metadata"]["deletionTimestamp"] = json!(time(NOW));
        }
        serde_json::from_value(p).unwrap()
    }

    /// Pods `specs` with per-pod usage `levels` (each container uses the level, as
    /// upstream's makePodMetricLevels), the first `levels.len()` pods having metrics.
    fn run(current: i32, specs: &[PodSpec], levels: &[i64], target: Target) -> Result<Proposal, String> {
        let pods: Vec<Pod> = specs.iter().enumerate().map(|(i, s)| pod(i, s)).collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let metrics = levels
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("test-pod-{i}"), PodMetric { value: 2 * l, timestamp_ms: NOW, window_ms: 60_000 }))
            .collect();
        calc().resource_replicas(current, target, "cpu", &refs, metrics, NOW)
    }

    fn pods(n: usize) -> Vec<PodSpec> {
        (0..n).map(|_| spec()).collect()
    }

    fn readiness(r: &[bool]) -> Vec<PodSpec> {
        r.iter().map(|&ready| PodSpec { ready, ..spec() }).collect()
    }

    fn proposal(replicas: i32, utilization: i32, per_container: i64) -> Proposal {
        Proposal { replicas, utilization: Some(utilization), average: 2 * per_container }
    }

    #[test]
    fn scale_up_and_down() {
        assert_eq!(run(3, &pods(3), &[300, 500, 700], Target::Utilization(30)), Ok(proposal(5, 50, 500)));
        assert_eq!(run(5, &pods(5), &[100, 300, 500, 250, 250], Target::Utilization(50)), Ok(proposal(3, 28, 280)));
    }

    #[test]
    fn unready_and_warming_pods_scale_up_less_or_not_at_all() {
        let r = readiness(&[false, true, true]);
        assert_eq!(run(3, &r, &[300, 500, 700], Target::Utilization(30)), Ok(proposal(4, 60, 600)), "unready");
        let hot = vec![PodSpec { start: HOT, ..spec() }, spec(), spec()];
        assert_eq!(run(3, &hot, &[300, 500, 700], Target::Utilization(30)), Ok(proposal(4, 60, 600)), "hot CPU");
        let r = readiness(&[true, false, false]);
        assert_eq!(run(3, &r, &[400, 500, 700], Target::Utilization(30)), Ok(proposal(3, 40, 400)), "no scale");
    }

    #[test]
    fn failed_deleted_and_pending_pods_are_left_out() {
        let failed = |phase| PodSpec { ready: false, phase, ..spec() };
        let specs = vec![spec(), spec(), failed("Failed"), failed("Failed")];
        assert_eq!(run(2, &specs, &[500, 700], Target::Utilization(30)), Ok(proposal(4, 60, 600)));
        let deleting = || PodSpec { ready: false, deleting: true, ..spec() };
        let specs = vec![spec(), spec(), deleting(), deleting()];
        assert_eq!(run(2, &specs, &[500, 700], Target::Utilization(30)), Ok(proposal(4, 60, 600)));
        let mut specs = vec![spec()];
        specs.extend((0..4).map(|_| failed("Pending")));
        assert_eq!(run(5, &specs, &[100], Target::Utilization(50)), Ok(proposal(1, 10, 100)));
        let r = readiness(&[true, true, true, false, false]);
        assert_eq!(run(5, &r, &[100, 300, 500, 250, 250], Target::Utilization(50)), Ok(proposal(2, 30, 300)));
    }

    #[test]
    fn changes_within_the_tolerance_are_no_change() {
        let specs: Vec<PodSpec> = ["0.9", "1.0", "1.1"].iter().map(|request| PodSpec { request, ..spec() }).collect();
        assert_eq!(run(3, &specs, &[1010, 1030, 1020], Target::Utilization(100)), Ok(proposal(3, 102, 1020)));
    }

    #[test]
    fn missing_metrics() {
        assert_eq!(run(2, &pods(2), &[1000], Target::Utilization(100)), Ok(proposal(2, 100, 1000)), "eq");
        assert_eq!(run(2, &pods(2), &[1900], Target::Utilization(100)), Ok(proposal(2, 190, 1900)), "gt");
        assert_eq!(run(2, &pods(2), &[600], Target::Utilization(100)), Ok(proposal(2, 60, 600)), "lt");
        let r = readiness(&[false, true, true]);
        assert_eq!(run(3, &r, &[100, 450], Target::Utilization(50)), Ok(proposal(3, 45, 450)), "unready change");
        assert_eq!(run(3, &r, &[100, 2000], Target::Utilization(50)), Ok(proposal(4, 200, 2000)), "unready up");
        let r = readiness(&[false, true, true, true]);
        assert_eq!(run(4, &r, &[100, 100, 100], Target::Utilization(50)), Ok(proposal(3, 10, 100)), "unready down");
    }

    #[test]
    fn errors_name_what_is_missing() {
        assert_eq!(
            run(1, &[PodSpec { request: "", ..spec() }][..0], &[200], Target::Utilization(100)),
            Err("no pods returned by selector while calculating replica count".into())
        );
        let pods: Vec<Pod> = vec![
            serde_json::from_value(json!({
                "metadata": {"name": "test-pod-0"},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Running"},
            }))
            .unwrap(),
        ];
        let metrics = [("test-pod-0".into(), PodMetric { value: 1, timestamp_ms: NOW, window_ms: 60_000 })].into();
        let refs: Vec<&Pod> = pods.iter().collect();
        let e = calc().resource_replicas(1, Target::Utilization(100), "memory", &refs, metrics, NOW).unwrap_err();
        assert_eq!(e, "missing request for memory in container c of Pod test-pod-0");
    }

    #[test]
    fn average_value_targets() {
        // 5 pods averaging 560 milli against 1000 per pod.
        assert_eq!(
            run(5, &pods(5), &[100, 300, 500, 250, 250], Target::AverageValue(1000)),
            Ok(Proposal { replicas: 3, utilization: None, average: 560 })
        );
        assert_eq!(
            run(3, &pods(3), &[300, 500, 700], Target::AverageValue(500)),
            Ok(Proposal { replicas: 6, utilization: None, average: 1000 })
        );
    }
}
