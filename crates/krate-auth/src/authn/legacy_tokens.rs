//! Secret-based service-account tokens (upstream's tokens controller, the part that
//! remains): a Secret of type kubernetes.io/service-account-token that names a
//! ServiceAccount in its kubernetes.io/service-account.name annotation gets a token,
//! the CA bundle and its namespace in its data. ServiceAccounts get no such Secret by
//! themselves, as upstream since 1.24. As upstream, a token Secret whose ServiceAccount
//! does not exist (or has another uid) is deleted, a deleted ServiceAccount takes its
//! token Secrets with it, and a deleted token Secret leaves its account's `secrets`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt;
use krate_api::admission::NoAdmission;
use krate_api::registry::{Context, DeleteOptions, ListOptions, Patch, Scope, WatchOptions};
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

/// What a token Secret needs.
#[derive(Debug, PartialEq)]
pub enum TokenSync {
    Nothing,
    /// The data it lacks, as a merge patch.
    Fill(Value),
    /// Its ServiceAccount is gone: the Secret goes too.
    Delete,
}

fn annotation<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str).unwrap_or("")
}

/// Whether `secret` is a token of the ServiceAccount `name` with `uid` (upstream's
/// IsServiceAccountToken: the name must match, the uid too where the Secret names one).
pub fn is_token_of(secret: &Value, name: &str, uid: &str) -> bool {
    let wanted_uid = annotation(secret, SA_UID_ANNOTATION);
    secret.get("type").and_then(Value::as_str) == Some(SECRET_TYPE)
        && annotation(secret, SA_NAME_ANNOTATION) == name
        && (wanted_uid.is_empty() || wanted_uid == uid)
}

/// What a token Secret needs: nothing (another type, no ServiceAccount named, already
/// filled, being deleted), its data, or deletion when its ServiceAccount is gone.
pub async fn sync(
    tokens: &ServiceAccountTokens,
    registry: &Registry,
    ca_pem: &str,
    secret: &Value,
) -> Result<TokenSync, ApiError> {
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) || krate_api::object::is_deleting(secret) {
        return Ok(TokenSync::Nothing);
    }
    let sa_name = annotation(secret, SA_NAME_ANNOTATION);
    if sa_name.is_empty() {
        return Ok(TokenSync::Nothing);
    }
    let namespace = krate_api::object::meta_str(secret, "namespace").unwrap_or("");
    let name = krate_api::object::name(secret);
    let sa = match super::lookup::core_live(registry, "serviceaccounts", Some(namespace), sa_name).await {
        Ok(sa) => sa,
        Err(e) if e.code == 404 => return Ok(TokenSync::Delete),
        Err(e) => return Err(e),
    };
    let sa_uid = super::lookup::uid(&sa).to_string();
    if !is_token_of(secret, sa_name, &sa_uid) {
        return Ok(TokenSync::Delete);
    }
    let data = secret.get("data");
    let has = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str).is_some_and(|v| !v.is_empty());
    if has("token") && has("ca.crt") && has("namespace") {
        return Ok(TokenSync::Nothing);
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
    Ok(TokenSync::Fill(patch))
}

/// Deletes a token Secret if it is still the object seen (uid precondition); gone or
/// replaced already is fine.
async fn delete_token(registry: &Registry, namespace: &str, name: &str, uid: &str) -> Result<(), ApiError> {
    let user = controller_user();
    let ctx = Context::internal(&user, &NoAdmission);
    let opts = DeleteOptions { precondition_uid: Some(uid.to_string()), ..Default::default() };
    match registry.delete(&secrets(registry, Some(namespace))?, name, &opts, &ctx).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes a deleted token Secret from its ServiceAccount's `secrets`, if listed there.
async fn remove_reference(registry: &Registry, secret: &Value) -> Result<(), ApiError> {
    let namespace = krate_api::object::meta_str(secret, "namespace").unwrap_or("");
    let (sa_name, secret_name) = (annotation(secret, SA_NAME_ANNOTATION), krate_api::object::name(secret));
    if sa_name.is_empty() {
        return Ok(());
    }
    let resource = registry.table.lookup("", "v1", "serviceaccounts").ok_or_else(ApiError::not_found_path)?;
    let scope = Scope { resource, namespace: Some(namespace.to_string()) };
    let user = controller_user();
    let ctx = Context::internal(&user, &NoAdmission);
    for _ in 0..5 {
        let mut sa = match registry.get(&scope, sa_name).await {
            Ok(sa) => sa,
            Err(e) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        };
        if !is_token_of(secret, sa_name, super::lookup::uid(&sa)) {
            return Ok(());
        }
        let Some(list) = sa.get_mut("secrets").and_then(Value::as_array_mut) else { return Ok(()) };
        let before = list.len();
        list.retain(|r| r.get("name").and_then(Value::as_str) != Some(secret_name));
        if list.len() == before {
            return Ok(());
        }
        match registry.update(&scope, sa_name, sa, None, &ctx).await {
            Err(e) if e.code == 409 => continue,
            Err(e) if e.code == 404 => return Ok(()),
            other => return other.map(|_| ()),
        }
    }
    Err(ApiError::internal(format!("serviceaccount {namespace}/{sa_name} kept changing")))
}

/// Keeps token Secrets in step with their ServiceAccounts for as long as the server runs.
pub async fn run(tokens: Arc<ServiceAccountTokens>, registry: Arc<Registry>, ca_pem: String) {
    let secrets = async {
        loop {
            if let Err(e) = watch_secrets(&tokens, &registry, &ca_pem).await {
                tracing::debug!(error = %e.message, "legacy token watch ended; restarting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let accounts = async {
        loop {
            if let Err(e) = watch_accounts(&registry).await {
                tracing::debug!(error = %e.message, "service account watch of the tokens loop ended; restarting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    tokio::join!(secrets, accounts);
}

async fn watch_secrets(tokens: &ServiceAccountTokens, registry: &Registry, ca_pem: &str) -> Result<(), ApiError> {
    // Only token Secrets: the field selector keeps other Secrets out of this loop.
    let opts = WatchOptions { field_selector: Some(format!("type={SECRET_TYPE}")), ..Default::default() };
    let mut events = Box::pin(registry.watch(&secrets(registry, None)?, &opts).await?);
    while let Some(item) = events.next().await {
        let Ok(secret) = serde_json::from_slice::<Value>(&item.object) else { continue };
        let namespace = krate_api::object::meta_str(&secret, "namespace").unwrap_or("").to_string();
        let name = krate_api::object::name(&secret).to_string();
        let result = match item.kind {
            "DELETED" => remove_reference(registry, &secret).await,
            "ADDED" | "MODIFIED" => match sync(tokens, registry, ca_pem, &secret).await {
                Ok(TokenSync::Fill(patch)) => patch_secret(registry, &namespace, &name, patch)
                    .await
                    .inspect(|()| tracing::info!(namespace, secret = name, "filled a service-account token secret")),
                Ok(TokenSync::Delete) => {
                    let uid = super::lookup::uid(&secret);
                    delete_token(registry, &namespace, &name, uid).await.inspect(|()| {
                        tracing::info!(namespace, secret = name, "deleted a token secret whose service account is gone")
                    })
                }
                Ok(TokenSync::Nothing) => Ok(()),
                Err(e) => Err(e),
            },
            _ => Ok(()),
        };
        if let Err(e) = result {
            tracing::warn!(namespace, secret = name, error = %e.message, "syncing a token secret failed");
        }
    }
    Ok(())
}

/// A deleted ServiceAccount's token Secrets are deleted with it.
async fn watch_accounts(registry: &Registry) -> Result<(), ApiError> {
    let resource = registry.table.lookup("", "v1", "serviceaccounts").ok_or_else(ApiError::not_found_path)?;
    let mut events = Box::pin(registry.watch(&Scope { resource, namespace: None }, &WatchOptions::default()).await?);
    while let Some(item) = events.next().await {
        if item.kind != "DELETED" {
            continue;
        }
        let Ok(sa) = serde_json::from_slice::<Value>(&item.object) else { continue };
        let namespace = krate_api::object::meta_str(&sa, "namespace").unwrap_or("");
        let (name, uid) = (krate_api::object::name(&sa), super::lookup::uid(&sa));
        let list = ListOptions { field_selector: Some(format!("type={SECRET_TYPE}")), ..Default::default() };
        let listed = registry.list(&secrets(registry, Some(namespace))?, &list).await?;
        for secret in listed.items.iter().filter_map(|b| serde_json::from_slice::<Value>(b).ok()) {
            if !is_token_of(&secret, name, uid) {
                continue;
            }
            let secret_name = krate_api::object::name(&secret);
            match delete_token(registry, namespace, secret_name, super::lookup::uid(&secret)).await {
                Ok(()) => tracing::info!(
                    namespace,
                    secret = secret_name,
                    serviceaccount = name,
                    "deleted the token secret of a deleted service account"
                ),
                Err(e) => {
                    tracing::warn!(namespace, secret = secret_name, error = %e.message, "deleting a token secret failed")
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, uid: Option<&str>) -> Value {
        let mut annotations = json!({SA_NAME_ANNOTATION: name});
        if let Some(uid) = uid {
            annotations[SA_UID_ANNOTATION] = json!(uid);
        }
        json!({"type": SECRET_TYPE, "metadata": {"name": "t", "annotations": annotations}})
    }

    #[test]
    fn tokens_belong_to_an_account_by_name_and_by_uid_when_given() {
        assert!(is_token_of(&token("sa", None), "sa", "u1"));
        assert!(is_token_of(&token("sa", Some("u1")), "sa", "u1"));
        assert!(!is_token_of(&token("sa", Some("u0")), "sa", "u1"));
        assert!(!is_token_of(&token("other", None), "sa", "u1"));
        let mut opaque = token("sa", None);
        opaque["type"] = json!("Opaque");
        assert!(!is_token_of(&opaque, "sa", "u1"));
    }
}
