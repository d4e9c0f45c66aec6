//! The ServiceAccount controller: every active namespace has a ServiceAccount named
//! "default", created again if deleted (upstream's serviceaccounts-controller).

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::{Clients, per_namespace};

pub const DEFAULT: &str = "default";

pub async fn run(clients: Clients) {
    let c = clients.clone();
    per_namespace::run::<ServiceAccount, _, _>("serviceaccount", clients, DEFAULT, move |ns| {
        let reader: Api<ServiceAccount> = Api::namespaced(c.read.clone(), &ns);
        let api: Api<ServiceAccount> = Api::namespaced(c.write.clone(), &ns);
        async move {
            if reader.get_opt(DEFAULT).await?.is_some() {
                return Ok(());
            }
            let sa = ServiceAccount {
                metadata: ObjectMeta { name: Some(DEFAULT.into()), ..Default::default() },
                ..Default::default()
            };
            tracing::debug!(namespace = %ns, "creating the default service account");
            per_namespace::ignore_benign(api.create(&PostParams::default(), &sa).await.map(|_| ()))
        }
    })
    .await
}
