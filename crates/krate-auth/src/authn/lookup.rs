//! Reads of the objects credentials refer to (Secrets, ServiceAccounts, Pods, Nodes), as
//! upstream's authenticators read them: from the watch cache, live on a miss.

use krate_api::registry::Scope;
use krate_api::{ApiError, Registry};
use serde_json::Value;

/// The core/v1 object, None if it does not exist.
pub async fn core(
    registry: &Registry,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, ApiError> {
    let Some(resource) = registry.table.lookup("", "v1", plural) else {
        return Err(ApiError::internal(format!("{plural} are not served")));
    };
    let scope = Scope { resource, namespace: namespace.map(String::from) };
    match registry.get_cached_or_live(&scope, name).await {
        Ok(obj) => Ok(Some(obj)),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// A live (consistent) read of a core/v1 object, for writes that must see the latest.
pub async fn core_live(
    registry: &Registry,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Value, ApiError> {
    let resource = registry.table.lookup("", "v1", plural).ok_or_else(ApiError::not_found_path)?;
    registry.get(&Scope { resource, namespace: namespace.map(String::from) }, name).await
}

pub fn uid(obj: &Value) -> &str {
    krate_api::object::meta_str(obj, "uid").unwrap_or("")
}

/// Whether an object was marked for deletion before `seconds` ago (upstream keeps
/// tokens of a just-deleted object valid for a minute, for graceful shutdowns).
pub fn deleted_before(obj: &Value, seconds: i64) -> bool {
    let Some(ts) = krate_api::object::meta_str(obj, "deletionTimestamp") else { return false };
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => t < jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds),
        Err(_) => true,
    }
}

/// Compares secrets in time independent of where they differ.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
