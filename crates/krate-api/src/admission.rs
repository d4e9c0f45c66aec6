//! The admission stage of the request road, as the registry sees it. Plugins live in
//! `krate-admission`; the registry calls the chain at upstream's points: mutation before
//! the strategy prepares the object, validation after it has been validated.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::ApiResult;
use crate::fieldvalidation::Warnings;
use crate::resource::ResourceInfo;
use crate::user::UserInfo;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// What is being admitted.
pub struct Attributes<'a> {
    pub operation: Operation,
    pub resource: &'a ResourceInfo,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub user: &'a UserInfo,
    pub dry_run: bool,
    /// Where plugins' warnings go (Warning headers); None for the server's own writes.
    pub warnings: Option<&'a Warnings>,
    /// Where plugins record audit annotations for this request's audit event.
    pub audit_annotations: Option<&'a AuditAnnotations>,
}

impl Attributes<'_> {
    /// A warning for the client (dropped for the server's own writes).
    pub fn warn(&self, message: impl Into<String>) {
        if let Some(w) = self.warnings {
            w.add(message);
        }
    }
    /// An annotation on the request's audit event, as upstream's admission plugins add them.
    pub fn annotate(&self, key: &str, value: impl Into<String>) {
        if let Some(a) = self.audit_annotations {
            a.add(key, value);
        }
    }
}

pub use crate::audit::AuditAnnotations;

#[async_trait]
pub trait Admission: Send + Sync {
    /// May change the object.
    async fn mutate(&self, _attrs: &Attributes<'_>, _obj: &mut Value, _old: Option<&Value>) -> ApiResult<()> {
        Ok(())
    }
    /// May only refuse.
    async fn validate(&self, _attrs: &Attributes<'_>, _obj: Option<&Value>, _old: Option<&Value>) -> ApiResult<()> {
        Ok(())
    }
}

/// No plugins.
pub struct NoAdmission;
impl Admission for NoAdmission {}
