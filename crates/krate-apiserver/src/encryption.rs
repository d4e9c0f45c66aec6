//! Encryption at rest wired into the server: the store the registry sees is wrapped in
//! `krate_encryption::EncryptedStore`, which learns from the resource table which
//! resource a key belongs to, and the KMS providers' health joins the health checks.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use futures::future::BoxFuture;
use krate_api::ResourceTable;
use krate_encryption::{EncryptedStore, Encryption, GroupResource, KeyResolver};
use krate_store::DynStore;
use parking_lot::{Mutex, RwLock};

use crate::health::{Check, ExtraChecks};

/// The store the registry uses: encrypting when configured.
pub fn wrap_store(store: DynStore, encryption: Option<&Arc<Encryption>>, table: &Arc<ResourceTable>) -> DynStore {
    match encryption {
        Some(e) => Arc::new(EncryptedStore::new(store, e.clone(), Arc::new(TableResolver::new(table.clone())))),
        None => store,
    }
}

/// Key → resource through the table's key prefixes, rebuilt when the table changes
/// (custom resources come and go).
pub struct TableResolver {
    table: Arc<ResourceTable>,
    /// (table generation, key prefix → resource).
    prefixes: RwLock<(u64, HashMap<String, GroupResource>)>,
}

impl TableResolver {
    pub fn new(table: Arc<ResourceTable>) -> Self {
        TableResolver { table, prefixes: RwLock::new((u64::MAX, HashMap::new())) }
    }

    fn rebuild(&self, generation: u64) {
        let mut map: HashMap<String, GroupResource> = HashMap::new();
        for r in self.table.all() {
            // events.k8s.io Events are stored as core Events, and configured as "events".
            let group = if r.key_prefix == "/registry/events/" { "" } else { r.group.as_str() };
            map.insert(r.key_prefix.clone(), GroupResource::new(group, &r.plural));
        }
        *self.prefixes.write() = (generation, map);
    }
}

impl KeyResolver for TableResolver {
    fn resolve(&self, key: &str) -> Option<GroupResource> {
        let generation = self.table.generation();
        if self.prefixes.read().0 != generation {
            self.rebuild(generation);
        }
        // Prefixes are "/registry/<resource>/" or "/registry/<group>/<resource>/".
        let rest = key.strip_prefix("/registry/")?;
        let mut ends = rest.match_indices('/').map(|(i, _)| "/registry/".len() + i + 1);
        let one = ends.next()?;
        let two = ends.next();
        let prefixes = self.prefixes.read();
        two.and_then(|two| prefixes.1.get(&key[..two])).or_else(|| prefixes.1.get(&key[..one])).cloned()
    }
}

/// Upstream's names: one `kms-providers` check when the configuration reloads (the
/// providers can change), else `kms-provider-0`, `kms-provider-1`, ….
pub struct KmsHealth(pub Arc<Encryption>);

/// Check names are static; KMS check names are few and made once each.
fn static_name(name: String) -> &'static str {
    static NAMES: LazyLock<Mutex<Vec<&'static str>>> = LazyLock::new(Default::default);
    let mut names = NAMES.lock();
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.push(leaked);
    leaked
}

impl ExtraChecks for KmsHealth {
    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(async move {
            let results = self.0.kms_health().await;
            if self.0.automatic_reload() {
                if results.is_empty() {
                    return Vec::new();
                }
                let errors: Vec<String> = results.into_iter().filter_map(|(_, r)| r.err()).collect();
                let result = if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) };
                return vec![Check { name: "kms-providers", result }];
            }
            results.into_iter().map(|(name, result)| Check { name: static_name(name), result }).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_resolve_to_their_resource() {
        let r = TableResolver::new(Arc::new(ResourceTable::builtin()));
        assert_eq!(r.resolve("/registry/secrets/default/a"), Some(GroupResource::new("", "secrets")));
        assert_eq!(r.resolve("/registry/apps/deployments/ns/d"), Some(GroupResource::new("apps", "deployments")));
        assert_eq!(r.resolve("/registry/events/ns/e"), Some(GroupResource::new("", "events")));
        assert_eq!(r.resolve("/registry/namespaces/default"), Some(GroupResource::new("", "namespaces")));
        assert_eq!(r.resolve("/other/x"), None);
        assert_eq!(r.resolve("/registry/nothing-here/x"), None);
    }
}
