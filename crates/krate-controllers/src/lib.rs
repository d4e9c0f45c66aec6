//! The controller manager's control loops. Each is a kube-rs client of the API server,
//! exactly as upstream's are client-go clients: inside `krate server` the client reaches
//! the server over the in-process transport, outside it over HTTPS. Each controller acts
//! as its own identity (upstream's `system:serviceaccount:kube-system:<name>`), which the
//! caller turns into a client, so authorization sees who does what.

mod controller_ref;
pub mod deployment;
mod error;
mod events;
mod expectations;
pub mod gc;
pub mod metrics;
pub mod namespace;
mod per_namespace;
mod pod_state;
pub mod replicaset;
pub mod root_ca;
pub mod serviceaccount;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use error::Error;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ReplicationController;
pub use krate_client::{Informer, Informers};

/// The clients one controller works through. As upstream's kube-controller-manager with
/// --use-service-account-credentials: watches and reads (upstream's shared informers) as
/// the controller manager itself, writes as the controller's own service account.
#[derive(Clone)]
pub struct Clients {
    pub read: kube::Client,
    pub write: kube::Client,
}

/// Makes a controller's clients, given its identity name (e.g. "namespace-controller").
pub type ClientFor = Arc<dyn Fn(&str) -> Clients + Send + Sync>;

/// What the controllers need from their surroundings.
#[derive(Clone, Default)]
pub struct Settings {
    /// PEM of the cluster CA, published in every namespace as kube-root-ca.crt.
    pub root_ca_pem: String,
}

/// What every controller is built from: its clients, the controller manager's shared
/// informers (one watch per kind for all controllers, as upstream's informer factory)
/// and the settings.
#[derive(Clone)]
pub struct Context {
    pub client_for: ClientFor,
    pub informers: Arc<Informers>,
    pub settings: Settings,
}

impl Context {
    /// Informers read as the controller manager itself (`client_for(..).read`).
    pub fn new(client_for: ClientFor, settings: Settings) -> Context {
        let informers = Informers::new(client_for("informers").read);
        Context { client_for, informers, settings }
    }
}

type Loop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every controller's loop, to be run (and dropped to stop them) by the caller.
pub fn all(ctx: &Context) -> Vec<(&'static str, Loop)> {
    let (client_for, settings, informers) = (&ctx.client_for, &ctx.settings, &ctx.informers);
    vec![
        ("serviceaccount", Box::pin(serviceaccount::run(client_for("service-account-controller")))),
        (
            "root-ca-cert-publisher",
            Box::pin(root_ca::run(client_for("root-ca-cert-publisher"), settings.root_ca_pem.clone())),
        ),
        ("namespace", Box::pin(namespace::run(client_for("namespace-controller")))),
        ("garbagecollector", Box::pin(gc::run(client_for("generic-garbage-collector")))),
        ("deployment", Box::pin(deployment::run(client_for("deployment-controller"), informers.clone()))),
        (
            "replicaset",
            Box::pin(replicaset::run::<ReplicaSet>(
                client_for("replicaset-controller"),
                informers.clone(),
                "replicaset-controller",
            )),
        ),
        (
            "replicationcontroller",
            Box::pin(replicaset::run::<ReplicationController>(
                client_for("replication-controller"),
                informers.clone(),
                "replication-controller",
            )),
        ),
    ]
}

/// Runs every controller until the returned task is aborted.
pub fn spawn_all(ctx: Context) -> tokio::task::JoinHandle<()> {
    let loops = all(&ctx);
    tokio::spawn(async move {
        let handles: Vec<_> = loops
            .into_iter()
            .map(|(name, fut)| {
                tracing::info!(controller = name, "starting controller");
                tokio::spawn(fut)
            })
            .collect();
        // Aborting this task drops the handles, not the loops: abort them explicitly.
        struct AbortAll(Vec<tokio::task::JoinHandle<()>>);
        impl Drop for AbortAll {
            fn drop(&mut self) {
                for h in &self.0 {
                    h.abort();
                }
            }
        }
        let guard = AbortAll(handles);
        futures::future::pending::<()>().await;
        // The informers live as long as the loops that read them.
        drop((guard, ctx));
    })
}
