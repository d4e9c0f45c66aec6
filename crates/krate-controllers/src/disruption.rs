//! The disruption controller (upstream's pkg/controller/disruption): keeps each
//! PodDisruptionBudget's status — expected and healthy pods, how many disruptions are
//! allowed now, the evictions the API server has announced (disruptedPods) until their
//! pods are gone, and the DisruptionAllowed condition. The eviction subresource on the
//! API server reads this status and decrements it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::events::Events;
use crate::{Context, Error, Informer, pods};

const CONTROLLER: &str = "disruption";
/// How long an announced eviction counts before the pod must be gone (upstream's
/// DeletionTimeout).
const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);
/// Scales change without a pod changing; look again this often (upstream watches them).
const RESYNC: Duration = Duration::from_secs(30);

struct State {
    write: kube::Client,
    events: Events,
    pods: Informer<Pod>,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("disruption-controller");
    let budgets = ctx.informers.get::<PodDisruptionBudget>();
    let state = Arc::new(State {
        events: Events::new(clients.write.clone(), "controllermanager"),
        write: clients.write,
        pods: ctx.informers.get(),
    });
    let budget_store = budgets.store();
    Controller::for_shared_stream(budgets.subscribe(), budgets.store())
        .watches_shared_stream(state.pods.subscribe(), move |pod: Arc<Pod>| budgets_for(&budget_store, &pod))
        .run(
            |pdb, state: Arc<State>| async move {
                let result = reconcile(&pdb, &state).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |pdb, error: &Error, _| {
                tracing::warn!(controller = CONTROLLER, pdb = %pdb.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// policy/v1: a missing selector matches nothing, an empty one every pod.
pub fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else { return false };
    let exact = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    exact
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or(&[]);
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => !value.is_some_and(|v| values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

fn budgets_for(store: &Store<PodDisruptionBudget>, pod: &Pod) -> Vec<ObjectRef<PodDisruptionBudget>> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    store
        .state()
        .iter()
        .filter(|b| b.metadata.namespace == pod.metadata.namespace)
        .filter(|b| selects(b.spec.as_ref().and_then(|s| s.selector.as_ref()), labels))
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

async fn reconcile(pdb: &PodDisruptionBudget, st: &State) -> Result<Action, Error> {
    if pdb.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    st.pods.ready().await;
    let ns = pdb.namespace().unwrap_or_default();
    let spec = pdb.spec.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let pods: Vec<Pod> = st
        .pods
        .store()
        .state()
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(&ns))
        .filter(|p| selects(spec.selector.as_ref(), p.metadata.labels.as_ref().unwrap_or(&empty)))
        .map(|p| (**p).clone())
        .collect();
    if pods.is_empty() {
        st.events.normal(pdb, "NoPods", "No matching pods found".into()).await;
    }
    let now = Timestamp::now();
    let status = match expected_and_desired(pdb, &pods, st).await {
        Ok((expected, desired)) => {
            let (disrupted, recheck) = still_disrupted(pdb, &pods, now);
            let healthy = pods
                .iter()
                .filter(|p| !pods::is_terminating(p) && pods::is_ready(p))
                .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or("")))
                .count() as i32;
            let mut s = budget_status(pdb, expected, desired, healthy, now);
            s.disrupted_pods = (!disrupted.is_empty()).then_some(disrupted);
            Ok((s, recheck))
        }
        Err(failure) => Err(failure),
    };
    let (status, recheck) = match status {
        Ok(ok) => ok,
        Err(message) => {
            // Fail safe: no disruptions while the budget cannot be worked out.
            let mut s = pdb.status.clone().unwrap_or_default();
            s.disruptions_allowed = Some(0);
            s.observed_generation = pdb.metadata.generation;
            set_condition(&mut s, "False", "SyncFailed", &message, pdb.metadata.generation, now);
            (s, None)
        }
    };
    if pdb.status.as_ref() != Some(&status) {
        let mut updated = pdb.clone();
        updated.status = Some(status);
        let api: Api<PodDisruptionBudget> = Api::namespaced(st.write.clone(), &ns);
        match api.replace_status(&pdb.name_any(), &PostParams::default(), &updated).await {
            Ok(_) => {}
            // The eviction subresource wrote it first; the change brings another sync.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::requeue(recheck.map_or(RESYNC, |r| r.min(RESYNC))))
}

/// The status for these counts, keeping what does not change.
pub fn budget_status(
    pdb: &PodDisruptionBudget,
    expected: i32,
    desired: i32,
    healthy: i32,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let mut s = pdb.status.clone().unwrap_or_default();
    let allowed = if expected <= 0 { 0 } else { (healthy - desired).max(0) };
    s.current_healthy = Some(healthy);
    s.desired_healthy = Some(desired);
    s.expected_pods = Some(expected);
    s.disruptions_allowed = Some(allowed);
    s.observed_generation = pdb.metadata.generation;
    let (status, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
    set_condition(&mut s, status, reason, "", pdb.metadata.generation, now);
    s
}

fn set_condition(
    s: &mut PodDisruptionBudgetStatus,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    let conditions = s.conditions.get_or_insert_default();
    let previous = conditions.iter().find(|c| c.type_ == "DisruptionAllowed");
    let transition =
        previous.filter(|c| c.status == status).map(|c| c.last_transition_time.clone()).unwrap_or(Time(now));
    conditions.retain(|c| c.type_ != "DisruptionAllowed");
    conditions.push(Condition {
        type_: "DisruptionAllowed".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: transition,
    });
}

/// Announced evictions still pending: their pod exists, is not being deleted, and the
/// announcement is under two minutes old. With when to look again.
fn still_disrupted(
    pdb: &PodDisruptionBudget,
    pods: &[Pod],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<Duration>) {
    let announced = pdb.status.as_ref().and_then(|s| s.disrupted_pods.clone()).unwrap_or_default();
    let mut recheck: Option<Duration> = None;
    let kept = announced
        .into_iter()
        .filter(|(name, at)| {
            let pod = pods.iter().find(|p| p.metadata.name.as_deref() == Some(name.as_str()));
            let expires = at.0 + DELETION_TIMEOUT;
            let keep = pod.is_some_and(|p| !pods::is_terminating(p)) && expires > now;
            if keep {
                let d = expires.duration_since(now).unsigned_abs();
                recheck = Some(recheck.map_or(d, |r| r.min(d)));
            }
            keep
        })
        .collect();
    (kept, recheck)
}

/// expectedPods and desiredHealthy, as upstream: an integer minAvailable counts the
/// selected pods; a percentage or maxUnavailable counts the replicas of the pods'
/// controllers (their scale).
async fn expected_and_desired(pdb: &PodDisruptionBudget, pods: &[Pod], st: &State) -> Result<(i32, i32), String> {
    let spec = pdb.spec.clone().unwrap_or_default();
    match (&spec.max_unavailable, &spec.min_available) {
        (Some(max), _) => {
            let expected = controllers_scale(pdb, pods, st).await?;
            let max = pods::scaled(Some(max), expected, true, 0)?;
            Ok((expected, (expected - max).max(0)))
        }
        (None, Some(IntOrString::Int(min))) => Ok((pods.len() as i32, *min)),
        (None, Some(min @ IntOrString::String(_))) => {
            let expected = controllers_scale(pdb, pods, st).await?;
            Ok((expected, pods::scaled(Some(min), expected, true, 0)?))
        }
        (None, None) => Ok((pods.len() as i32, 0)),
    }
}

/// The summed replicas of the pods' controllers, each counted once (two ReplicaSets of
/// one Deployment count as the Deployment, once).
async fn controllers_scale(pdb: &PodDisruptionBudget, pods: &[Pod], st: &State) -> Result<i32, String> {
    let mut seen = std::collections::HashSet::new();
    let mut scales: HashMap<String, i32> = HashMap::new();
    for pod in pods {
        let Some(owner) = pod.owner_references().iter().find(|r| r.controller == Some(true)) else {
            let message = format!("found no controllers for pod {:?}", pod.name_any());
            st.events.warning(pdb, "NoControllers", message.clone()).await;
            return Err(message);
        };
        if !seen.insert(owner.uid.clone()) {
            continue;
        }
        let (uid, replicas) = scale_of(&pod.namespace().unwrap_or_default(), owner, st)
            .await
            .map_err(|e| format!("Failed to calculate the number of expected pods: {e}"))?;
        scales.insert(uid, replicas);
    }
    Ok(scales.values().sum())
}

/// A controller's replicas through its scale subresource; a ReplicaSet run by a
/// Deployment counts as the Deployment. Returns the uid the replicas belong to.
async fn scale_of(ns: &str, owner: &OwnerReference, st: &State) -> Result<(String, i32), kube::Error> {
    let mut owner = owner.clone();
    if owner.kind == "ReplicaSet" && owner.api_version == "apps/v1" {
        let rs = Api::<ReplicaSet>::namespaced(st.write.clone(), ns).get(&owner.name).await?;
        if let Some(deployment) =
            rs.owner_references().iter().find(|r| r.controller == Some(true) && r.kind == "Deployment")
        {
            owner = deployment.clone();
        }
    }
    let (group, version) = owner.api_version.rsplit_once('/').unwrap_or(("", owner.api_version.as_str()));
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: owner.api_version.clone(),
        kind: owner.kind.clone(),
        plural: format!("{}s", owner.kind.to_lowercase()),
    };
    // As the controller itself: its role may read every */scale.
    let api: Api<DynamicObject> = Api::namespaced_with(st.write.clone(), ns, &resource);
    let scale: DynamicObject = api.get_subresource("scale", &owner.name).await?;
    let replicas = scale.data.pointer("/spec/replicas").and_then(|v| v.as_i64()).unwrap_or(0) as i32;
    Ok((owner.uid.clone(), replicas))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_follow_policy_v1() {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        assert!(!selects(None, &labels));
        assert!(selects(Some(&LabelSelector::default()), &labels));
        let sel: LabelSelector =
            serde_json::from_value(json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}))
                .unwrap();
        assert!(selects(Some(&sel), &labels));
        let other: LabelSelector = serde_json::from_value(json!({"matchLabels": {"app": "db"}})).unwrap();
        assert!(!selects(Some(&other), &labels));
    }

    #[test]
    fn disruptions_allowed_and_the_condition_follow_the_counts() {
        let pdb: PodDisruptionBudget =
            serde_json::from_value(json!({"metadata": {"name": "b", "generation": 2}})).unwrap();
        let s = budget_status(&pdb, 3, 2, 3, Timestamp::now());
        assert_eq!((s.disruptions_allowed, s.observed_generation), (Some(1), Some(2)));
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("DisruptionAllowed", "True", "SufficientPods")
        );
        let s = budget_status(&pdb, 3, 3, 2, Timestamp::now());
        assert_eq!(s.disruptions_allowed, Some(0));
        assert_eq!(s.conditions.as_ref().unwrap()[0].reason, "InsufficientPods");
    }
}
