//! certificates.k8s.io: CertificateSigningRequests, as upstream's
//! pkg/apis/certificates/validation and the CSR registry strategy.

use base64::Engine;
use serde_json::{Value, json};
use x509_parser::prelude::FromDer;

use crate::error::Cause;
use crate::user::UserInfo;

/// Upstream's signer that no longer signs (and new CSRs may not name).
pub const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";

/// Every usage upstream knows (KeyUsage values).
pub const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "signing",
    "server auth",
    "timestamping",
];

/// The condition types that may only be True, and that updates may not remove.
const TERMINAL: &[&str] = &["Approved", "Denied", "Failed"];

/// The requester: spec.username, uid, groups and extra are whoever created the CSR,
/// whatever the body said.
pub fn set_requester(csr: &mut Value, user: &UserInfo) {
    let spec = super::obj_mut(csr, "spec");
    let m = spec.as_object_mut().expect("an object");
    for f in ["username", "uid", "groups", "extra"] {
        m.remove(f);
    }
    if !user.name.is_empty() {
        m.insert("username".into(), json!(user.name));
    }
    if !user.uid.is_empty() {
        m.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        m.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        m.insert("extra".into(), json!(user.extra));
    }
}

/// The DER of the PEM CSR in spec.request (base64 in JSON), signature checked.
pub fn request_der(csr: &Value) -> Result<Vec<u8>, String> {
    let b64 = csr.pointer("/spec/request").and_then(Value::as_str).unwrap_or("");
    let pem = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| format!("illegal base64 data: {e}"))?;
    let block = x509_parser::pem::Pem::iter_from_buffer(&pem).next().and_then(Result::ok);
    let Some(block) = block.filter(|b| b.label == "CERTIFICATE REQUEST") else {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    };
    let (_, req) = x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    req.verify_signature().map_err(|e| format!("x509: certificate request signature is invalid: {e}"))?;
    Ok(block.contents)
}

/// The subject organizations (O) of the CSR in spec.request; none if it does not parse.
pub fn request_organizations(csr: &Value) -> Vec<String> {
    let Ok(der) = request_der(csr) else { return Vec::new() };
    let Ok((_, req)) = x509_parser::certification_request::X509CertificationRequest::from_der(&der) else {
        return Vec::new();
    };
    let subject = &req.certification_request_info.subject;
    subject.iter_organization().filter_map(|o| o.as_str().ok().map(String::from)).collect()
}

fn certificate_error(b64: &str) -> Option<String> {
    if b64.is_empty() {
        return None;
    }
    let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(b64) else {
        return Some("must contain at least one CERTIFICATE PEM block".into());
    };
    let mut blocks = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(&pem) {
        let Ok(block) = block else { break };
        if block.label != "CERTIFICATE" {
            return Some(format!("only CERTIFICATE PEM blocks are allowed, found {:?}", block.label));
        }
        if let Err(e) = x509_parser::certificate::X509Certificate::from_der(&block.contents) {
            return Some(e.to_string());
        }
        blocks += 1;
    }
    (blocks == 0).then(|| "must contain at least one CERTIFICATE PEM block".into())
}

fn validate_signer_name(name: &str) -> Vec<Cause> {
    let field = "spec.signerName";
    if name.is_empty() {
        return vec![Cause::required(field, "")];
    }
    let Some((domain, path)) = name.split_once('/') else {
        return vec![Cause::invalid(
            field,
            format!("{name:?}"),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        )];
    };
    let mut causes = Vec::new();
    if path.is_empty() || path.contains('/') && path.split('/').any(str::is_empty) {
        causes.push(Cause::invalid(
            field,
            format!("{name:?}"),
            "validating path: must not be empty or contain empty segments",
        ));
    }
    if !domain.contains('.') || !crate::validation::is_dns1123_subdomain(domain) {
        causes.push(Cause::invalid(
            field,
            format!("{name:?}"),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
    }
    causes
}

fn conditions(csr: &Value) -> Vec<&Value> {
    csr.pointer("/status/conditions").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
}

fn ctype(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or("")
}

fn validate_conditions(csr: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (mut approved, mut denied) = (false, false);
    let mut seen = std::collections::HashSet::new();
    for (i, c) in conditions(csr).into_iter().enumerate() {
        let t = ctype(c);
        let path = format!("status.conditions[{i}]");
        if t.is_empty() {
            causes.push(Cause::required(format!("{path}.type"), ""));
        }
        let status = c.get("status").and_then(Value::as_str).unwrap_or("");
        let allowed: &[&str] = if TERMINAL.contains(&t) { &["True"] } else { &["False", "True", "Unknown"] };
        if status.is_empty() {
            causes.push(Cause::required(format!("{path}.status"), ""));
        } else if !allowed.contains(&status) {
            causes.push(Cause::not_supported(format!("{path}.status"), status, allowed));
        }
        match t {
            "Approved" => approved = true,
            "Denied" => denied = true,
            _ => {}
        }
        if (t == "Approved" && denied) || (t == "Denied" && approved) {
            causes.push(Cause::invalid(
                format!("{path}.type"),
                format!("{t:?}"),
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
        if !seen.insert(t.to_string()) {
            causes.push(Cause::duplicate(format!("{path}.type"), format!("{t:?}")));
        }
    }
    causes
}

/// Validation of a new CSR.
pub fn validate_csr(csr: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Err(e) = request_der(csr) {
        causes.push(Cause::invalid("spec.request", "[]byte{...}", e));
    }
    let usages: Vec<&str> =
        csr.pointer("/spec/usages").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    if usages.is_empty() {
        causes.push(Cause::required("spec.usages", ""));
    }
    for (i, u) in usages.iter().enumerate() {
        if !USAGES.contains(u) {
            causes.push(Cause::not_supported(format!("spec.usages[{i}]"), u, USAGES));
        }
        if usages[..i].contains(u) {
            causes.push(Cause::duplicate(format!("spec.usages[{i}]"), format!("{u:?}")));
        }
    }
    let signer = csr.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
    if signer == LEGACY_UNKNOWN_SIGNER {
        causes.push(Cause::invalid(
            "spec.signerName",
            format!("{signer:?}"),
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        causes.extend(validate_signer_name(signer));
    }
    if let Some(secs) = csr.pointer("/spec/expirationSeconds").and_then(Value::as_i64)
        && secs < 600
    {
        causes.push(Cause::invalid(
            "spec.expirationSeconds",
            secs,
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    causes.extend(validate_conditions(csr));
    if let Some(e) = certificate_error(csr.pointer("/status/certificate").and_then(Value::as_str).unwrap_or("")) {
        causes.push(Cause::invalid("status.certificate", "<certificate data>", e));
    }
    causes
}

/// Updates through `subresource` ("" for the object itself, "status", "approval"):
/// terminal conditions stay; only approval sets Approved/Denied; only status sets the
/// certificate, once.
pub fn validate_csr_update(subresource: &str, new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = validate_conditions(new);
    let of_type = |csr: &Value, t: &str| -> Vec<Value> {
        conditions(csr).into_iter().filter(|c| ctype(c) == t).cloned().collect()
    };
    for t in TERMINAL {
        if of_type(new, t).len() < of_type(old, t).len() {
            causes.push(Cause::forbidden(
                "status.conditions",
                format!("updates may not remove a condition of type {t:?}"),
            ));
        }
    }
    if subresource != "approval" {
        for t in ["Approved", "Denied"] {
            let (o, n) = (of_type(old, t), of_type(new, t));
            if n.len() > o.len() {
                causes.push(Cause::forbidden(
                    "status.conditions",
                    format!("updates may not add a condition of type {t:?}"),
                ));
            } else if n.len() == o.len() && n != o {
                causes.push(Cause::forbidden(
                    "status.conditions",
                    format!("updates may not modify a condition of type {t:?}"),
                ));
            }
        }
    }
    let cert = |csr: &Value| csr.pointer("/status/certificate").and_then(Value::as_str).unwrap_or("").to_string();
    let (old_cert, new_cert) = (cert(old), cert(new));
    if new_cert != old_cert {
        if subresource != "status" {
            causes.push(Cause::forbidden("status.certificate", "updates may not set certificate content"));
        } else if !old_cert.is_empty() {
            causes.push(Cause::forbidden("status.certificate", "updates may not modify existing certificate content"));
        } else if let Some(e) = certificate_error(&new_cert) {
            causes.push(Cause::invalid("status.certificate", "<certificate data>", e));
        }
    }
    causes
}

/// Conditions without timestamps get `now` as lastUpdateTime, and as lastTransitionTime
/// unless the stored object had the same type and status already (its time is kept).
pub fn condition_timestamps(new: &mut Value, old: &Value, now: &str) {
    let previous = conditions(old);
    let Some(cs) = new.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else { return };
    for c in cs.iter_mut().filter(|c| c.is_object()) {
        let unset = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).is_none_or(str::is_empty);
        if unset(c, "lastUpdateTime") {
            c["lastUpdateTime"] = json!(now);
        }
        if unset(c, "lastTransitionTime") {
            let kept = previous
                .iter()
                .find(|o| ctype(o) == ctype(c) && o.get("status") == c.get("status"))
                .and_then(|o| o.get("lastTransitionTime"))
                .filter(|t| t.as_str().is_some_and(|s| !s.is_empty()));
            c["lastTransitionTime"] = kept.cloned().unwrap_or_else(|| json!(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["a.example".to_string()]).unwrap();
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn csr() -> Value {
        let b64 = base64::engine::general_purpose::STANDARD.encode(csr_pem());
        json!({"metadata": {"name": "c"}, "spec": {"request": b64, "signerName": "example.com/s", "usages": ["client auth"]}})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn create_validation() {
        assert!(validate_csr(&csr()).is_empty(), "{:?}", fields(&validate_csr(&csr())));
        let mut bad = csr();
        bad["spec"]["request"] = json!(base64::engine::general_purpose::STANDARD.encode("nope"));
        bad["spec"]["usages"] = json!(["client auth", "bogus", "client auth"]);
        bad["spec"]["signerName"] = json!("");
        bad["spec"]["expirationSeconds"] = json!(60);
        let f = fields(&validate_csr(&bad));
        assert_eq!(f.len(), 5, "{f:?}");
        assert!(f[0].contains("spec.request") && f[0].contains("PEM block type must be CERTIFICATE REQUEST"), "{f:?}");
        assert!(f.iter().any(|s| s.starts_with("spec.usages[1]")));
        assert!(f.iter().any(|s| s.starts_with("spec.usages[2]")));
        assert!(f.iter().any(|s| s.starts_with("spec.signerName")));
        assert!(f.iter().any(|s| s.starts_with("spec.expirationSeconds")));
        let mut legacy = csr();
        legacy["spec"]["signerName"] = json!(LEGACY_UNKNOWN_SIGNER);
        assert!(fields(&validate_csr(&legacy))[0].contains("legacy signerName"));
    }

    #[test]
    fn conditions_get_timestamps() {
        let old = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
        let mut new = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True"},
            {"type": "Failed", "status": "True", "lastUpdateTime": "2021-01-01T00:00:00Z"},
        ]}});
        condition_timestamps(&mut new, &old, "2026-01-01T00:00:00Z");
        let cs = &new["status"]["conditions"];
        assert_eq!(cs[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(cs[0]["lastUpdateTime"], "2026-01-01T00:00:00Z");
        assert_eq!(cs[1]["lastUpdateTime"], "2021-01-01T00:00:00Z");
        assert_eq!(cs[1]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn approval_and_status_rules() {
        let old = csr();
        let mut approved = old.clone();
        approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        assert!(validate_csr_update("approval", &approved, &old).is_empty());
        assert!(
            fields(&validate_csr_update("status", &approved, &old))[0]
                .contains("may not add a condition of type \"Approved\"")
        );
        // Both Approved and Denied: refused.
        let mut both = approved.clone();
        both["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "Denied", "status": "True"}));
        assert!(fields(&validate_csr_update("approval", &both, &approved))[0].contains("mutually exclusive"));
        // Removing Approved: refused.
        assert!(fields(&validate_csr_update("approval", &old, &approved))[0].contains("may not remove"));
        // Approved may only be True.
        let mut falsy = old.clone();
        falsy["status"] = json!({"conditions": [{"type": "Approved", "status": "False"}]});
        assert!(!validate_csr_update("approval", &falsy, &old).is_empty());
        // The certificate is set through status, once.
        let mut issued = approved.clone();
        issued["status"]["certificate"] = json!("bm90IGEgY2VydA==");
        assert!(fields(&validate_csr_update("status", &issued, &approved))[0].contains("CERTIFICATE PEM block"));
        assert!(fields(&validate_csr_update("approval", &issued, &approved))[0].contains("may not set certificate"));
    }
}
