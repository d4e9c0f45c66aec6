//! The controller manager inside `krate server`: each controller is a kube-rs client over
//! the in-process transport, acting as its own service account as upstream's
//! kube-controller-manager does with --use-service-account-credentials.

use std::sync::Arc;

use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::Running;
use krate_controllers::{ClientFor, Clients, Context, Settings};

/// Upstream's identity for a controller: kube-system's service account of that name.
pub fn identity(controller: &str) -> UserInfo {
    UserInfo {
        name: format!("system:serviceaccount:kube-system:{controller}"),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:kube-system".into(),
            "system:authenticated".into(),
        ],
        ..Default::default()
    }
}

/// Starts every controller; dropping the handle stops them.
pub fn start(running: &Running) -> AbortOnDrop {
    let server = running.server.clone();
    // Reads and watches as the controller manager (upstream's shared informers).
    let manager = UserInfo {
        name: "system:kube-controller-manager".into(),
        groups: vec!["system:authenticated".into()],
        ..Default::default()
    };
    let client_for: ClientFor = Arc::new(move |name: &str| Clients {
        read: kube::Client::new(InProcess::new(server.clone(), manager.clone()), "default"),
        write: kube::Client::new(InProcess::new(server.clone(), identity(name)), "default"),
    });
    let settings = Settings { root_ca_pem: running.pki.ca.cert_pem.clone() };
    AbortOnDrop(krate_controllers::spawn_all(Context::new(client_for, settings)))
}

pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
