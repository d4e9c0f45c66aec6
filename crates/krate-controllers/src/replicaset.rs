//! The ReplicaSet controller, which also runs ReplicationControllers (as upstream, which
//! converts them to ReplicaSets): keep `replicas` active pods matching the selector,
//! adopting orphans and releasing pods no longer selected; create in slow-start batches,
//! delete the pods that matter least first, and report status and ReplicaFailure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{
    Pod, PodTemplateSpec, ReplicationController, ReplicationControllerCondition, ReplicationControllerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::controller_ref::{self, Claim};
use crate::events::Events;
use crate::replica_expectations::Expectations;
use crate::{Clients, Error, Informers, pod_state};

/// Upstream's burstReplicas: at most this many pods created or deleted per sync.
const BURST_REPLICAS: usize = 500;
/// Upstream's SlowStartInitialBatchSize.
const SLOW_START_INITIAL_BATCH: usize = 1;

/// A kind this controller runs: ReplicaSet itself, or ReplicationController seen as one.
pub trait Replicated:
    krate_client::informers::Kind + serde::Serialize + Resource<Scope = k8s_openapi::NamespaceResourceScope>
{
    const CONTROLLER: &'static str;
    const API_VERSION: &'static str;
    const KIND: &'static str;
    /// The object as a ReplicaSet (selector, template, replicas, status).
    fn as_replica_set(&self) -> ReplicaSet;
    /// The object with `status` (a ReplicaSet's) written back in its own form.
    fn with_status(&self, status: ReplicaSetStatus) -> Self;
}

impl Replicated for ReplicaSet {
    const CONTROLLER: &'static str = "replicaset";
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "ReplicaSet";
    fn as_replica_set(&self) -> ReplicaSet {
        self.clone()
    }
    fn with_status(&self, status: ReplicaSetStatus) -> Self {
        ReplicaSet { status: Some(status), ..self.clone() }
    }
}

impl Replicated for ReplicationController {
    const CONTROLLER: &'static str = "replicationcontroller";
    const API_VERSION: &'static str = "v1";
    const KIND: &'static str = "ReplicationController";
    fn as_replica_set(&self) -> ReplicaSet {
        let spec = self.spec.clone().unwrap_or_default();
        let status = self.status.clone().map(|s| ReplicaSetStatus {
            replicas: s.replicas,
            fully_labeled_replicas: s.fully_labeled_replicas,
            ready_replicas: s.ready_replicas,
            available_replicas: s.available_replicas,
            observed_generation: s.observed_generation,
            terminating_replicas: None,
            conditions: s.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| ReplicaSetCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                        last_transition_time: c.last_transition_time,
                    })
                    .collect()
            }),
        });
        ReplicaSet {
            metadata: self.metadata.clone(),
            spec: Some(ReplicaSetSpec {
                replicas: spec.replicas,
                min_ready_seconds: spec.min_ready_seconds,
                selector: LabelSelector { match_labels: spec.selector.clone(), match_expressions: None },
                template: spec.template.clone(),
            }),
            status,
        }
    }
    fn with_status(&self, s: ReplicaSetStatus) -> Self {
        let status = ReplicationControllerStatus {
            replicas: s.replicas,
            fully_labeled_replicas: s.fully_labeled_replicas,
            ready_replicas: s.ready_replicas,
            available_replicas: s.available_replicas,
            observed_generation: s.observed_generation,
            conditions: s.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| ReplicationControllerCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                        last_transition_time: c.last_transition_time,
                    })
                    .collect()
            }),
        };
        ReplicationController { status: Some(status), ..self.clone() }
    }
}

struct Ctx<K: Replicated> {
    clients: Clients,
    pods: Store<Pod>,
    owners: Store<K>,
    events: Events,
    expectations: Expectations,
}

/// Runs the controller for `K` (ReplicaSet or ReplicationController) as `clients`.
pub async fn run<K: Replicated>(clients: Clients, informers: Arc<Informers>, reporter: &str) {
    let owners = informers.get::<K>();
    let pods = informers.get::<Pod>();
    // Counting pods before the cache holds them all would create duplicates.
    owners.ready().await;
    pods.ready().await;
    let ctx = Arc::new(Ctx {
        events: Events::new(clients.write.clone(), reporter),
        clients,
        pods: pods.store(),
        owners: owners.store(),
        expectations: Expectations::default(),
    });
    let owner_store = owners.store();
    Controller::for_shared_stream(owners.subscribe(), owners.store())
        .owns_shared_stream(pods.subscribe())
        // Orphans wake the owners whose selector matches them, which may adopt them.
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| orphan_owners::<K>(&owner_store, &pod))
        .with_config(Config::default().concurrency(5))
        .run(
            |rs, ctx: Arc<Ctx<K>>| async move {
                let result = reconcile(rs, &ctx).await;
                crate::metrics::record(K::CONTROLLER, result.is_ok());
                result
            },
            |rs, error: &Error, _| {
                tracing::warn!(controller = K::CONTROLLER, name = %rs.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn orphan_owners<K: Replicated>(owners: &Store<K>, pod: &Pod) -> Vec<ObjectRef<K>> {
    if controller_ref::controller_of(&pod.metadata).is_some() || !pod_state::is_active(pod) {
        return vec![];
    }
    let ns = pod.namespace();
    owners
        .state()
        .iter()
        .filter(|o| o.namespace() == ns)
        .filter(|o| {
            let rs = o.as_replica_set();
            rs.spec.is_some_and(|s| controller_ref::selects(&s.selector, pod.metadata.labels.as_ref()))
        })
        .map(|o| ObjectRef::from(o.as_ref()))
        .collect()
}

fn key(meta: &ObjectMeta) -> String {
    format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""))
}

async fn reconcile<K: Replicated>(obj: Arc<K>, ctx: &Ctx<K>) -> Result<Action, Error> {
    let rs = obj.as_replica_set();
    let owner_key = key(&rs.metadata);
    tracing::trace!(controller = K::CONTROLLER, owner = %owner_key, "sync");
    let (ns, uid) = (obj.namespace().unwrap_or_default(), obj.uid().unwrap_or_default());
    // The cache may hold a deleted owner's last state.
    if ctx.owners.get(&ObjectRef::from(obj.as_ref())).is_none_or(|cur| cur.uid() != obj.uid()) {
        ctx.expectations.forget(&owner_key);
        return Ok(Action::await_change());
    }
    let spec = rs.spec.clone().unwrap_or_default();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let in_ns: Vec<Arc<Pod>> = ctx.pods.state().into_iter().filter(|p| p.namespace().as_deref() == Some(&ns)).collect();

    let satisfied = ctx.expectations.satisfied(
        &owner_key,
        |name| in_ns.iter().any(|p| p.metadata.name.as_deref() == Some(name)),
        |uid| in_ns.iter().any(|p| p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none()),
    );

    let owner_ref = controller_ref::controller_ref(K::API_VERSION, K::KIND, &rs.metadata);
    let mut owned: Vec<Arc<Pod>> = Vec::new();
    let mut rechecked = false;
    let pods_api: Api<Pod> = Api::namespaced(ctx.clients.write.clone(), &ns);
    for pod in in_ns.iter().filter(|p| pod_state::is_active(p)) {
        match controller_ref::claim(&uid, deleting, &spec.selector, &pod.metadata) {
            Claim::Owned => owned.push(pod.clone()),
            Claim::Ignore => {}
            Claim::Adopt => {
                // Upstream re-reads the owner once before adopting: never adopt for a
                // deleted or replaced owner.
                if !rechecked {
                    let fresh = Api::<K>::namespaced(ctx.clients.write.clone(), &ns).get_opt(&obj.name_any()).await?;
                    if fresh.as_ref().is_none_or(|f| f.uid() != obj.uid() || f.meta().deletion_timestamp.is_some()) {
                        return Ok(Action::await_change());
                    }
                    rechecked = true;
                }
                let patch = controller_ref::adopt_patch(&pod.metadata, &owner_ref);
                match pods_api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(p) => owned.push(Arc::new(p)),
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Claim::Release => {
                let patch = controller_ref::release_patch(&pod.metadata, &uid);
                match pods_api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }

    let mut manage_error: Option<(&'static str, String)> = None;
    if satisfied && !deleting {
        manage_error = manage_replicas(obj.as_ref(), &rs, &owned, &in_ns, ctx).await?;
    }

    let now = Timestamp::now();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let status = calculate_status(&rs, &owned, &in_ns, manage_error.as_ref(), now);
    let old = rs.status.clone().unwrap_or_default();
    // Compared in the kind's own form: a ReplicationController has no terminatingReplicas.
    let updated = obj.with_status(status);
    if !same_status(&old, &updated.as_replica_set().status.unwrap_or_default()) {
        let api: Api<K> = Api::namespaced(ctx.clients.write.clone(), &ns);
        match api.replace_status(&obj.name_any(), &PostParams::default(), &updated).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    if manage_error.is_some() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    if !satisfied {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    // A pod Ready but not yet available for minReadySeconds: look again when it is.
    if min_ready > 0 {
        let next = owned.iter().filter_map(|p| pod_state::until_available(p, min_ready, now)).min();
        if let Some(after) = next {
            return Ok(Action::requeue(after));
        }
    }
    Ok(Action::await_change())
}

/// Creates or deletes pods towards `replicas`; returns the ReplicaFailure reason and
/// message when some of that failed.
async fn manage_replicas<K: Replicated>(
    obj: &K,
    rs: &ReplicaSet,
    owned: &[Arc<Pod>],
    in_ns: &[Arc<Pod>],
    ctx: &Ctx<K>,
) -> Result<Option<(&'static str, String)>, Error> {
    let spec = rs.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0) as usize;
    let ns = rs.metadata.namespace.clone().unwrap_or_default();
    let name = rs.metadata.name.clone().unwrap_or_default();
    let owner_key = key(&rs.metadata);
    let reference = obj.object_ref(&());
    let pods_api: Api<Pod> = Api::namespaced(ctx.clients.write.clone(), &ns);
    if owned.len() < want {
        let count = (want - owned.len()).min(BURST_REPLICAS);
        let Some(template) = spec.template.clone() else { return Ok(None) };
        tracing::debug!(controller = K::CONTROLLER, owner = %owner_key, count, "creating pods");
        let pod =
            pod_from_template(&template, &name, controller_ref::controller_ref(K::API_VERSION, K::KIND, &rs.metadata));
        let (mut done, mut batch) = (0, SLOW_START_INITIAL_BATCH);
        while done < count {
            let size = batch.min(count - done);
            let pp = PostParams::default();
            let results = futures::future::join_all((0..size).map(|_| pods_api.create(&pp, &pod))).await;
            let mut failure = None;
            let mut created = Vec::new();
            for r in results {
                match r {
                    Ok(p) => created.push(p.name_any()),
                    Err(e) => failure = Some(error_message(&e)),
                }
            }
            ctx.expectations.expect_creates(&owner_key, created.iter().cloned());
            for pod_name in &created {
                ctx.events
                    .publish(&reference, EventType::Normal, "SuccessfulCreate", format!("Created pod: {pod_name}"))
                    .await;
            }
            done += size;
            if let Some(message) = failure {
                ctx.events
                    .publish(&reference, EventType::Warning, "FailedCreate", format!("Error creating: {message}"))
                    .await;
                return Ok(Some(("FailedCreate", message)));
            }
            batch *= 2;
        }
    } else if owned.len() > want {
        let count = (owned.len() - want).min(BURST_REPLICAS);
        let controller_uid = controller_ref::controller_of(&rs.metadata).map(|r| r.uid.clone());
        let siblings = siblings(&ctx.owners, rs, controller_uid.as_deref());
        let related: Vec<&Pod> = in_ns
            .iter()
            .filter(|p| controller_ref::controller_of(&p.metadata).is_some_and(|r| siblings.contains(&r.uid)))
            .map(|p| p.as_ref())
            .collect();
        let candidates: Vec<&Pod> = owned.iter().map(|p| p.as_ref()).collect();
        let victims = pod_state::to_delete(&candidates, &related, count, Timestamp::now());
        ctx.expectations.expect_deletes(&owner_key, victims.iter().filter_map(|p| p.metadata.uid.clone()));
        let results = futures::future::join_all(victims.iter().map(|p| {
            let pods_api = pods_api.clone();
            async move { (p, pods_api.delete(&p.name_any(), &DeleteParams::default()).await) }
        }))
        .await;
        let mut failure = None;
        for (p, r) in results {
            match r {
                Ok(_) => {
                    ctx.events
                        .publish(
                            &reference,
                            EventType::Normal,
                            "SuccessfulDelete",
                            format!("Deleted pod: {}", p.name_any()),
                        )
                        .await
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    ctx.expectations.forget_delete(&owner_key, p.metadata.uid.as_deref().unwrap_or(""))
                }
                Err(e) => {
                    ctx.expectations.forget_delete(&owner_key, p.metadata.uid.as_deref().unwrap_or(""));
                    let message = error_message(&e);
                    ctx.events
                        .publish(&reference, EventType::Warning, "FailedDelete", format!("Error deleting: {message}"))
                        .await;
                    failure = Some(("FailedDelete", message));
                }
            }
        }
        return Ok(failure);
    }
    Ok(None)
}

/// Uids of the owners controlled by the same controller as `rs` (the ReplicaSets of one
/// Deployment), whose pods together rank pods doubled up on a node.
fn siblings<K: Replicated>(owners: &Store<K>, rs: &ReplicaSet, controller_uid: Option<&str>) -> Vec<String> {
    let own = rs.metadata.uid.clone().unwrap_or_default();
    let Some(controller_uid) = controller_uid else { return vec![own] };
    let mut uids: Vec<String> = owners
        .state()
        .iter()
        .filter(|o| o.meta().namespace == rs.metadata.namespace)
        .filter(|o| controller_ref::controller_of(o.meta()).is_some_and(|r| r.uid == controller_uid))
        .filter_map(|o| o.meta().uid.clone())
        .collect();
    uids.push(own);
    uids
}

fn error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// A pod as upstream's GetPodFromTemplate makes it: the template's labels, annotations,
/// finalizers and spec, named after the owner, controlled by it.
pub fn pod_from_template(template: &PodTemplateSpec, owner_name: &str, owner: OwnerReference) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{owner_name}-")),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

fn calculate_status(
    rs: &ReplicaSet,
    owned: &[Arc<Pod>],
    in_ns: &[Arc<Pod>],
    manage_error: Option<&(&'static str, String)>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let spec = rs.spec.clone().unwrap_or_default();
    let template_labels: BTreeMap<String, String> =
        spec.template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let count = |f: &dyn Fn(&Pod) -> bool| owned.iter().filter(|p| f(p)).count() as i32;
    let fully_labeled = count(&|p| {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        template_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
    });
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let terminating = in_ns
        .iter()
        .filter(|p| pod_state::is_terminating(p))
        .filter(|p| controller_ref::controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .count() as i32;
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions: Vec<ReplicaSetCondition> = old.conditions.clone().unwrap_or_default();
    let has_failure = conditions.iter().any(|c| c.type_ == "ReplicaFailure");
    match manage_error {
        Some((reason, message)) if !has_failure => conditions.push(ReplicaSetCondition {
            type_: "ReplicaFailure".into(),
            status: "True".into(),
            reason: Some(reason.to_string()),
            message: Some(message.clone()),
            last_transition_time: Some(Time(now)),
        }),
        None => conditions.retain(|c| c.type_ != "ReplicaFailure"),
        _ => {}
    }
    ReplicaSetStatus {
        replicas: owned.len() as i32,
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(count(&pod_state::is_ready)),
        available_replicas: Some(count(&|p| pod_state::is_available(p, min_ready, now))),
        terminating_replicas: Some(terminating),
        observed_generation: rs.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
    }
}

fn same_status(a: &ReplicaSetStatus, b: &ReplicaSetStatus) -> bool {
    let n = |v: Option<i32>| v.unwrap_or(0);
    a.replicas == b.replicas
        && n(a.fully_labeled_replicas) == n(b.fully_labeled_replicas)
        && n(a.ready_replicas) == n(b.ready_replicas)
        && n(a.available_replicas) == n(b.available_replicas)
        && a.terminating_replicas == b.terminating_replicas
        && a.observed_generation == b.observed_generation
        && a.conditions.clone().unwrap_or_default() == b.conditions.clone().unwrap_or_default()
}
