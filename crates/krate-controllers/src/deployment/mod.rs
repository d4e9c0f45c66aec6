//! The Deployment controller (upstream's pkg/controller/deployment): own ReplicaSets
//! (adopting and releasing by selector), make one per pod template named after its
//! pod-template-hash, and move replicas from old to new ones by the strategy —
//! RollingUpdate within maxSurge/maxUnavailable or Recreate — with revisions, history
//! cleanup, pause, proportional scaling and the Progressing/Available conditions.

mod rollout;
mod status;
pub mod util;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::controller_ref::{self, Claim};
use crate::{Clients, Error, Informers};

const CONTROLLER: &str = "deployment";

pub(crate) struct Ctx {
    clients: Clients,
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    pods: Store<Pod>,
    events: crate::events::Events,
}

pub async fn run(clients: Clients, informers: Arc<Informers>) {
    let deployments = informers.get::<Deployment>();
    let replica_sets = informers.get::<ReplicaSet>();
    let pods = informers.get::<Pod>();
    deployments.ready().await;
    replica_sets.ready().await;
    pods.ready().await;
    let ctx = Arc::new(Ctx {
        events: crate::events::Events::new(clients.write.clone(), "deployment-controller"),
        clients,
        deployments: deployments.store(),
        replica_sets: replica_sets.store(),
        pods: pods.store(),
    });
    let (for_orphans, for_pods, rs_for_pods) = (deployments.store(), deployments.store(), replica_sets.store());
    Controller::for_shared_stream(deployments.subscribe(), deployments.store())
        .owns_shared_stream(replica_sets.subscribe())
        .watches_shared_stream(replica_sets.subscribe(), move |rs: Arc<ReplicaSet>| orphan_owners(&for_orphans, &rs))
        // Recreate waits for old pods to be gone: their changes wake the Deployment.
        .watches_shared_stream(pods.subscribe(), move |pod: Arc<Pod>| recreate_owner(&for_pods, &rs_for_pods, &pod))
        .with_config(Config::default().concurrency(5))
        .run(
            |d, ctx: Arc<Ctx>| async move {
                let result = reconcile(d, &ctx).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |d, error: &Error, _| {
                tracing::warn!(controller = CONTROLLER, name = %d.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn selector_matches(d: &Deployment, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    d.spec.as_ref().is_some_and(|s| controller_ref::selects(&s.selector, labels))
}

fn orphan_owners(deployments: &Store<Deployment>, rs: &ReplicaSet) -> Vec<ObjectRef<Deployment>> {
    if controller_ref::controller_of(&rs.metadata).is_some() {
        return vec![];
    }
    deployments
        .state()
        .iter()
        .filter(|d| d.metadata.namespace == rs.metadata.namespace && selector_matches(d, rs.metadata.labels.as_ref()))
        .map(|d| ObjectRef::from(d.as_ref()))
        .collect()
}

fn recreate_owner(
    deployments: &Store<Deployment>,
    rss: &Store<ReplicaSet>,
    pod: &Pod,
) -> Option<ObjectRef<Deployment>> {
    let rs_ref = controller_ref::controller_of(&pod.metadata).filter(|r| r.kind == "ReplicaSet")?;
    let rs = rss.get(&ObjectRef::new(&rs_ref.name).within(pod.metadata.namespace.as_deref()?))?;
    let d_ref = controller_ref::controller_of(&rs.metadata).filter(|r| r.kind == "Deployment")?;
    let d = deployments.get(&ObjectRef::new(&d_ref.name).within(pod.metadata.namespace.as_deref()?))?;
    (!util::is_rolling(&d)).then(|| ObjectRef::from(d.as_ref()))
}

async fn reconcile(d: Arc<Deployment>, ctx: &Ctx) -> Result<Action, Error> {
    if ctx.deployments.get(&ObjectRef::from(d.as_ref())).is_none_or(|cur| cur.uid() != d.uid()) {
        return Ok(Action::await_change());
    }
    let rss = claim_replica_sets(&d, ctx).await?;
    let mut sync = rollout::Sync::new(ctx, (*d).clone());
    if d.metadata.deletion_timestamp.is_some() {
        sync.status_only(rss).await?;
        return Ok(Action::await_change());
    }
    sync.check_paused_conditions().await?;
    let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
    if paused || sync.is_scaling_event(&rss).await? {
        sync.sync(rss).await?;
    } else if util::is_rolling(&d) {
        sync.rolling(rss).await?;
    } else {
        sync.recreate(rss).await?;
    }
    Ok(sync.requeue_stuck())
}

/// The Deployment's ReplicaSets, adopting orphans its selector matches and releasing
/// those it no longer matches (upstream's ClaimReplicaSets).
async fn claim_replica_sets(d: &Deployment, ctx: &Ctx) -> Result<Vec<ReplicaSet>, Error> {
    let ns = d.namespace().unwrap_or_default();
    let uid = d.uid().unwrap_or_default();
    let Some(spec) = d.spec.as_ref() else { return Ok(vec![]) };
    let deleting = d.metadata.deletion_timestamp.is_some();
    let api: Api<ReplicaSet> = Api::namespaced(ctx.clients.write.clone(), &ns);
    let owner = controller_ref::controller_ref("apps/v1", "Deployment", &d.metadata);
    let mut owned = Vec::new();
    let mut rechecked = false;
    for rs in ctx.replica_sets.state().iter().filter(|rs| rs.metadata.namespace.as_deref() == Some(&ns)) {
        match controller_ref::claim(&uid, deleting, &spec.selector, &rs.metadata) {
            Claim::Owned => owned.push((**rs).clone()),
            Claim::Ignore => {}
            Claim::Adopt => {
                if !rechecked {
                    let fresh =
                        Api::<Deployment>::namespaced(ctx.clients.write.clone(), &ns).get_opt(&d.name_any()).await?;
                    if fresh.as_ref().is_none_or(|f| f.uid() != d.uid() || f.meta().deletion_timestamp.is_some()) {
                        return Ok(owned);
                    }
                    rechecked = true;
                }
                let patch = controller_ref::adopt_patch(&rs.metadata, &owner);
                match api.patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(adopted) => owned.push(adopted),
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Claim::Release => {
                let patch = controller_ref::release_patch(&rs.metadata, &uid);
                match api.patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(owned)
}
