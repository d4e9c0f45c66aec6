//! The admission chain: built-in plugins, run in order at the registry's admission
//! points. Webhooks, admission policies, PodSecurity and quotas join this chain with the
//! security and extensibility work.

mod namespace_lifecycle;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use krate_api::ApiResult;
use krate_api::admission::{Admission, Attributes};

pub use namespace_lifecycle::NamespaceLifecycle;

/// Plugins run in order; the first refusal ends the request.
pub struct Chain {
    plugins: Vec<Arc<dyn Admission>>,
}

impl Chain {
    pub fn new(plugins: Vec<Arc<dyn Admission>>) -> Self {
        Chain { plugins }
    }
}

#[async_trait]
impl Admission for Chain {
    async fn mutate(&self, attrs: &Attributes<'_>, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        for p in &self.plugins {
            p.mutate(attrs, obj, old).await?;
        }
        Ok(())
    }
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        for p in &self.plugins {
            p.validate(attrs, obj, old).await?;
        }
        Ok(())
    }
}
