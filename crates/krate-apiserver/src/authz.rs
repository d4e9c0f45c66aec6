//! Wiring of the authorization stage into a starting server: the access reviews as
//! computed resources, and the bootstrap RBAC policy, aggregation and the authorizers'
//! first sync before the server reports ready.

use std::sync::Arc;
use std::time::Duration;

use krate_api::Registry;
use krate_api::admission::Admission;
use krate_auth::authz::modes::Authorization;
use krate_auth::authz::review::{AccessReview, Kind, RulesReview};
use krate_auth::authz::{aggregation, bootstrap as policy};

use crate::ApiServer;
use crate::start::StartError;

/// How long start-up waits for the authorizers' copies to catch up.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

pub fn register_reviews(server: &ApiServer, authz: &Authorization) {
    let group = krate_auth::authz::review::GROUP;
    for kind in [Kind::SubjectAccessReview, Kind::LocalSubjectAccessReview, Kind::SelfSubjectAccessReview] {
        server.register_computed(group, kind.plural(), "", Arc::new(AccessReview::new(kind, authz.authorizer.clone())));
    }
    server.register_computed(group, "selfsubjectrulesreviews", "", Arc::new(RulesReview::new(authz.resolver.clone())));
}

/// Creates or reconciles the bootstrap policy, starts aggregation, and waits until the
/// authorizers see the policy (so anonymous health checks and discovery pass at ready).
pub async fn bootstrap(
    registry: &Arc<Registry>,
    authz: &Authorization,
    admission: Arc<dyn Admission>,
) -> Result<(), StartError> {
    policy::reconcile(registry, admission.as_ref()).await.map_err(|e| StartError::Bootstrap(e.to_string()))?;
    aggregation::spawn(registry, authz.rbac.clone(), admission);
    let synced = authz.wait_synced(SYNC_TIMEOUT).await
        && policy::wait_visible(&authz.rbac, SYNC_TIMEOUT).await
        && aggregation::wait_settled(&authz.rbac, SYNC_TIMEOUT).await;
    if !synced {
        return Err(StartError::Bootstrap("the authorizers did not see the bootstrap RBAC policy in time".into()));
    }
    Ok(())
}
