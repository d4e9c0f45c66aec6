//! The controller manager inside `krate server`: each controller is a kube-rs client over
//! the in-process transport, acting as its own service account as upstream's
//! kube-controller-manager does with --use-service-account-credentials.

use std::sync::Arc;

use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::Running;
use krate_controllers::{ClientFor, Clients, Context, Settings};

use crate::cli::ControllerArgs;

/// Starts every controller; dropping the handle stops them.
pub fn start(running: &Running, args: &ControllerArgs) -> AbortOnDrop {
    let server = running.server.clone();
    // Reads and watches as the controller manager (upstream's shared informers).
    let manager = UserInfo::component("system:kube-controller-manager");
    let client_for: ClientFor = Arc::new(move |name: &str| Clients {
        read: kube::Client::new(InProcess::new(server.clone(), manager.clone()), "default"),
        write: kube::Client::new(
            InProcess::new(server.clone(), UserInfo::service_account("kube-system", name)),
            "default",
        ),
    });
    let settings = Settings {
        root_ca_pem: running.pki.ca.cert_pem.clone(),
        node_monitor_grace_period: args.node_monitor_grace_period,
        node_eviction_rate: args.node_eviction_rate,
        cluster_cidrs: args.cluster_cidr.clone(),
        // --node-cidr-mask-size is for single-stack clusters, of either family.
        node_cidr_mask_size_ipv4: args.node_cidr_mask_size.unwrap_or(args.node_cidr_mask_size_ipv4),
        node_cidr_mask_size_ipv6: args.node_cidr_mask_size.unwrap_or(args.node_cidr_mask_size_ipv6),
    };
    AbortOnDrop(krate_controllers::spawn_all(Context::new(client_for, settings)))
}

pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
