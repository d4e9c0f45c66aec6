//! The audit.k8s.io/v1 Event a request produces at each stage, and how request and
//! response objects and statuses go into it.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use krate_api::user::UserInfo;

use super::policy::{Level, Stage};

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventUser {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for EventUser {
    fn from(u: &UserInfo) -> Self {
        EventUser { username: u.name.clone(), uid: u.uid.clone(), groups: u.groups.clone(), extra: u.extra.clone() }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: EventUser,
    /// Filled by impersonation: the user the request acts as, `user` being who asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<EventUser>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    pub request_received_timestamp: String,
    pub stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Event {
    pub fn new(audit_id: String, request_uri: String, user_agent: String, source_ips: Vec<String>) -> Event {
        let now = micro_time();
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::None,
            audit_id,
            stage: Stage::RequestReceived,
            request_uri,
            verb: String::new(),
            user: EventUser::default(),
            impersonated_user: None,
            source_ips,
            user_agent,
            object_ref: None,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: now.clone(),
            stage_timestamp: now,
            annotations: BTreeMap::new(),
        }
    }
}

/// Now as a metav1.MicroTime (RFC 3339 with microseconds, UTC).
pub fn micro_time() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The client's addresses, as upstream's SourceIPs: X-Forwarded-For entries, then
/// X-Real-Ip, then the connection's peer, each once.
pub fn source_ips(headers: &http::HeaderMap, peer: Option<std::net::IpAddr>) -> Vec<String> {
    let mut ips: Vec<String> = Vec::new();
    let mut push = |ip: std::net::IpAddr| {
        let s = ip.to_string();
        if !ips.contains(&s) {
            ips.push(s);
        }
    };
    if let Some(xff) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        xff.split(',').filter_map(|p| p.trim().parse().ok()).for_each(&mut push);
    }
    if let Some(ip) = headers.get("x-real-ip").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok()) {
        push(ip);
    }
    if let Some(ip) = peer {
        push(ip);
    }
    ips
}

/// The responseStatus of an answer: a Status body is kept (trimmed to upstream's
/// fields), any other answer records its code.
pub fn response_status(code: u16, body: Option<&Value>) -> Value {
    match body {
        Some(s) if s.get("kind").and_then(Value::as_str) == Some("Status") => {
            let mut out = json!({"metadata": {}, "code": code});
            for f in ["status", "message", "reason", "details"] {
                if let Some(v) = s.get(f).filter(|v| !v.is_null() && *v != &json!("")) {
                    out[f] = v.clone();
                }
            }
            out
        }
        _ => json!({"metadata": {}, "code": code}),
    }
}

/// Removes metadata.managedFields from an object, and from a list's items.
pub fn omit_managed_fields(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    for item in obj.get_mut("items").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(m) = item.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_like_upstream() {
        let mut ev = Event::new("id-1".into(), "/api/v1/pods?limit=1".into(), "kubectl/v1".into(), vec![]);
        ev.level = Level::Metadata;
        ev.stage = Stage::ResponseComplete;
        ev.verb = "list".into();
        ev.user =
            EventUser { username: "jane".into(), groups: vec!["system:authenticated".into()], ..Default::default() };
        ev.object_ref = Some(ObjectRef { resource: "pods".into(), api_version: "v1".into(), ..Default::default() });
        ev.response_status = Some(response_status(200, None));
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(v["auditID"], "id-1");
        assert_eq!(v["requestURI"], "/api/v1/pods?limit=1");
        assert_eq!(v["objectRef"], json!({"resource": "pods", "apiVersion": "v1"}));
        assert_eq!(v["responseStatus"], json!({"metadata": {}, "code": 200}));
        assert!(v.get("sourceIPs").is_none() && v.get("requestObject").is_none());
        let ts = v["stageTimestamp"].as_str().unwrap();
        assert_eq!(ts.len(), "2024-01-01T00:00:00.000000Z".len(), "{ts}");
    }

    #[test]
    fn source_ips_come_from_forwarding_headers_then_the_peer() {
        let mut h = http::HeaderMap::new();
        h.insert("x-forwarded-for", "10.0.0.1, 10.0.0.2, bogus".parse().unwrap());
        h.insert("x-real-ip", "10.0.0.2".parse().unwrap());
        assert_eq!(source_ips(&h, Some("127.0.0.1".parse().unwrap())), ["10.0.0.1", "10.0.0.2", "127.0.0.1"]);
    }

    #[test]
    fn error_statuses_keep_reason_and_message() {
        let s = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "no", "reason": "Forbidden", "code": 403});
        assert_eq!(
            response_status(403, Some(&s)),
            json!({"metadata": {}, "code": 403, "status": "Failure", "message": "no", "reason": "Forbidden"})
        );
        let mut list =
            json!({"metadata": {"managedFields": []}, "items": [{"metadata": {"name": "a", "managedFields": []}}]});
        omit_managed_fields(&mut list);
        assert_eq!(list, json!({"metadata": {}, "items": [{"metadata": {"name": "a"}}]}));
    }
}
