//! `POST serviceaccounts/NAME/token`: an authentication.k8s.io/v1 TokenRequest in, the
//! same with status.token and status.expirationTimestamp out. The token may be bound to
//! a Pod, Secret or Node; it is valid while the ServiceAccount and that object live.

use std::sync::Arc;

use async_trait::async_trait;
use krate_api::computed::{ComputedRequest, ComputedResource};
use krate_api::{ApiError, ApiResult, Cause, Registry, Target};
use serde_json::{Value, json};

use super::lookup::{self, uid};
use super::serviceaccount::{BoundClaims, BoundObject, ServiceAccountTokens};

/// Upstream's limits and default for expirationSeconds.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

pub struct TokenRequests {
    pub tokens: Arc<ServiceAccountTokens>,
    pub registry: Arc<Registry>,
    /// The longest lifetime issued (--service-account-max-token-expiration): longer
    /// requests are granted this much, as upstream does, not refused.
    pub max_expiration_seconds: Option<i64>,
}

fn invalid(name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&Target::new("authentication.k8s.io", "tokenrequests", "TokenRequest", name), causes)
}

async fn get(registry: &Registry, plural: &str, namespace: Option<&str>, name: &str) -> ApiResult<Value> {
    lookup::core_live(registry, plural, namespace, name).await
}

#[async_trait]
impl ComputedResource for TokenRequests {
    async fn create(&self, req: &ComputedRequest<'_>, body: Value) -> ApiResult<Value> {
        let (name, namespace) = (req.name, req.namespace.unwrap_or(""));
        let mut out = body;
        if !out.is_object() {
            return Err(ApiError::bad_request("the request body is not a TokenRequest"));
        }
        let spec = out.get("spec").cloned().unwrap_or_else(|| json!({}));
        let expiration = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
            Some(v) => v.as_i64().ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
        };
        let field = "spec.expirationSeconds";
        if expiration < MIN_EXPIRATION_SECONDS {
            return Err(invalid(
                name,
                vec![Cause::invalid(field, expiration, "may not specify a duration less than 10 minutes")],
            ));
        }
        if expiration > MAX_EXPIRATION_SECONDS {
            return Err(invalid(
                name,
                vec![Cause::invalid(field, expiration, "may not specify a duration larger than 2^32 seconds")],
            ));
        }
        let expiration = match self.max_expiration_seconds {
            Some(max) if max > 0 && expiration > max => max,
            _ => expiration,
        };
        let mut audiences: Vec<String> = spec
            .get("audiences")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        if audiences.is_empty() {
            audiences = self.tokens.api_audiences().to_vec();
        }
        let sa = get(&self.registry, "serviceaccounts", Some(namespace), name).await?;
        let mut claims = BoundClaims {
            namespace: namespace.to_string(),
            service_account: BoundObject { name: name.to_string(), uid: uid(&sa).to_string() },
            audiences: audiences.clone(),
            expiration_seconds: expiration,
            ..Default::default()
        };
        if let Some(bound) = spec.get("boundObjectRef").filter(|v| v.is_object()) {
            let s = |k: &str| bound.get(k).and_then(Value::as_str).unwrap_or("");
            let (api_version, kind, obj_name, obj_uid) = (s("apiVersion"), s("kind"), s("name"), s("uid"));
            let core = api_version.is_empty() || api_version == "v1";
            let (plural, ns) = match kind {
                "Pod" if core => ("pods", Some(namespace)),
                "Secret" if core => ("secrets", Some(namespace)),
                "Node" if core => ("nodes", None),
                _ => {
                    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
                    let version = api_version.rsplit_once('/').map(|(_, v)| v).unwrap_or(api_version);
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token to object of type {group}/{version}, Kind={kind}"
                    )));
                }
            };
            let obj = get(&self.registry, plural, ns, obj_name).await?;
            let found = BoundObject { name: obj_name.to_string(), uid: uid(&obj).to_string() };
            if !obj_uid.is_empty() && obj_uid != found.uid {
                return Err(ApiError::conflict(
                    &Target::new("", kind, kind, obj_name),
                    &format!(
                        "the UID in the bound object reference ({obj_uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                        found.uid
                    ),
                ));
            }
            match kind {
                "Pod" => {
                    if obj.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("default") != name {
                        return Err(ApiError::bad_request(format!(
                            "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                        )));
                    }
                    // The pod's node goes in too, for information (uid when it exists).
                    if let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
                    {
                        let node_uid = match lookup::core(&self.registry, "nodes", None, node).await? {
                            Some(n) => uid(&n).to_string(),
                            None => String::new(),
                        };
                        claims.node = Some(BoundObject { name: node.to_string(), uid: node_uid });
                    }
                    claims.pod = Some(found);
                }
                "Secret" => claims.secret = Some(found),
                _ => claims.node = Some(found),
            }
        }
        out["apiVersion"] = json!("authentication.k8s.io/v1");
        out["kind"] = json!("TokenRequest");
        let meta = krate_api::object::meta_mut(&mut out);
        meta.insert("name".into(), json!(name));
        meta.insert("namespace".into(), json!(namespace));
        meta.insert("creationTimestamp".into(), Value::Null);
        out["spec"]["audiences"] = json!(audiences);
        out["spec"]["expirationSeconds"] = json!(expiration);
        if req.dry_run {
            out["status"] = json!({"token": "", "expirationTimestamp": Value::Null});
            return Ok(out);
        }
        let (token, exp) = self.tokens.issue(&claims);
        let exp = jiff::Timestamp::from_second(exp).unwrap_or_else(|_| jiff::Timestamp::now());
        out["status"] = json!({"token": token, "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()});
        Ok(out)
    }
}
