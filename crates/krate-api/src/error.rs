//! API errors as upstream reports them: a metav1.Status with a reason, an HTTP code and
//! details (the object's name, group and kind, and one cause per offending field).

use serde::Serialize;
use serde_json::{Value, json};

use krate_store::StoreError;

/// One offending field of an invalid object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// e.g. "FieldValueInvalid", "FieldValueRequired", "FieldValueNotSupported".
    pub reason: String,
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn new(reason: impl Into<String>, message: impl Into<String>, field: impl Into<String>) -> Self {
        Cause { reason: reason.into(), message: message.into(), field: field.into() }
    }
    pub fn invalid(field: impl Into<String>, value: impl std::fmt::Display, detail: impl Into<String>) -> Self {
        let field = field.into();
        let detail = detail.into();
        Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {detail}", quote_value(&value.to_string())),
            field,
        }
    }
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        let message =
            if detail.is_empty() { "Required value".to_string() } else { format!("Required value: {detail}") };
        Cause { reason: "FieldValueRequired".into(), message, field: field.into() }
    }
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Cause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {}", detail.into()),
            field: field.into(),
        }
    }
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list = supported.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
        Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: \"{value}\": supported values: {list}"),
            field: field.into(),
        }
    }
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: may not be more than {max} bytes"),
            field: field.into(),
        }
    }
    pub fn duplicate(field: impl Into<String>, value: impl std::fmt::Display) -> Self {
        Cause {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: {}", quote_value(&value.to_string())),
            field: field.into(),
        }
    }
    /// The line upstream prints for this cause inside the Status message.
    fn summary(&self) -> String {
        if self.field.is_empty() { self.message.clone() } else { format!("{}: {}", self.field, self.message) }
    }
}

/// Upstream quotes string values and prints numbers bare.
fn quote_value(v: &str) -> String {
    if v.parse::<f64>().is_ok()
        || v == "true"
        || v == "false"
        || v == "null"
        || v.starts_with('{')
        || v.starts_with('[')
    {
        v.to_string()
    } else {
        format!("\"{v}\"")
    }
}

/// What a request failed with.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<Details>>,
    /// Seconds a client should wait (429, 503).
    pub retry_after: Option<u64>,
    /// A continue token offered with an expired list (status.metadata.continue).
    pub list_continue: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub uid: String,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: Option<u64>,
}

/// Identifies an object in messages: group-qualified resource and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    /// The plural resource name, as upstream messages use it ("configmaps").
    pub resource: String,
    /// The kind, for Invalid errors ("ConfigMap").
    pub kind: String,
    pub name: String,
}

impl Target {
    pub fn new(group: &str, resource: &str, kind: &str, name: &str) -> Self {
        Target { group: group.into(), resource: resource.into(), kind: kind.into(), name: name.into() }
    }
    /// "configmaps" or "deployments.apps".
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() { self.resource.clone() } else { format!("{}.{}", self.resource, self.group) }
    }
    fn qualified_kind(&self) -> String {
        if self.group.is_empty() { self.kind.clone() } else { format!("{}.{}", self.kind, self.group) }
    }
    fn details(&self) -> Details {
        Details {
            name: self.name.clone(),
            group: self.group.clone(),
            kind: self.resource.clone(),
            ..Default::default()
        }
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None, retry_after: None, list_continue: None }
    }

    pub fn not_found(t: &Target) -> Self {
        let mut e = Self::new(404, "NotFound", format!("{} \"{}\" not found", t.qualified_resource(), t.name));
        e.details = Some(Box::new(t.details()));
        e
    }
    pub fn already_exists(t: &Target) -> Self {
        let mut e =
            Self::new(409, "AlreadyExists", format!("{} \"{}\" already exists", t.qualified_resource(), t.name));
        e.details = Some(Box::new(t.details()));
        e
    }
    pub fn conflict(t: &Target, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{}\": {why}", t.qualified_resource(), t.name),
        );
        e.details = Some(Box::new(t.details()));
        e
    }
    /// A server-side apply that would change fields other managers own: upstream's
    /// details carry only the causes.
    pub fn apply_conflict(message: String, causes: Vec<Cause>) -> Self {
        let mut e = Self::new(409, "Conflict", message);
        e.details = Some(Box::new(Details { causes, ..Default::default() }));
        e
    }
    /// The usual optimistic-concurrency conflict.
    pub fn modified(t: &Target) -> Self {
        Self::conflict(t, "the object has been modified; please apply your changes to the latest version and try again")
    }
    pub fn invalid(t: &Target, causes: Vec<Cause>) -> Self {
        let summary = match causes.as_slice() {
            [] => String::new(),
            [one] => one.summary(),
            many => format!("[{}]", many.iter().map(Cause::summary).collect::<Vec<_>>().join(", ")),
        };
        let mut e = Self::new(422, "Invalid", format!("{} \"{}\" is invalid: {summary}", t.qualified_kind(), t.name));
        e.details = Some(Box::new(Details {
            name: t.name.clone(),
            group: t.group.clone(),
            kind: t.kind.clone(),
            causes,
            ..Default::default()
        }));
        e
    }
    /// A path no route serves.
    pub fn not_found_path() -> Self {
        let mut e = Self::new(404, "NotFound", "the server could not find the requested resource");
        e.details = Some(Box::default());
        e
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }
    pub fn forbidden_on(t: &Target, why: &str) -> Self {
        let mut e =
            Self::new(403, "Forbidden", format!("{} \"{}\" is forbidden: {why}", t.qualified_resource(), t.name));
        e.details = Some(Box::new(t.details()));
        e
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Gone", message)
    }
    /// A watch or list from a revision the server no longer has.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }
    pub fn too_many_requests(message: impl Into<String>, retry_after: u64) -> Self {
        let mut e = Self::new(429, "TooManyRequests", message);
        e.retry_after = Some(retry_after);
        e.details = Some(Box::new(Details { retry_after_seconds: Some(retry_after), ..Default::default() }));
        e
    }
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }

    /// Maps a store failure for an object onto the API error upstream gives.
    pub fn from_store(e: StoreError, t: &Target) -> Self {
        match e {
            StoreError::AlreadyExists(_) => Self::already_exists(t),
            StoreError::NotFound(_) => Self::not_found(t),
            StoreError::Conflict { .. } => Self::modified(t),
            StoreError::Compacted { requested, compacted } => {
                Self::expired(format!("too old resource version: {requested} ({compacted})"))
            }
            StoreError::FutureRevision { requested, current } => {
                Self::timeout(format!("Too large resource version: {requested}, current: {current}"))
            }
            other => Self::internal(other.to_string()),
        }
    }

    /// The metav1.Status body.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(token) = &self.list_continue {
            status["metadata"] = json!({"continue": token});
        }
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            let mut put = |k: &str, v: &str| {
                if !v.is_empty() {
                    details.insert(k.into(), Value::String(v.into()));
                }
            };
            put("name", &d.name);
            put("group", &d.group);
            put("kind", &d.kind);
            put("uid", &d.uid);
            if !d.causes.is_empty() {
                details.insert("causes".into(), serde_json::to_value(&d.causes).unwrap_or(Value::Null));
            }
            if let Some(s) = d.retry_after_seconds {
                details.insert("retryAfterSeconds".into(), json!(s));
            }
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_upstream_shape() {
        let t = Target::new("apps", "deployments", "Deployment", "web");
        let s = ApiError::not_found(&t).status();
        assert_eq!(s["message"], "deployments.apps \"web\" not found");
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"], json!({"name": "web", "group": "apps", "kind": "deployments"}));
    }

    #[test]
    fn invalid_lists_every_cause() {
        let t = Target::new("", "configmaps", "ConfigMap", "Bad_Name");
        let e = ApiError::invalid(
            &t,
            vec![
                Cause::invalid("metadata.name", "Bad_Name", "a lowercase RFC 1123 subdomain"),
                Cause::required("data", ""),
            ],
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "ConfigMap \"Bad_Name\" is invalid: [metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain, data: Required value]"
        );
        assert_eq!(e.status()["details"]["causes"].as_array().unwrap().len(), 2);
        assert_eq!(e.status()["details"]["kind"], "ConfigMap");
    }
}
