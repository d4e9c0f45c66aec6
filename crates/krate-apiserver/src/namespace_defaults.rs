//! The `default` ServiceAccount every namespace holds from its start, as upstream's
//! serviceaccounts-controller keeps it: pods run as it unless they name another, and
//! ServiceAccount admission refuses pods whose account does not exist. (The
//! `kube-root-ca.crt` ConfigMap the token volume projects comes with the controllers.)

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use krate_api::admission::NoAdmission;
use krate_api::registry::{Context, Scope, WatchOptions};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry, object};

fn controller_user() -> UserInfo {
    UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

/// Creates `obj` in `ns` unless it exists.
async fn ensure(registry: &Registry, plural: &str, ns: &str, obj: Value) -> Result<(), ApiError> {
    let resource = registry.table.lookup("", "v1", plural).expect("built-in resource");
    let scope = Scope { resource, namespace: Some(ns.to_string()) };
    let user = controller_user();
    match registry.create(&scope, obj, &Context::internal(&user, &NoAdmission)).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn fill(registry: &Registry, ns: &str) {
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
    if let Err(e) = ensure(registry, "serviceaccounts", ns, account).await {
        tracing::debug!(namespace = ns, error = %e.message, "default service account not written");
    }
}

/// Watches namespaces for as long as the registry lives and fills each new one.
pub fn spawn(registry: Arc<Registry>) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(&registry);
    drop(registry);
    tokio::spawn(async move {
        loop {
            let Some(registry) = weak.upgrade() else { return };
            let namespaces = registry.table.lookup("", "v1", "namespaces").expect("namespaces are built in");
            let scope = Scope { resource: namespaces, namespace: None };
            match registry.watch(&scope, &WatchOptions::default()).await {
                Ok(stream) => {
                    let mut stream = Box::pin(stream);
                    drop(registry);
                    while let Some(item) = stream.next().await {
                        if item.kind != "ADDED" {
                            continue;
                        }
                        let Ok(ns) = serde_json::from_slice::<Value>(&item.object) else { continue };
                        let Some(registry) = weak.upgrade() else { return };
                        if !object::is_deleting(&ns) {
                            fill(&registry, object::name(&ns)).await;
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e.message, "namespace watch for defaults failed"),
            }
            // The watch ended (cache reset or shutdown): start over shortly.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}
