//! The controller manager inside `krate server`: each controller is a kube-rs client over
//! the in-process transport, acting as its own service account as upstream's
//! kube-controller-manager does with --use-service-account-credentials.

use std::sync::Arc;

use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::Running;
use krate_controllers::{ClientFor, Clients, Context, Settings};

/// Starts every controller; dropping the handle stops them.
pub fn start(running: &Running, terminated_pod_gc_threshold: i32) -> AbortOnDrop {
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
    let settings =
        Settings { root_ca_pem: running.pki.ca.cert_pem.clone(), terminated_pod_gc_threshold, ..Default::default() };
    AbortOnDrop(krate_controllers::spawn_all(Context::new(client_for, settings)))
}

pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
