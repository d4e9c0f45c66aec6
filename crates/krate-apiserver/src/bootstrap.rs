//! Start-up work after the server listens (upstream's post-start hooks): the system
//! namespaces exist before the server reports ready.

use serde_json::json;

use krate_api::admission::NoAdmission;
use krate_api::registry::{Context, Scope};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};

pub const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

fn apiserver_user() -> UserInfo {
    UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

/// Creates any missing system namespace.
pub async fn system_namespaces(registry: &Registry) -> Result<(), ApiError> {
    let namespaces = registry.table.lookup("", "v1", "namespaces").expect("namespaces are built in");
    let scope = Scope { resource: namespaces, namespace: None };
    let user = apiserver_user();
    let ctx = Context { user: &user, admission: &NoAdmission, dry_run: false };
    for name in SYSTEM_NAMESPACES {
        match registry.get(&scope, name).await {
            Ok(_) => continue,
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match registry.create(&scope, ns, &ctx).await {
            Ok(_) => tracing::info!(namespace = name, "created system namespace"),
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
