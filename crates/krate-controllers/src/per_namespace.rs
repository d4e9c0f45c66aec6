//! Controllers that keep one named object in every active namespace (the "default"
//! ServiceAccount, the kube-root-ca.crt ConfigMap): reconcile each Namespace, again
//! whenever that object changes or disappears.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::{Clients, Error};

/// Whether the namespace accepts new content (not being deleted).
pub fn is_active(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

/// Runs `reconcile(namespace name)` for every active namespace, and again when the
/// object of kind `K` named `name` in it changes.
pub async fn run<K, F, Fut>(controller: &'static str, clients: Clients, name: &'static str, reconcile: F)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let reconcile = Arc::new(reconcile);
    let namespaces: Api<Namespace> = Api::all(clients.read.clone());
    let children: Api<K> = Api::all(clients.read);
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    Controller::new(namespaces, watcher::Config::default())
        .watches(children, by_name, |child: K| child.namespace().map(|ns| ObjectRef::<Namespace>::new(&ns)))
        .run(
            move |ns: Arc<Namespace>, reconcile: Arc<Arc<F>>| async move {
                if !is_active(&ns) {
                    return Ok(Action::await_change());
                }
                let result = reconcile(ns.name_any()).await;
                crate::metrics::record(controller, result.is_ok());
                result.map(|()| Action::await_change())
            },
            move |ns, error: &Error, _| {
                tracing::warn!(controller, namespace = %ns.name_any(), %error, "reconcile failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            Arc::new(reconcile),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Ok for "already exists" and for refusals because the namespace is going away: both
/// mean there is nothing to do.
pub fn ignore_benign(result: Result<(), kube::Error>) -> Result<(), Error> {
    match result {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("being terminated") => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
