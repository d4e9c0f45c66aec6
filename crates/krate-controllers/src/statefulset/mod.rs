//! The StatefulSet controller (upstream's pkg/controller/statefulset): pods with stable
//! identities and storage, made, removed and updated in the order `plan` decides;
//! ControllerRevision history; status with current and update revisions.

mod identity;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::events::Events;
use crate::history::{self, Parent};
use crate::{Context, Error, Informer, pods};
use plan::{Revision, Step};

const CONTROLLER: &str = "statefulset";

struct State {
    client: kube::Client,
    events: Events,
    pods: Informer<Pod>,
    revisions: Informer<ControllerRevision>,
    claims: Informer<PersistentVolumeClaim>,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("statefulset-controller");
    let sets = ctx.informers.get::<StatefulSet>();
    let state = Arc::new(State {
        events: Events::new(clients.write.clone(), "statefulset-controller"),
        client: clients.write,
        pods: ctx.informers.get(),
        revisions: ctx.informers.get(),
        claims: ctx.informers.get(),
    });
    Controller::for_shared_stream(sets.subscribe(), sets.store())
        .owns_shared_stream(state.pods.subscribe())
        .owns_shared_stream(state.revisions.subscribe())
        .run(
            |set, state: Arc<State>| async move {
                let result = reconcile(&set, &state).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |set, error: &Error, _| {
                tracing::warn!(controller = CONTROLLER, set = %set.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn owned<K: Resource<DynamicType = ()> + Clone>(store: &Store<K>, set: &StatefulSet) -> Vec<K> {
    store
        .state()
        .iter()
        .filter(|o| o.meta().namespace == set.metadata.namespace && pods::controlled_by(o.meta(), set))
        .map(|o| (**o).clone())
        .collect()
}

fn template_from(revision: &ControllerRevision) -> Result<PodTemplateSpec, Error> {
    let value = history::template_of(revision).ok_or_else(|| Error::Other("revision without a template".into()))?;
    serde_json::from_value(value).map_err(|e| Error::Other(format!("revision template: {e}")))
}

async fn reconcile(set: &StatefulSet, st: &State) -> Result<Action, Error> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    st.pods.ready().await;
    st.revisions.ready().await;
    st.claims.ready().await;
    let ns = set.namespace().unwrap_or_default();
    let name = set.name_any();
    let spec = set.spec.clone().unwrap_or_default();
    let status = set.status.clone().unwrap_or_default();
    let pods: BTreeMap<i32, Pod> = owned(&st.pods.store(), set)
        .into_iter()
        .filter_map(|p| plan::ordinal(&name, p.metadata.name.as_deref()?).map(|o| (o, p)))
        .collect();
    let revisions = owned(&st.revisions.store(), set);
    let revisions_api: Api<ControllerRevision> = Api::namespaced(st.client.clone(), &ns);
    let template = serde_json::to_value(&spec.template).map_err(|e| Error::Other(e.to_string()))?;
    let parent = Parent {
        object: set,
        template,
        labels: spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default(),
        collision_count: status.collision_count,
    };
    let (update, collision_count) = history::update_revision(&revisions_api, &parent, &revisions).await?;
    let current = revisions
        .iter()
        .find(|r| Some(r.name_any()) == status.current_revision)
        .cloned()
        .unwrap_or_else(|| update.clone());

    let now = Timestamp::now();
    sync_claim_owners(set, st, &pods).await?;
    let planned = plan::plan(set, &pods, &update.name_any(), now);
    let pods_api: Api<Pod> = Api::namespaced(st.client.clone(), &ns);
    for step in &planned.steps {
        match step {
            Step::Create { ordinal, revision } => {
                let revision = if *revision == Revision::Current { &current } else { &update };
                create_pod(set, st, &pods_api, &template_from(revision)?, &revision.name_any(), *ordinal).await?;
            }
            Step::Recreate { name: pod } => {
                st.events
                    .warning(
                        set,
                        "RecreatingFailedPod",
                        format!("StatefulSet {ns}/{name} is recreating failed Pod {pod}"),
                    )
                    .await;
                delete_pod(set, st, &pods_api, pod).await?;
            }
            Step::Condemn { name: pod, .. } | Step::Update { name: pod } => delete_pod(set, st, &pods_api, pod).await?,
        }
    }

    let live: Vec<String> = [current.name_any(), update.name_any()]
        .into_iter()
        .chain(pods.values().filter_map(|p| plan::revision_of(p).map(String::from)))
        .collect();
    let limit = spec.revision_history_limit.unwrap_or(10);
    history::truncate(&revisions_api, &revisions, &live, limit).await?;

    let new_status = compute_status(set, &pods, &current.name_any(), &update.name_any(), collision_count, now);
    if set.status.as_ref() != Some(&new_status) {
        let mut updated = set.clone();
        updated.status = Some(new_status);
        let sets: Api<StatefulSet> = Api::namespaced(st.client.clone(), &ns);
        match sets.replace_status(&name, &PostParams::default(), &updated).await {
            Ok(_) => {}
            // A newer set is on its way through the informer; it brings another sync.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(planned.requeue.map(Action::requeue).unwrap_or_else(Action::await_change))
}

/// Claims of replicas are owned as whenDeleted says; claims of condemned pods also by
/// the pod when whenScaled is Delete, before the pod goes (so the claim goes with it).
async fn sync_claim_owners(set: &StatefulSet, st: &State, pods: &BTreeMap<i32, Pod>) -> Result<(), Error> {
    let (start, count) = (plan::start_ordinal(set), plan::replicas(set));
    let claims = st.claims.store();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(st.client.clone(), &set.namespace().unwrap_or_default());
    for (ord, pod) in pods {
        let condemned = (*ord < start || *ord >= start + count).then_some(pod);
        let owners = identity::claim_owners(set, condemned);
        for wanted in identity::claims(set, *ord) {
            let key = ObjectRef::new(&wanted.name_any()).within(&set.namespace().unwrap_or_default());
            let Some(claim) = claims.get(&key) else { continue };
            if let Some(updated) = identity::with_owners(&claim, set, Some(pod), &owners) {
                match api.replace(&claim.name_any(), &PostParams::default(), &updated).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(())
}

async fn create_pod(
    set: &StatefulSet,
    st: &State,
    pods_api: &Api<Pod>,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: i32,
) -> Result<(), Error> {
    let pod = identity::new_pod(set, template, revision, ordinal);
    let pod_name = pod.name_any();
    let set_name = set.name_any();
    let claims_api: Api<PersistentVolumeClaim> =
        Api::namespaced(st.client.clone(), &set.namespace().unwrap_or_default());
    for claim in identity::claims(set, ordinal) {
        let claim_name = claim.name_any();
        match claims_api.create(&PostParams::default(), &claim).await {
            Ok(_) => {
                st.events
                    .normal(
                        set,
                        "SuccessfulCreate",
                        format!("create Claim {claim_name} Pod {pod_name} in StatefulSet {set_name} success"),
                    )
                    .await
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = claims_api.get(&claim_name).await?;
                if existing.metadata.deletion_timestamp.is_some() {
                    return Err(Error::Other(format!("pvc {claim_name} is being deleted")));
                }
            }
            Err(e) => {
                st.events
                    .warning(
                        set,
                        "FailedCreate",
                        format!(
                            "create Claim {claim_name} for Pod {pod_name} in StatefulSet {set_name} failed error: {e}"
                        ),
                    )
                    .await;
                return Err(e.into());
            }
        }
    }
    match pods_api.create(&PostParams::default(), &pod).await {
        Ok(_) => {
            st.events
                .normal(set, "SuccessfulCreate", format!("create Pod {pod_name} in StatefulSet {set_name} successful"))
                .await;
            Ok(())
        }
        // The informer had not seen it yet.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => {
            st.events
                .warning(
                    set,
                    "FailedCreate",
                    format!("create Pod {pod_name} in StatefulSet {set_name} failed error: {e}"),
                )
                .await;
            Err(e.into())
        }
    }
}

async fn delete_pod(set: &StatefulSet, st: &State, pods_api: &Api<Pod>, pod: &str) -> Result<(), Error> {
    let set_name = set.name_any();
    match pods_api.delete(pod, &DeleteParams::default()).await {
        Ok(_) => {
            st.events
                .normal(set, "SuccessfulDelete", format!("delete Pod {pod} in StatefulSet {set_name} successful"))
                .await;
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => {
            st.events
                .warning(set, "FailedDelete", format!("delete Pod {pod} in StatefulSet {set_name} failed error: {e}"))
                .await;
            Err(e.into())
        }
    }
}

fn compute_status(
    set: &StatefulSet,
    pods: &BTreeMap<i32, Pod>,
    current: &str,
    update: &str,
    collision_count: Option<i32>,
    now: Timestamp,
) -> StatefulSetStatus {
    let min_ready = plan::min_ready_seconds(set);
    let live: Vec<&Pod> = pods.values().filter(|p| !pods::is_terminating(p)).collect();
    let count = |f: &dyn Fn(&Pod) -> bool| live.iter().filter(|p| f(p)).count() as i32;
    let mut status = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas: live.len() as i32,
        ready_replicas: Some(count(&pods::is_running_and_ready)),
        available_replicas: Some(count(&|p| pods::is_running_and_ready(p) && pods::is_available(p, min_ready, now))),
        current_replicas: Some(count(&|p| plan::revision_of(p) == Some(current))),
        updated_replicas: Some(count(&|p| plan::revision_of(p) == Some(update))),
        current_revision: Some(current.to_string()),
        update_revision: Some(update.to_string()),
        collision_count,
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    let rolling =
        set.spec.as_ref().and_then(|s| s.update_strategy.as_ref()).and_then(|u| u.type_.as_deref()) != Some("OnDelete");
    // A finished rolling update makes the update revision current.
    if rolling && status.updated_replicas == Some(status.replicas) && status.ready_replicas == Some(status.replicas) {
        status.current_replicas = status.updated_replicas;
        status.current_revision = status.update_revision.clone();
    }
    status
}
