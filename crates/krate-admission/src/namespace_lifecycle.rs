//! NamespaceLifecycle, as upstream's plugin: nothing is created in a namespace that does
//! not exist or is being deleted, and the system namespaces cannot be deleted.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::registry::Scope;
use krate_api::{ApiError, ApiResult, Registry, Target, object};

/// Namespaces that always exist.
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

pub struct NamespaceLifecycle {
    registry: Weak<Registry>,
}

impl NamespaceLifecycle {
    pub fn new(registry: &Arc<Registry>) -> Self {
        NamespaceLifecycle { registry: Arc::downgrade(registry) }
    }
}

#[async_trait]
impl Admission for NamespaceLifecycle {
    async fn validate(&self, attrs: &Attributes<'_>, _obj: Option<&Value>, _old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        if r.group.is_empty() && r.plural == "namespaces" {
            if attrs.operation == Operation::Delete && IMMORTAL_NAMESPACES.contains(&attrs.name) {
                return Err(ApiError::forbidden_on(
                    &Target::new("", "namespaces", "Namespace", attrs.name),
                    "this namespace may not be deleted",
                ));
            }
            return Ok(());
        }
        let (Operation::Create, Some(ns)) = (attrs.operation, attrs.namespace) else { return Ok(()) };
        if !r.namespaced || r.is_virtual() {
            return Ok(());
        }
        let Some(registry) = self.registry.upgrade() else { return Ok(()) };
        let Some(namespaces) = registry.table.lookup("", "v1", "namespaces") else { return Ok(()) };
        let scope = Scope { resource: namespaces, namespace: None };
        let namespace = registry.get_cached_or_live(&scope, ns).await?;
        if object::is_deleting(&namespace) {
            return Err(ApiError::forbidden_on(
                &Target::new(&r.group, &r.plural, &r.kind, attrs.name),
                &format!("unable to create new content in namespace {ns} because it is being terminated"),
            ));
        }
        Ok(())
    }
}
