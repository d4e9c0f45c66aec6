//! What one StatefulSet sync does, decided from a snapshot (pure, so it is unit tested):
//! upstream's updateStatefulSet order — make missing replicas and replace failed ones in
//! ordinal order, remove condemned pods from the highest ordinal down, then replace
//! outdated pods (RollingUpdate) from the highest ordinal down to the partition, at most
//! maxUnavailable at a time. OrderedReady stops at the first step it takes or the first
//! pod that is not yet Running, Ready and available; Parallel does all at once.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::history::REVISION_LABEL;
use crate::pods;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revision {
    Current,
    Update,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Create {
        ordinal: i32,
        revision: Revision,
    },
    /// A failed or succeeded replica, deleted to be made again.
    Recreate {
        name: String,
    },
    /// A pod beyond the replicas (scale down).
    Condemn {
        name: String,
        ordinal: i32,
    },
    /// An outdated pod, deleted to be made again at the update revision.
    Update {
        name: String,
    },
}

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Look again then (a pod becomes available after minReadySeconds).
    pub requeue: Option<Duration>,
}

pub fn replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.ordinals.as_ref()).and_then(|o| o.start).unwrap_or(0)
}

pub fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

fn parallel(set: &StatefulSet) -> bool {
    set.spec.as_ref().and_then(|s| s.pod_management_policy.as_deref()) == Some("Parallel")
}

fn rolling(set: &StatefulSet) -> bool {
    set.spec.as_ref().and_then(|s| s.update_strategy.as_ref()).and_then(|u| u.type_.as_deref()) != Some("OnDelete")
}

fn partition(set: &StatefulSet) -> i32 {
    rolling_update(set).and_then(|r| r.partition).unwrap_or(0)
}

fn rolling_update(set: &StatefulSet) -> Option<&k8s_openapi::api::apps::v1::RollingUpdateStatefulSetStrategy> {
    set.spec.as_ref()?.update_strategy.as_ref()?.rolling_update.as_ref()
}

/// maxUnavailable scaled against the replicas (rounded down, at least 1), as upstream.
pub fn max_unavailable(set: &StatefulSet) -> i32 {
    let value = rolling_update(set).and_then(|r| r.max_unavailable.as_ref());
    pods::scaled(value, replicas(set), false, 1).unwrap_or(1).max(1)
}

/// The ordinal in `<set>-<ordinal>`, for pods of this set.
pub fn ordinal(set_name: &str, pod_name: &str) -> Option<i32> {
    pod_name.strip_prefix(set_name)?.strip_prefix('-')?.parse().ok().filter(|o: &i32| *o >= 0)
}

/// Which revision a new pod at `ordinal` gets: below the partition it keeps the
/// current revision (RollingUpdate only).
pub fn revision_for(set: &StatefulSet, ordinal: i32) -> Revision {
    if rolling(set) && ordinal - start_ordinal(set) < partition(set) { Revision::Current } else { Revision::Update }
}

pub fn revision_of(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(REVISION_LABEL).map(String::as_str)
}

/// The steps of one sync. `pods` are the set's pods by ordinal.
pub fn plan(set: &StatefulSet, pods: &BTreeMap<i32, Pod>, update_revision: &str, now: Timestamp) -> Plan {
    let monotonic = !parallel(set);
    let (start, count) = (start_ordinal(set), replicas(set));
    let min_ready = min_ready_seconds(set);
    let mut plan = Plan::default();
    let healthy =
        |p: &Pod| !pods::is_terminating(p) && pods::is_running_and_ready(p) && pods::is_available(p, min_ready, now);
    let wait = |plan: &mut Plan, p: &Pod| {
        if let Some(d) = pods::until_available(p, min_ready, now) {
            plan.requeue = Some(plan.requeue.map_or(d, |r| r.min(d)));
        }
    };

    for ord in start..start + count {
        match pods.get(&ord) {
            None => {
                plan.steps.push(Step::Create { ordinal: ord, revision: revision_for(set, ord) });
                if monotonic {
                    return plan;
                }
            }
            Some(p) if pods::is_terminal(p) && !pods::is_terminating(p) => {
                plan.steps.push(Step::Recreate { name: p.metadata.name.clone().unwrap_or_default() });
                if monotonic {
                    return plan;
                }
            }
            Some(p) if !healthy(p) => {
                wait(&mut plan, p);
                if monotonic {
                    return plan;
                }
            }
            Some(_) => {}
        }
    }

    let condemned: Vec<(&i32, &Pod)> = pods.iter().filter(|(o, _)| **o < start || **o >= start + count).rev().collect();
    for (ord, p) in &condemned {
        if pods::is_terminating(p) {
            if monotonic {
                return plan;
            }
            continue;
        }
        // OrderedReady removes a pod only when every other pod is healthy.
        if monotonic && pods.iter().any(|(o, q)| o != *ord && !healthy(q)) {
            return plan;
        }
        plan.steps.push(Step::Condemn { name: p.metadata.name.clone().unwrap_or_default(), ordinal: **ord });
        if monotonic {
            return plan;
        }
    }
    if !condemned.is_empty() && monotonic {
        return plan;
    }

    if !rolling(set) {
        return plan;
    }
    let replicas: Vec<(i32, Option<&Pod>)> = (start..start + count).map(|o| (o, pods.get(&o))).collect();
    let unavailable = replicas.iter().filter(|(_, p)| !p.is_some_and(healthy)).count() as i32;
    let mut budget = max_unavailable(set) - unavailable;
    let floor = start + partition(set);
    for (ord, p) in replicas.iter().rev() {
        if *ord < floor || budget <= 0 {
            break;
        }
        let Some(p) = p else { continue };
        if revision_of(p) != Some(update_revision) && !pods::is_terminating(p) {
            plan.steps.push(Step::Update { name: p.metadata.name.clone().unwrap_or_default() });
            // An unhealthy pod is already counted as unavailable.
            if healthy(p) {
                budget -= 1;
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(spec: serde_json::Value) -> StatefulSet {
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec})).unwrap()
    }

    fn pod(ord: i32, revision: &str, ready: bool) -> Pod {
        let status = if ready { "True" } else { "False" };
        serde_json::from_value(json!({
            "metadata": {"name": format!("web-{ord}"), "labels": {REVISION_LABEL: revision}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status,
                "lastTransitionTime": "2020-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    fn pods(list: Vec<Pod>) -> BTreeMap<i32, Pod> {
        list.into_iter().map(|p| (ordinal("web", p.metadata.name.as_deref().unwrap()).unwrap(), p)).collect()
    }

    #[test]
    fn ordinals_parse_only_for_this_set() {
        assert_eq!(ordinal("web", "web-3"), Some(3));
        assert_eq!(ordinal("web", "web-x"), None);
        assert_eq!(ordinal("web", "webx-3"), None);
    }

    #[test]
    fn ordered_ready_makes_one_pod_at_a_time_and_waits_for_readiness() {
        let s = set(json!({"replicas": 3}));
        let now = Timestamp::now();
        assert_eq!(
            plan(&s, &pods(vec![]), "r1", now).steps,
            vec![Step::Create { ordinal: 0, revision: Revision::Update }]
        );
        assert!(plan(&s, &pods(vec![pod(0, "r1", false)]), "r1", now).steps.is_empty());
        assert_eq!(
            plan(&s, &pods(vec![pod(0, "r1", true)]), "r1", now).steps,
            vec![Step::Create { ordinal: 1, revision: Revision::Update }]
        );
    }

    #[test]
    fn parallel_makes_every_pod_at_once_from_the_start_ordinal() {
        let s = set(json!({"replicas": 3, "podManagementPolicy": "Parallel", "ordinals": {"start": 5}}));
        let steps = plan(&s, &pods(vec![]), "r1", Timestamp::now()).steps;
        let ords: Vec<i32> = steps
            .iter()
            .map(|s| match s {
                Step::Create { ordinal, .. } => *ordinal,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ords, vec![5, 6, 7]);
    }

    #[test]
    fn scale_down_removes_the_highest_ordinal_first() {
        let s = set(json!({"replicas": 1}));
        let p = pods(vec![pod(0, "r1", true), pod(1, "r1", true), pod(2, "r1", true)]);
        assert_eq!(
            plan(&s, &p, "r1", Timestamp::now()).steps,
            vec![Step::Condemn { name: "web-2".into(), ordinal: 2 }]
        );
    }

    #[test]
    fn rolling_update_respects_partition_and_max_unavailable() {
        let s = set(json!({"replicas": 4, "updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"partition": 1, "maxUnavailable": 2}}}));
        let p = pods((0..4).map(|o| pod(o, "r1", true)).collect());
        assert_eq!(
            plan(&s, &p, "r2", Timestamp::now()).steps,
            vec![Step::Update { name: "web-3".into() }, Step::Update { name: "web-2".into() }]
        );
        assert_eq!(revision_for(&s, 0), Revision::Current);
        assert_eq!(revision_for(&s, 1), Revision::Update);
        let on_delete = set(json!({"replicas": 2, "updateStrategy": {"type": "OnDelete"}}));
        let p = pods((0..2).map(|o| pod(o, "r1", true)).collect());
        assert!(plan(&on_delete, &p, "r2", Timestamp::now()).steps.is_empty());
    }

    #[test]
    fn min_ready_seconds_holds_ordered_creation_until_available() {
        let s = set(json!({"replicas": 2, "minReadySeconds": 30}));
        let mut p = pod(0, "r1", true);
        let now = Timestamp::now();
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        let planned = plan(&s, &pods(vec![p]), "r1", now);
        assert!(planned.steps.is_empty());
        assert!(planned.requeue.is_some_and(|d| d <= Duration::from_secs(30)));
    }
}
