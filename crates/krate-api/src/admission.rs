//! The admission stage of the request road, as the registry sees it. Plugins live in
//! `krate-admission`; the registry calls the chain at upstream's points: mutation before
//! the strategy prepares the object, validation after it has been validated.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::ApiResult;
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
}

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
