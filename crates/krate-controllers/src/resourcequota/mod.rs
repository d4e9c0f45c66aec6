//! The ResourceQuota controller (upstream's resourcequota-controller): status.hard
//! mirrors spec.hard and status.used is recalculated from the namespace's objects —
//! compute resources and counts of pods (within the quota's scopes), services (with
//! node ports and load balancers), PVCs (with storage, also per storage class), secrets,
//! configmaps, replication controllers and quotas, and count/<resource>.<group> of any
//! other resource (listed through discovery, so recounted periodically).

pub mod usage;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, ResourceQuotaStatus, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::jiff::Timestamp;
use krate_api::kinds::quantity::Quantity;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::{Context, Error};
use usage::Usage;

const NAME: &str = "resourcequota";
/// Upstream's --resource-quota-sync-period.
const FULL_RESYNC: Duration = Duration::from_secs(300);
/// How often quotas counting resources without an informer here are recounted.
const LISTED_RESYNC: Duration = Duration::from_secs(10);

struct State {
    read: kube::Client,
    write: kube::Client,
    pods: Store<Pod>,
    services: Store<Service>,
    pvcs: Store<PersistentVolumeClaim>,
    secrets: Store<Secret>,
    configmaps: Store<ConfigMap>,
    rcs: Store<ReplicationController>,
    quotas: Store<ResourceQuota>,
}

fn quotas_in(quotas: &Store<ResourceQuota>, namespace: Option<String>) -> Vec<ObjectRef<ResourceQuota>> {
    quotas.state().iter().filter(|q| q.namespace() == namespace).map(|q| ObjectRef::from_obj(q.as_ref())).collect()
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("resourcequota-controller");
    let i = &ctx.informers;
    let (quotas, pods, services, pvcs) =
        (i.get::<ResourceQuota>(), i.get::<Pod>(), i.get::<Service>(), i.get::<PersistentVolumeClaim>());
    let (secrets, configmaps, rcs) = (i.get::<Secret>(), i.get::<ConfigMap>(), i.get::<ReplicationController>());
    futures::join!(
        quotas.ready(),
        pods.ready(),
        services.ready(),
        pvcs.ready(),
        secrets.ready(),
        configmaps.ready(),
        rcs.ready()
    );
    let state = Arc::new(State {
        read: clients.read,
        write: clients.write,
        pods: pods.store(),
        services: services.store(),
        pvcs: pvcs.store(),
        secrets: secrets.store(),
        configmaps: configmaps.store(),
        rcs: rcs.store(),
        quotas: quotas.store(),
    });
    let q = quotas.store();
    let (q1, q2, q3, q4, q5, q6) = (q.clone(), q.clone(), q.clone(), q.clone(), q.clone(), q.clone());
    Controller::for_shared_stream(quotas.subscribe(), quotas.store())
        .watches_shared_stream(pods.subscribe(), move |o: Arc<Pod>| quotas_in(&q1, o.namespace()))
        .watches_shared_stream(services.subscribe(), move |o: Arc<Service>| quotas_in(&q2, o.namespace()))
        .watches_shared_stream(pvcs.subscribe(), move |o: Arc<PersistentVolumeClaim>| quotas_in(&q3, o.namespace()))
        .watches_shared_stream(secrets.subscribe(), move |o: Arc<Secret>| quotas_in(&q4, o.namespace()))
        .watches_shared_stream(configmaps.subscribe(), move |o: Arc<ConfigMap>| quotas_in(&q5, o.namespace()))
        .watches_shared_stream(rcs.subscribe(), move |o: Arc<ReplicationController>| quotas_in(&q6, o.namespace()))
        .run(
            |quota, state: Arc<State>| async move {
                let result = sync(&quota, &state).await;
                crate::metrics::record(NAME, result.is_ok());
                result
            },
            |quota, error, _| {
                tracing::warn!(controller = NAME, quota = %quota.name_any(), %error, "sync failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            state,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn in_namespace<K: Resource<DynamicType = ()> + Clone>(store: &Store<K>, namespace: &str) -> Vec<Arc<K>> {
    store.state().into_iter().filter(|o| o.meta().namespace.as_deref() == Some(namespace)).collect()
}

/// The namespace's objects a quota may count.
struct Objects {
    pods: Vec<Arc<Pod>>,
    services: Vec<Arc<Service>>,
    pvcs: Vec<Arc<PersistentVolumeClaim>>,
    secrets: usize,
    configmaps: usize,
    rcs: usize,
    quotas: usize,
}

impl Objects {
    /// From the shared informers: cheap, but possibly behind the API.
    fn informed(state: &State, namespace: &str) -> Objects {
        Objects {
            pods: in_namespace(&state.pods, namespace),
            services: in_namespace(&state.services, namespace),
            pvcs: in_namespace(&state.pvcs, namespace),
            secrets: in_namespace(&state.secrets, namespace).len(),
            configmaps: in_namespace(&state.configmaps, namespace).len(),
            rcs: in_namespace(&state.rcs, namespace).len(),
            quotas: in_namespace(&state.quotas, namespace).len(),
        }
    }

    /// Listed from the API now: what admission has charged and stored is all here.
    async fn listed(client: &kube::Client, namespace: &str) -> Result<Objects, Error> {
        async fn all<K>(client: &kube::Client, namespace: &str) -> Result<Vec<Arc<K>>, Error>
        where
            K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug,
        {
            let api: Api<K> = Api::namespaced(client.clone(), namespace);
            Ok(api.list(&ListParams::default()).await?.items.into_iter().map(Arc::new).collect())
        }
        async fn count<K>(client: &kube::Client, namespace: &str) -> Result<usize, Error>
        where
            K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug,
        {
            let api: Api<K> = Api::namespaced(client.clone(), namespace);
            Ok(api.list_metadata(&ListParams::default()).await?.items.len())
        }
        Ok(Objects {
            pods: all::<Pod>(client, namespace).await?,
            services: all::<Service>(client, namespace).await?,
            pvcs: all::<PersistentVolumeClaim>(client, namespace).await?,
            secrets: count::<Secret>(client, namespace).await?,
            configmaps: count::<ConfigMap>(client, namespace).await?,
            rcs: count::<ReplicationController>(client, namespace).await?,
            quotas: count::<ResourceQuota>(client, namespace).await?,
        })
    }
}

/// Whether `total` is below what the quota's status says is used for any resource.
/// (Keys counted by listing, `skip`, are always fresh.)
fn lowers_usage(quota: &ResourceQuota, total: &Usage, skip: &[(String, String, String)]) -> bool {
    let used = quota.status.as_ref().and_then(|s| s.used.as_ref());
    let fresh = |key: &String| skip.iter().any(|(k, _, _)| k == key);
    used.into_iter().flatten().filter(|(key, _)| !fresh(key)).any(|(key, was)| {
        let now = total.get(key).copied().unwrap_or_else(Quantity::zero);
        Quantity::parse(&was.0).is_ok_and(|was| now.cmp_q(&was).is_lt())
    })
}

/// The usage of the namespace's objects the quota covers.
fn usage_of(quota: &ResourceQuota, objects: &Objects) -> Usage {
    let mut total = Usage::new();
    let now = Timestamp::now();
    for pod in &objects.pods {
        if usage::pod_counts(pod, now) && usage::pod_in_scope(quota, pod) {
            usage::add_all(&mut total, &usage::pod_usage(pod));
        }
    }
    // Scopes only ever select pods.
    if usage::has_scopes(quota) {
        return total;
    }
    for svc in &objects.services {
        usage::add_all(&mut total, &usage::service_usage(svc));
    }
    for pvc in &objects.pvcs {
        usage::add_all(&mut total, &usage::pvc_usage(pvc));
    }
    let counts = [
        ("secrets", Some("secrets"), objects.secrets),
        ("configmaps", Some("configmaps"), objects.configmaps),
        ("replicationcontrollers", Some("replicationcontrollers"), objects.rcs),
        ("resourcequotas", Some("resourcequotas"), objects.quotas),
    ];
    for (plural, legacy, n) in counts {
        for _ in 0..n {
            usage::add_all(&mut total, &usage::count_usage(plural, legacy));
        }
    }
    total
}

/// `count/<resource>.<group>` keys no informer here covers.
fn listed_keys(hard: &BTreeMap<String, ApiQuantity>) -> Vec<(String, String, String)> {
    const INFORMED: [&str; 7] = [
        "pods",
        "services",
        "persistentvolumeclaims",
        "secrets",
        "configmaps",
        "replicationcontrollers",
        "resourcequotas",
    ];
    hard.keys()
        .filter_map(|k| {
            let rest = k.strip_prefix("count/")?;
            let (resource, group) = rest.split_once('.').unwrap_or((rest, ""));
            (!(group.is_empty() && INFORMED.contains(&resource))).then(|| (k.clone(), resource.into(), group.into()))
        })
        .collect()
}

/// Counts a resource of the namespace by listing it (found through discovery).
async fn count_listed(client: &kube::Client, namespace: &str, resource: &str, group: &str) -> Result<usize, Error> {
    let api_group = kube::discovery::group(client, group).await?;
    let Some((ar, _)) = api_group.recommended_resources().into_iter().find(|(ar, _)| ar.plural == resource) else {
        return Ok(0);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    Ok(api.list_metadata(&ListParams::default()).await?.items.len())
}

async fn sync(quota: &ResourceQuota, state: &State) -> Result<Action, Error> {
    let namespace = quota.namespace().unwrap_or_default();
    let hard = quota.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
    let mut total = usage_of(quota, &Objects::informed(state, &namespace));
    // The informers may not yet hold an object whose create admission just charged to
    // this quota: before lowering a charge, recount from the API itself.
    let listed = listed_keys(&hard);
    if lowers_usage(quota, &total, &listed) {
        total = usage_of(quota, &Objects::listed(&state.read, &namespace).await?);
    }
    for (key, resource, group) in &listed {
        let n =
            if usage::has_scopes(quota) { 0 } else { count_listed(&state.read, &namespace, resource, group).await? };
        total.insert(key.clone(), Quantity::parse(&n.to_string()).expect("integer"));
    }
    let used: BTreeMap<String, ApiQuantity> = hard
        .keys()
        .map(|k| (k.clone(), ApiQuantity(total.get(k).map_or_else(|| "0".to_string(), Quantity::canonical))))
        .collect();
    let status = ResourceQuotaStatus { hard: Some(hard.clone()), used: Some(used) };
    let requeue = Action::requeue(if listed.is_empty() { FULL_RESYNC } else { LISTED_RESYNC });
    if quota.status.as_ref() == Some(&status) {
        return Ok(requeue);
    }
    let mut updated = quota.clone();
    updated.status = Some(status);
    let api: Api<ResourceQuota> = Api::namespaced(state.write.clone(), &namespace);
    match api.replace_status(&quota.name_any(), &PostParams::default(), &updated).await {
        Ok(_) => Ok(requeue),
        // Changed meanwhile: its event brings the next sync.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_uninformed_counts_are_listed() {
        let hard: BTreeMap<String, ApiQuantity> = ["count/deployments.apps", "count/pods", "count/widgets", "pods"]
            .into_iter()
            .map(|k| (k.to_string(), ApiQuantity("1".into())))
            .collect();
        let keys: Vec<(String, String)> = listed_keys(&hard).into_iter().map(|(_, r, g)| (r, g)).collect();
        assert_eq!(keys, vec![("deployments".into(), "apps".into()), ("widgets".into(), String::new())]);
    }
}
