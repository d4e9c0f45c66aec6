//! AdmissionReview (admission.k8s.io/v1 and v1beta1): the request a webhook receives
//! and the checks upstream makes of its answer (`webhook/request/admissionreview.go`).

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};

use krate_api::admission::{Attributes, Operation};
use krate_api::resource::ResourceInfo;

use super::matching::operation_name;

/// What the webhook is told: the request as the client made it and, where the webhook
/// matched an equivalent version, that version.
pub struct Request<'a> {
    pub uid: &'a str,
    pub version: &'a str,
    pub attrs: &'a Attributes<'a>,
    /// The resource in the version the webhook sees.
    pub resource: &'a ResourceInfo,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
}

fn kind_of(r: &ResourceInfo, sub: Option<&str>) -> Value {
    // A subresource without a version of its own (status, finalize) is of its parent's
    // group-version; scale names autoscaling/v1.
    let (group, version, kind) = match sub.and_then(|s| r.subresource(s)).filter(|s| !s.kind.is_empty()) {
        Some(s) if !s.version.is_empty() => (s.group.as_str(), s.version.as_str(), s.kind.as_str()),
        Some(s) => (r.group.as_str(), r.version.as_str(), s.kind.as_str()),
        None => (r.group.as_str(), r.version.as_str(), r.kind.as_str()),
    };
    json!({"group": group, "version": version, "kind": kind})
}

fn resource_of(r: &ResourceInfo) -> Value {
    json!({"group": r.group, "version": r.version, "resource": r.plural})
}

/// The options object upstream sends with each operation.
fn options(attrs: &Attributes<'_>) -> Value {
    let kind = match attrs.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => return Value::Null,
    };
    let mut o = json!({"apiVersion": "meta.k8s.io/v1", "kind": kind});
    if attrs.dry_run {
        o["dryRun"] = json!(["All"]);
    }
    o
}

impl Request<'_> {
    /// The AdmissionReview body.
    pub fn to_json(&self) -> Value {
        let a = self.attrs;
        let sub = a.subresource.filter(|s| !s.is_empty());
        let user = a.user;
        let mut user_info = json!({"username": user.name});
        if !user.uid.is_empty() {
            user_info["uid"] = json!(user.uid);
        }
        if !user.groups.is_empty() {
            user_info["groups"] = json!(user.groups);
        }
        if !user.extra.is_empty() {
            user_info["extra"] = json!(user.extra);
        }
        let mut request = json!({
            "uid": self.uid,
            "kind": kind_of(self.resource, sub),
            "resource": resource_of(self.resource),
            "requestKind": kind_of(a.resource, sub),
            "requestResource": resource_of(a.resource),
            "operation": operation_name(a.operation),
            "userInfo": user_info,
            "object": self.object.cloned().unwrap_or(Value::Null),
            "oldObject": self.old_object.cloned().unwrap_or(Value::Null),
            "dryRun": a.dry_run,
            "options": options(a),
        });
        let m = request.as_object_mut().expect("an object");
        if let Some(s) = sub {
            m.insert("subResource".into(), json!(s));
            m.insert("requestSubResource".into(), json!(s));
        }
        if !a.name.is_empty() {
            m.insert("name".into(), json!(a.name));
        }
        if let Some(ns) = a.namespace.filter(|n| !n.is_empty()) {
            m.insert("namespace".into(), json!(ns));
        }
        json!({"apiVersion": format!("admission.k8s.io/{}", self.version), "kind": "AdmissionReview", "request": request})
    }
}

/// A verified webhook answer.
#[derive(Debug, Default)]
pub struct Response {
    pub allowed: bool,
    /// The metav1.Status of a refusal, if the webhook gave one.
    pub result: Option<Value>,
    /// The decoded JSONPatch, if any.
    pub patch: Option<Vec<u8>>,
    pub audit_annotations: BTreeMap<String, String>,
    pub warnings: Vec<String>,
}

/// Upstream's VerifyAdmissionResponse: the answer must be an AdmissionReview of the
/// version sent, for this request's uid (v1); validating webhooks may not patch;
/// a patch comes with patchType JSONPatch.
pub fn verify(uid: &str, version: &str, mutating: bool, body: &[u8]) -> Result<Response, String> {
    let review: Value = serde_json::from_slice(body).map_err(|e| format!("couldn't decode the response: {e}"))?;
    let r = review.get("response").filter(|r| r.is_object()).ok_or("webhook response was absent")?;
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    if version == "v1" {
        if s("uid") != uid {
            return Err(format!("expected response.uid={uid:?}, got {:?}", s("uid")));
        }
        let gv = review.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = review.get("kind").and_then(Value::as_str).unwrap_or("");
        if (gv, kind) != ("admission.k8s.io/v1", "AdmissionReview") {
            let (g, v) = gv.split_once('/').unwrap_or(("", gv));
            return Err(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}{v}, Kind={kind}",
                if g.is_empty() { String::new() } else { format!("{g}/") }
            ));
        }
    }
    let patch = match r.get("patch").and_then(Value::as_str).filter(|p| !p.is_empty()) {
        Some(p) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| format!("couldn't decode the response: {e}"))?,
        ),
        None => None,
    };
    let patch_type = s("patchType");
    if version == "v1" {
        if mutating && patch.is_some() && patch_type.is_empty() {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        if mutating && patch.is_none() && !patch_type.is_empty() {
            return Err("webhook returned response.patchType but not response.patch".into());
        }
    }
    if !mutating && patch.is_some() {
        return Err("validating webhook may not return response.patch".into());
    }
    if !mutating && !patch_type.is_empty() {
        return Err("validating webhook may not return response.patchType".into());
    }
    if patch.is_some() && !patch_type.is_empty() && patch_type != "JSONPatch" {
        return Err(format!("unsupported patch type {patch_type:?}"));
    }
    let audit_annotations = r
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect();
    let warnings = r
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect();
    Ok(Response {
        allowed: r.get("allowed").and_then(Value::as_bool).unwrap_or(false),
        result: r.get("status").filter(|s| s.is_object()).cloned(),
        patch,
        audit_annotations,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(response: Value) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        )
        .unwrap()
    }

    #[test]
    fn answers_are_checked_as_upstream() {
        let ok = verify("u", "v1", true, &answer(json!({"uid": "u", "allowed": true, "warnings": ["w"]}))).unwrap();
        assert!(ok.allowed && ok.warnings == ["w"]);
        let e = verify("u", "v1", true, &answer(json!({"uid": "x", "allowed": true}))).unwrap_err();
        assert_eq!(e, "expected response.uid=\"u\", got \"x\"");
        let e = verify(
            "u",
            "v1",
            false,
            &answer(json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"})),
        )
        .unwrap_err();
        assert_eq!(e, "validating webhook may not return response.patch");
        let e = verify("u", "v1", true, &answer(json!({"uid": "u", "allowed": true, "patch": "W10="}))).unwrap_err();
        assert_eq!(e, "webhook returned response.patch but not response.patchType");
        let body = br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}"#;
        let e = verify("u", "v1", true, body).unwrap_err();
        assert!(e.contains("got admission.k8s.io/v1beta1, Kind=AdmissionReview"), "{e}");
        // v1beta1 answers are not held to the uid.
        let body = br#"{"response":{"allowed":true,"patch":"W10=","patchType":"JSONPatch"}}"#;
        assert_eq!(verify("u", "v1beta1", true, body).unwrap().patch.as_deref(), Some(&b"[]"[..]));
    }
}
