//! TokenReview (is this token valid, and whose is it?) and SelfSubjectReview (who am
//! I? — `kubectl auth whoami`), answered by computation, nothing stored.

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::computed::{ComputedRequest, ComputedResource};
use krate_api::user::UserInfo;
use krate_api::{ApiError, ApiResult};
use serde_json::{Map, Value, json};

use super::BearerTokens;

/// authentication.k8s.io/v1 UserInfo: empty fields left out, as upstream's omitempty.
pub fn user_info_json(user: &UserInfo) -> Value {
    let mut out = Map::new();
    out.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        out.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        out.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        out.insert("extra".into(), json!(user.extra));
    }
    Value::Object(out)
}

fn answer(mut body: Value, kind: &str, status: Value) -> Value {
    if !body.is_object() {
        body = json!({});
    }
    body["apiVersion"] = json!("authentication.k8s.io/v1");
    body["kind"] = json!(kind);
    krate_api::object::meta_mut(&mut body).insert("creationTimestamp".into(), Value::Null);
    body["status"] = status;
    body
}

pub struct TokenReviews {
    pub tokens: Arc<BearerTokens>,
}

#[async_trait]
impl ComputedResource for TokenReviews {
    async fn create(&self, _req: &ComputedRequest<'_>, body: Value) -> ApiResult<Value> {
        let token = body.pointer("/spec/token").and_then(Value::as_str).unwrap_or("");
        if token.is_empty() {
            return Err(ApiError::bad_request("token is required for TokenReview in authentication"));
        }
        let audiences: Vec<String> = body
            .pointer("/spec/audiences")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        let status = match self.tokens.review(token, &audiences).await {
            Ok(found) => json!({
                "authenticated": true,
                "user": user_info_json(&found.user),
                "audiences": found.audiences,
            }),
            Err(e) => {
                tracing::debug!(error = %e, "TokenReview refused a token");
                let super::AuthnError::Invalid(msg) = e;
                json!({"user": {}, "error": msg})
            }
        };
        Ok(answer(body, "TokenReview", status))
    }
}

pub struct SelfSubjectReviews;

#[async_trait]
impl ComputedResource for SelfSubjectReviews {
    async fn create(&self, req: &ComputedRequest<'_>, body: Value) -> ApiResult<Value> {
        Ok(answer(body, "SelfSubjectReview", json!({"userInfo": user_info_json(req.user)})))
    }
}
