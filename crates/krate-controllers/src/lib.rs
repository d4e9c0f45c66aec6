//! The controller manager's control loops. Each is a kube-rs client of the API server,
//! exactly as upstream's are client-go clients: inside `krate server` the client reaches
//! the server over the in-process transport, outside it over HTTPS. Each controller acts
//! as its own identity (upstream's `system:serviceaccount:kube-system:<name>`), which the
//! caller turns into a client, so authorization sees who does what.

pub mod certificates;
mod controller_ref;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslice_mirroring;
mod error;
mod events;
mod expectations;
pub mod gc;
pub mod history;
pub mod hpa;
pub mod job;
pub mod legacy_token_cleaner;
pub mod metrics;
pub mod namespace;
pub mod node_ipam;
pub mod node_lifecycle;
mod per_namespace;
pub mod persistentvolume;
mod pod_state;
pub mod podgc;
pub mod pods;
mod replica_expectations;
pub mod replicaset;
pub mod resourcequota;
pub mod root_ca;
pub mod service_lb;
pub mod service_pods;
pub mod serviceaccount;
pub mod statefulset;
pub mod taint_eviction;
pub mod ttl_after_finished;

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
#[derive(Clone)]
pub struct Settings {
    /// PEM of the cluster CA, published in every namespace as kube-root-ca.crt.
    pub root_ca_pem: String,
    /// The CA the built-in CSR signers issue with (upstream's --cluster-signing-cert-file
    /// and --cluster-signing-key-file); without it csrsigning does not run, as upstream.
    pub cluster_signing: Option<SigningCa>,
    /// The HorizontalPodAutoscaler controller's flags (upstream's defaults).
    pub hpa: hpa::Settings,
    /// The Job controller's pod-failure back-off.
    pub job: job::Tuning,
    /// Terminated pods beyond this many are deleted, oldest first; 0 or less disables
    /// it (--terminated-pod-gc-threshold, default 12500).
    pub terminated_pod_gc_threshold: i32,
    /// The pod garbage collector's timing.
    pub podgc: podgc::Tuning,
    /// When unused legacy service-account tokens are invalidated and deleted.
    pub legacy_token_cleaner: legacy_token_cleaner::Tuning,
    /// How long a node may go without renewing its Lease before it is NotReady/Unknown
    /// (upstream's --node-monitor-grace-period).
    pub node_monitor_grace_period: std::time::Duration,
    /// Nodes whose pods are evicted per second at most (upstream's --node-eviction-rate).
    pub node_eviction_rate: f64,
    /// Pod CIDRs nodes get their podCIDRs from (upstream's --cluster-cidr).
    pub cluster_cidrs: Vec<String>,
    /// Service cluster IP ranges, kept out of node podCIDRs (--service-cluster-ip-range).
    pub service_cidrs: Vec<String>,
    /// Prefix length of an IPv4 node's podCIDR (--node-cidr-mask-size[-ipv4]).
    pub node_cidr_mask_size_ipv4: u8,
    /// Prefix length of an IPv6 node's podCIDR (--node-cidr-mask-size-ipv6).
    pub node_cidr_mask_size_ipv6: u8,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            root_ca_pem: String::new(),
            cluster_signing: None,
            hpa: hpa::Settings::default(),
            job: job::Tuning::default(),
            terminated_pod_gc_threshold: 12500,
            podgc: podgc::Tuning::default(),
            legacy_token_cleaner: legacy_token_cleaner::Tuning::default(),
            node_monitor_grace_period: std::time::Duration::from_secs(40),
            node_eviction_rate: 0.1,
            cluster_cidrs: vec!["10.42.0.0/16".into()],
            service_cidrs: vec!["10.43.0.0/16".into()],
            node_cidr_mask_size_ipv4: 24,
            node_cidr_mask_size_ipv6: 64,
        }
    }
}

/// A certificate authority: certificate and private key, PEM.
#[derive(Clone)]
pub struct SigningCa {
    pub cert_pem: String,
    pub key_pem: String,
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
    let csrs = ctx.informers.get::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>();
    let mut loops: Vec<(&'static str, Loop)> = vec![
        ("serviceaccount", Box::pin(serviceaccount::run(client_for("service-account-controller")))),
        (
            "root-ca-cert-publisher",
            Box::pin(root_ca::run(client_for("root-ca-cert-publisher"), settings.root_ca_pem.clone())),
        ),
        ("namespace", Box::pin(namespace::run(client_for("namespace-controller")))),
        (
            "csrapproving",
            Box::pin(certificates::approving::run(
                client_for("certificate-controller"),
                csrs.clone(),
                informers.get::<k8s_openapi::api::core::v1::Node>(),
            )),
        ),
        ("csrcleaner", Box::pin(certificates::cleaner::run(client_for("certificate-controller"), csrs.clone()))),
        ("horizontalpodautoscaling", {
            let clients = client_for("horizontal-pod-autoscaler");
            let source = Arc::new(hpa::metrics::ResourceMetricsApi { client: clients.write.clone() });
            Box::pin(hpa::run(clients, ctx.informers.clone(), settings.hpa.clone(), source))
        }),
        ("job", Box::pin(job::run(ctx.clone()))),
        ("cronjob", Box::pin(cronjob::run(ctx.clone()))),
        ("ttl-after-finished", Box::pin(ttl_after_finished::run(ctx.clone()))),
        ("podgc", Box::pin(podgc::run(ctx.clone()))),
        ("legacy-service-account-token-cleaner", Box::pin(legacy_token_cleaner::run(ctx.clone()))),
        ("endpointslice", Box::pin(endpointslice::run(ctx.clone()))),
        ("endpoints", Box::pin(endpoints::run(ctx.clone()))),
        ("endpointslice-mirroring", Box::pin(endpointslice_mirroring::run(ctx.clone()))),
        ("service-lb", Box::pin(service_lb::run(ctx.clone()))),
        ("node-lifecycle", Box::pin(node_lifecycle::run(ctx.clone()))),
        ("node-ipam", Box::pin(node_ipam::run(ctx.clone()))),
        ("resourcequota", Box::pin(resourcequota::run(ctx.clone()))),
        ("persistentvolume-binder", Box::pin(persistentvolume::run(ctx.clone()))),
        ("taint-eviction-controller", Box::pin(taint_eviction::run(ctx.clone()))),
        ("statefulset", Box::pin(statefulset::run(ctx.clone()))),
        ("daemonset", Box::pin(daemonset::run(ctx.clone()))),
        ("disruption", Box::pin(disruption::run(ctx.clone()))),
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
    ];
    if let Some(ca) = &settings.cluster_signing {
        match certificates::authority::Authority::new(&ca.cert_pem, &ca.key_pem) {
            Ok(authority) => loops.push((
                "csrsigning",
                Box::pin(certificates::signing::run(client_for("certificate-controller"), csrs, Arc::new(authority))),
            )),
            Err(error) => tracing::error!(%error, "not starting csrsigning: the cluster signing CA is unusable"),
        }
    } else {
        tracing::info!("skipping csrsigning: no cluster signing certificate and key were given");
    }
    loops
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

/// Calls `gone` with the last state of every object of the informer's kind that is
/// deleted: a kube-runtime `Controller` only reconciles objects its store still holds,
/// so cleanup for a deleted owner (its Endpoints, say) is driven from here.
pub(crate) async fn on_deleted<K, F, Fut>(informer: Informer<K>, gone: F)
where
    K: krate_client::informers::Kind,
    F: Fn(Arc<K>) -> Fut,
    Fut: Future<Output = ()>,
{
    use futures::StreamExt;
    let store = informer.store();
    let mut changes = informer.subscribe();
    while let Some(object) = changes.next().await {
        if store.get(&kube::runtime::reflector::ObjectRef::from_obj(object.as_ref())).is_none() {
            gone(object).await;
        }
    }
}
