//! The DaemonSet controller (upstream's pkg/controller/daemon): one pod per eligible
//! node, pinned there by node affinity for the scheduler to bind; rolling updates and
//! OnDelete; ControllerRevision history (which `kubectl rollout undo` rolls back to);
//! status counts.

pub mod placement;
pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;

use crate::events::Events;
use crate::history::{self, Parent, REVISION_LABEL};
use crate::{Context, Error, Informer, pods};
use plan::Step;

const CONTROLLER: &str = "daemonset";
/// Upstream's (deprecated, still set) label with the DaemonSet's generation.
const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

struct State {
    client: kube::Client,
    events: Events,
    pods: Informer<Pod>,
    nodes: Informer<Node>,
    revisions: Informer<ControllerRevision>,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("daemon-set-controller");
    let sets = ctx.informers.get::<DaemonSet>();
    let state = Arc::new(State {
        events: Events::new(clients.write.clone(), "daemonset-controller"),
        client: clients.write,
        pods: ctx.informers.get(),
        nodes: ctx.informers.get(),
        revisions: ctx.informers.get(),
    });
    let all_sets = sets.store();
    Controller::for_shared_stream(sets.subscribe(), sets.store())
        .owns_shared_stream(state.pods.subscribe())
        .owns_shared_stream(state.revisions.subscribe())
        // Any node change may change where daemon pods belong.
        .watches_shared_stream(state.nodes.subscribe(), move |_node: Arc<Node>| {
            all_sets.state().iter().map(|ds| ObjectRef::from_obj(&**ds)).collect::<Vec<_>>()
        })
        .run(
            |ds, state: Arc<State>| async move {
                let result = reconcile(&ds, &state).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |ds, error: &Error, _| {
                tracing::warn!(controller = CONTROLLER, daemonset = %ds.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

async fn reconcile(ds: &DaemonSet, st: &State) -> Result<Action, Error> {
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    st.pods.ready().await;
    st.nodes.ready().await;
    st.revisions.ready().await;
    let ns = ds.namespace().unwrap_or_default();
    let spec = ds.spec.clone().unwrap_or_default();
    let owned = |meta: &kube::api::ObjectMeta| meta.namespace.as_deref() == Some(&ns) && pods::controlled_by(meta, ds);
    let pods: Vec<Pod> = st.pods.store().state().iter().filter(|p| owned(&p.metadata)).map(|p| (**p).clone()).collect();
    let revisions: Vec<ControllerRevision> =
        st.revisions.store().state().iter().filter(|r| owned(&r.metadata)).map(|r| (**r).clone()).collect();
    let nodes: Vec<Node> = st.nodes.store().state().iter().map(|n| (**n).clone()).collect();

    let revisions_api: Api<ControllerRevision> = Api::namespaced(st.client.clone(), &ns);
    let parent = Parent {
        object: ds,
        template: serde_json::to_value(&spec.template).map_err(|e| Error::Other(e.to_string()))?,
        labels: spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default(),
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
    };
    let (update, collision_count) = history::update_revision(&revisions_api, &parent, &revisions).await?;
    let hash = update.labels().get(REVISION_LABEL).cloned().unwrap_or_default();

    let now = Timestamp::now();
    let (by_node, orphans) = plan::by_node(ds, &nodes, &pods);
    let planned = plan::plan(ds, &by_node, &orphans, &hash, now);
    let pods_api: Api<Pod> = Api::namespaced(st.client.clone(), &ns);
    for step in &planned.steps {
        match step {
            Step::Create { node } => create_pod(ds, st, &pods_api, node, &hash).await?,
            Step::Delete { pod } => delete_pod(ds, st, &pods_api, pod).await?,
            Step::DeleteFailed { pod, node } => {
                st.events
                    .warning(
                        ds,
                        "FailedDaemonPod",
                        format!("Found failed daemon pod {ns}/{pod} on node {node}, will try to kill it"),
                    )
                    .await;
                delete_pod(ds, st, &pods_api, pod).await?;
            }
        }
    }

    let live: Vec<String> = pods
        .iter()
        .filter_map(|p| p.labels().get(REVISION_LABEL).map(|h| history::name(&ds.name_any(), h)))
        .chain([update.name_any()])
        .collect();
    history::truncate(&revisions_api, &revisions, &live, spec.revision_history_limit.unwrap_or(10)).await?;

    let status = compute_status(ds, &by_node, &hash, collision_count, now);
    if ds.status.as_ref() != Some(&status) {
        let mut updated = ds.clone();
        updated.status = Some(status);
        let api: Api<DaemonSet> = Api::namespaced(st.client.clone(), &ns);
        match api.replace_status(&ds.name_any(), &PostParams::default(), &updated).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(planned.requeue.map(Action::requeue).unwrap_or_else(Action::await_change))
}

async fn create_pod(ds: &DaemonSet, st: &State, api: &Api<Pod>, node: &str, hash: &str) -> Result<(), Error> {
    let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let mut pod = Pod { metadata: template.metadata.unwrap_or_default(), spec: template.spec, status: None };
    pod.metadata.name = None;
    pod.metadata.generate_name = Some(format!("{}-", ds.name_any()));
    pod.metadata.namespace = ds.namespace();
    pod.metadata.owner_references = Some(vec![pods::controller_ref(ds)]);
    let labels = pod.metadata.labels.get_or_insert_default();
    labels.insert(REVISION_LABEL.into(), hash.into());
    labels.insert(TEMPLATE_GENERATION_LABEL.into(), ds.metadata.generation.unwrap_or(0).to_string());
    let spec = pod.spec.get_or_insert_default();
    placement::add_daemon_tolerations(spec);
    placement::pin_to_node(spec, node);
    match api.create(&PostParams::default(), &pod).await {
        Ok(created) => {
            st.events.normal(ds, "SuccessfulCreate", format!("Created pod: {}", created.name_any())).await;
            Ok(())
        }
        Err(e) => {
            st.events.warning(ds, "FailedCreate", format!("Error creating: {e}")).await;
            Err(e.into())
        }
    }
}

async fn delete_pod(ds: &DaemonSet, st: &State, api: &Api<Pod>, pod: &str) -> Result<(), Error> {
    match api.delete(pod, &DeleteParams::default()).await {
        Ok(_) => {
            st.events.normal(ds, "SuccessfulDelete", format!("Deleted pod: {pod}")).await;
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => {
            st.events.warning(ds, "FailedDelete", format!("Error deleting: {e}")).await;
            Err(e.into())
        }
    }
}

fn compute_status(
    ds: &DaemonSet,
    nodes: &[plan::NodePods<'_>],
    hash: &str,
    collision_count: Option<i32>,
    now: Timestamp,
) -> DaemonSetStatus {
    let min_ready = plan::min_ready_seconds(ds);
    let mut s = DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        collision_count,
        conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
        ..Default::default()
    };
    let (mut available, mut updated) = (0, 0);
    for n in nodes {
        if n.placement.should_run {
            s.desired_number_scheduled += 1;
            // As upstream, the oldest pod on the node speaks for it.
            if let Some(p) = n.pods.first() {
                s.current_number_scheduled += 1;
                s.number_ready += i32::from(pods::is_ready(p));
                available += i32::from(pods::is_available(p, min_ready, now));
                updated += i32::from(p.labels().get(REVISION_LABEL).map(String::as_str) == Some(hash));
            }
        } else if !n.pods.is_empty() {
            s.number_misscheduled += 1;
        }
    }
    s.number_available = Some(available);
    s.updated_number_scheduled = Some(updated);
    s.number_unavailable = Some(s.desired_number_scheduled - available);
    s
}
