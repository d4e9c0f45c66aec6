//! The taint eviction controller (upstream's taint-eviction-controller, acting as
//! node-controller as upstream's does): a pod on a node with NoExecute taints it does not
//! tolerate is deleted at once; one that tolerates them all for a while
//! (tolerationSeconds) is deleted when the shortest of those runs out, counted from when
//! the taint was added. Before deleting, the pod gets the DisruptionTarget condition
//! (reason DeletionByTaintManager).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::{Context, Error};

const NAME: &str = "taint-eviction-controller";

pub use krate_client::v1helpers::tolerates;

/// What to do with a pod given its node's NoExecute taints.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Keep,
    EvictNow,
    /// Evict at this time, unless the taints change first.
    EvictAt(Timestamp),
}

pub fn verdict(tolerations: &[Toleration], taints: &[Taint], now: Timestamp) -> Verdict {
    let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
    if no_execute.is_empty() {
        return Verdict::Keep;
    }
    let mut deadline: Option<Timestamp> = None;
    for taint in no_execute {
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Verdict::EvictNow;
        }
        // Forever if any matching toleration has no limit; else the shortest (upstream's
        // getMinTolerationTime takes the minimum over all used tolerations).
        let limits: Vec<i64> = matching.iter().filter_map(|t| t.toleration_seconds).collect();
        if limits.len() < matching.len() {
            continue;
        }
        let seconds = limits.into_iter().min().unwrap_or(0).max(0);
        let since = taint.time_added.as_ref().map(|t| t.0).unwrap_or(now);
        let at = since.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds)).unwrap_or(since);
        deadline = Some(deadline.map_or(at, |d| d.min(at)));
    }
    match deadline {
        None => Verdict::Keep,
        Some(at) if at <= now => Verdict::EvictNow,
        Some(at) => Verdict::EvictAt(at),
    }
}

struct State {
    write: kube::Client,
    nodes: Store<Node>,
    recorder: Recorder,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("node-controller");
    let (pods, nodes) = (ctx.informers.get::<Pod>(), ctx.informers.get::<Node>());
    futures::join!(pods.ready(), nodes.ready());
    let state = Arc::new(State {
        write: clients.write.clone(),
        nodes: nodes.store(),
        recorder: Recorder::new(clients.write, Reporter { controller: NAME.into(), instance: None }),
    });
    let pod_store = pods.store();
    Controller::for_shared_stream(pods.subscribe(), pods.store())
        .watches_shared_stream(nodes.subscribe(), move |node: Arc<Node>| {
            // Only nodes with NoExecute taints concern their pods (and a node losing its
            // taint cancels nothing: the pod's requeue finds it gone).
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.effect == "NoExecute"));
            let name = node.name_any();
            let pods: Vec<ObjectRef<Pod>> = if tainted {
                pod_store
                    .state()
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
                    .map(|p| ObjectRef::from_obj(p.as_ref()))
                    .collect()
            } else {
                Vec::new()
            };
            pods
        })
        .run(
            |pod, state: Arc<State>| async move {
                let result = reconcile(&pod, &state).await;
                crate::metrics::record(NAME, result.is_ok());
                result
            },
            |pod, error, _| {
                tracing::warn!(controller = NAME, pod = %pod.name_any(), %error, "eviction failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

async fn reconcile(pod: &Pod, state: &State) -> Result<Action, Error> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
        return Ok(Action::await_change());
    };
    let Some(node) = state.nodes.get(&ObjectRef::new(&node_name)) else { return Ok(Action::await_change()) };
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
    let now = Timestamp::now();
    match verdict(&tolerations, &taints, now) {
        Verdict::Keep => Ok(Action::await_change()),
        Verdict::EvictAt(at) => {
            let wait = now.duration_until(at).unsigned_abs();
            Ok(Action::requeue(wait.max(Duration::from_millis(50))))
        }
        Verdict::EvictNow => {
            evict(pod, state).await?;
            Ok(Action::await_change())
        }
    }
}

async fn evict(pod: &Pod, state: &State) -> Result<(), Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(state.write.clone(), &namespace);
    let event = Event {
        type_: EventType::Normal,
        reason: "TaintManagerEviction".into(),
        note: Some(format!("Marking for deletion Pod {namespace}/{name}")),
        action: "Delete".into(),
        secondary: None,
    };
    if let Err(error) = state.recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(controller = NAME, %error, "recording TaintManagerEviction");
    }
    // The DisruptionTarget condition tells Jobs' pod failure policies why the pod went.
    let mut conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    conditions.retain(|c| c.type_ != "DisruptionTarget");
    conditions.push(k8s_openapi::api::core::v1::PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("DeletionByTaintManager".into()),
        message: Some("Taint manager: deleting due to NoExecute taint".into()),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now())),
        ..Default::default()
    });
    let patch = json!({"status": {"conditions": conditions}});
    match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(controller = NAME, pod = %name, namespace = %namespace, "evicting pod from a NoExecute-tainted node");
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn taint(key: &str, added: Timestamp) -> Taint {
        Taint { key: key.into(), effect: "NoExecute".into(), time_added: Some(Time(added)), value: None }
    }

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            ..Default::default()
        }
    }

    #[test]
    fn untolerated_taints_evict_at_once_and_tolerated_ones_after_their_seconds() {
        let now = Timestamp::now();
        let taints = [taint("node.kubernetes.io/unreachable", now)];
        assert_eq!(verdict(&[], &taints, now), Verdict::EvictNow);
        let for_a_while = [toleration("node.kubernetes.io/unreachable", Some(30))];
        let at = now.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(30)).unwrap();
        assert_eq!(verdict(&for_a_while, &taints, now), Verdict::EvictAt(at));
        assert_eq!(verdict(&for_a_while, &taints, at), Verdict::EvictNow);
        let forever = [toleration("node.kubernetes.io/unreachable", None)];
        assert_eq!(verdict(&forever, &taints, now), Verdict::Keep);
        assert_eq!(verdict(&[], &[], now), Verdict::Keep);
    }

    #[test]
    fn toleration_matching_follows_operator_key_and_effect() {
        let t = Taint { key: "k".into(), value: Some("v".into()), effect: "NoExecute".into(), time_added: None };
        let eq = |v: &str| Toleration {
            key: Some("k".into()),
            operator: Some("Equal".into()),
            value: Some(v.into()),
            ..Default::default()
        };
        assert!(tolerates(&eq("v"), &t));
        assert!(!tolerates(&eq("w"), &t));
        let all = Toleration { operator: Some("Exists".into()), ..Default::default() };
        assert!(tolerates(&all, &t));
        let other_effect = Toleration { effect: Some("NoSchedule".into()), ..all };
        assert!(!tolerates(&other_effect, &t));
    }
}
