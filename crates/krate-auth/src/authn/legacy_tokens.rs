//! Secret-based service-account tokens (upstream's tokens controller, the part that
//! remains): a Secret of type kubernetes.io/service-account-token that names a
//! ServiceAccount in its kubernetes.io/service-account.name annotation gets a token,
//! the CA bundle and its namespace in its data. ServiceAccounts get no such Secret by
//! themselves, as upstream since 1.24.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt;
use krate_api::admission::NoAdmission;
use krate_api::registry::{Context, Patch, Scope, WatchOptions};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};
use serde_json::{Value, json};

use super::serviceaccount::{BoundObject, SA_NAME_ANNOTATION, SA_UID_ANNOTATION, SECRET_TYPE, ServiceAccountTokens};

fn controller_user() -> UserInfo {
    UserInfo {
        name: "system:kube-controller-manager".into(),
        groups: vec!["system:masters".into()],
        ..Default::default()
    }
}

fn secrets(registry: &Registry, namespace: Option<&str>) -> Result<Scope, ApiError> {
    let resource = registry.table.lookup("", "v1", "secrets").ok_or_else(ApiError::not_found_path)?;
    Ok(Scope { resource, namespace: namespace.map(String::from) })
}

/// A merge patch of a Secret by the server itself.
pub async fn patch_secret(registry: &Registry, namespace: &str, name: &str, patch: Value) -> Result<(), ApiError> {
    let user = controller_user();
    let ctx = Context::internal(&user, &NoAdmission);
    registry.patch(&secrets(registry, Some(namespace))?, name, Patch::Merge(patch), None, &ctx).await.map(|_| ())
}

/// The data a token Secret still lacks, as a merge patch; None when it needs nothing
/// (another type, no ServiceAccount named, already filled).
pub async fn fill(
    tokens: &ServiceAccountTokens,
    registry: &Registry,
    ca_pem: &str,
    secret: &Value,
) -> Result<Option<Value>, ApiError> {
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) || krate_api::object::is_deleting(secret) {
        return Ok(None);
    }
    let annotations = secret.pointer("/metadata/annotations");
    let annotation = |k: &str| annotations.and_then(|a| a.get(k)).and_then(Value::as_str).unwrap_or("");
    let sa_name = annotation(SA_NAME_ANNOTATION);
    let data = secret.get("data");
    let has = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str).is_some_and(|v| !v.is_empty());
    if sa_name.is_empty() || (has("token") && has("ca.crt") && has("namespace")) {
        return Ok(None);
    }
    let namespace = krate_api::object::meta_str(secret, "namespace").unwrap_or("");
    let name = krate_api::object::name(secret);
    let sa = match super::lookup::core_live(registry, "serviceaccounts", Some(namespace), sa_name).await {
        Ok(sa) => sa,
        Err(e) if e.code == 404 => {
            tracing::debug!(
                namespace,
                secret = name,
                serviceaccount = sa_name,
                "token secret names a missing service account"
            );
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let sa_uid = super::lookup::uid(&sa).to_string();
    let wanted_uid = annotation(SA_UID_ANNOTATION);
    if !wanted_uid.is_empty() && wanted_uid != sa_uid {
        return Ok(None);
    }
    let token = tokens.issue_legacy(namespace, &BoundObject { name: sa_name.into(), uid: sa_uid.clone() }, name);
    let mut patch = json!({"metadata": {"annotations": {SA_UID_ANNOTATION: sa_uid}}, "data": {}});
    if !has("token") {
        patch["data"]["token"] = json!(B64.encode(token));
    }
    if !has("ca.crt") {
        patch["data"]["ca.crt"] = json!(B64.encode(ca_pem));
    }
    if !has("namespace") {
        patch["data"]["namespace"] = json!(B64.encode(namespace));
    }
    Ok(Some(patch))
}

/// Fills token Secrets as they appear, for as long as the server runs.
pub async fn run(tokens: Arc<ServiceAccountTokens>, registry: Arc<Registry>, ca_pem: String) {
    loop {
        if let Err(e) = watch_once(&tokens, &registry, &ca_pem).await {
            tracing::debug!(error = %e.message, "legacy token watch ended; restarting");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn watch_once(tokens: &ServiceAccountTokens, registry: &Registry, ca_pem: &str) -> Result<(), ApiError> {
    // Only token Secrets: the field selector keeps other Secrets out of this loop.
    let opts = WatchOptions { field_selector: Some(format!("type={SECRET_TYPE}")), ..Default::default() };
    let mut events = Box::pin(registry.watch(&secrets(registry, None)?, &opts).await?);
    while let Some(item) = events.next().await {
        if !matches!(item.kind, "ADDED" | "MODIFIED") {
            continue;
        }
        let Ok(secret) = serde_json::from_slice::<Value>(&item.object) else { continue };
        let namespace = krate_api::object::meta_str(&secret, "namespace").unwrap_or("").to_string();
        let name = krate_api::object::name(&secret).to_string();
        match fill(tokens, registry, ca_pem, &secret).await {
            Ok(Some(patch)) => match patch_secret(registry, &namespace, &name, patch).await {
                Ok(()) => tracing::info!(namespace, secret = name, "filled a service-account token secret"),
                Err(e) => tracing::warn!(namespace, secret = name, error = %e.message, "filling a token secret failed"),
            },
            Ok(None) => {}
            Err(e) => tracing::warn!(namespace, secret = name, error = %e.message, "filling a token secret failed"),
        }
    }
    Ok(())
}
