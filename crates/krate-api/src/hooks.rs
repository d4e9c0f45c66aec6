//! Work some kinds need around their writes, beyond a strategy's pure transforms —
//! allocating cluster IPs and node ports for Services, as upstream's service storage
//! wraps the generic store. Hooks run inside the registry's create/update/delete.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::ApiResult;
use crate::registry::Registry;

/// Something a hook took that must be given back if the write does not happen.
#[async_trait]
pub trait Undo: Send + Sync {
    async fn undo(&self, registry: &Registry);
}

pub type Undos = Vec<Box<dyn Undo>>;

#[async_trait]
pub trait RestHooks: Send + Sync {
    /// Before a create is stored (after validation); may fill in the object.
    async fn before_create(&self, registry: &Registry, obj: &mut Value, dry_run: bool) -> ApiResult<Undos>;
    /// Before an update is stored; may fill in the new object.
    async fn before_update(&self, registry: &Registry, new: &mut Value, old: &Value, dry_run: bool)
    -> ApiResult<Undos>;
    /// After an update is stored: release what the old object held and the new does not.
    async fn after_update(&self, registry: &Registry, new: &Value, old: &Value);
    /// After a delete is stored: release what the object held.
    async fn after_delete(&self, registry: &Registry, old: &Value);
}

pub async fn undo_all(registry: &Registry, undos: Undos) {
    for u in undos {
        u.undo(registry).await;
    }
}
