//! Resources answered by computation instead of storage: the reviews (TokenReview,
//! SubjectAccessReview and friends, SelfSubjectReview) and create-only subresources such
//! as serviceaccounts/token. They take the same road as every request up to the
//! registry (authentication, audit, authorization); there a handler computes the answer
//! from the request body and nothing is stored.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::ApiResult;
use crate::resource::ResourceInfo;
use crate::user::UserInfo;

/// One create request for a computed resource.
pub struct ComputedRequest<'a> {
    pub resource: &'a ResourceInfo,
    /// For subresources, the parent object's name (serviceaccounts/NAME/token).
    pub name: &'a str,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub user: &'a UserInfo,
    pub dry_run: bool,
}

#[async_trait]
pub trait ComputedResource: Send + Sync {
    /// The answer to `body` (the decoded request object): the same kind with its status
    /// filled in, sent back with 201 Created as upstream does.
    async fn create(&self, req: &ComputedRequest<'_>, body: Value) -> ApiResult<Value>;
}
