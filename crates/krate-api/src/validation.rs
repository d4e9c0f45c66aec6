//! Name, label and annotation rules, with upstream's messages (clients and tests match
//! on them).

use crate::error::Cause;

pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
pub const DNS1123_LABEL_MAX: usize = 63;
pub const LABEL_VALUE_MAX: usize = 63;
pub const ANNOTATIONS_TOTAL_MAX: usize = 256 * 1024;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Which rule a kind's names follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// Most kinds: an RFC 1123 subdomain.
    Subdomain,
    /// Namespaces and a few others: an RFC 1123 label.
    Label,
    /// Services: an RFC 1035 label.
    Dns1035Label,
    /// RBAC kinds and others: anything usable as a URL path segment.
    PathSegment,
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// The RFC 1123 label format, length aside (lengths are reported on their own, as upstream).
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|c| is_lower_alnum(*c) || *c == b'-')
}

/// The RFC 1123 subdomain format, length aside.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_dns1123_label)
}

fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// Messages for a name that breaks `rule` (empty when valid).
pub fn name_errors(rule: NameRule, name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    match rule {
        NameRule::Subdomain => errs = dns1123_subdomain_errors(name),
        NameRule::Label => errs = dns1123_label_errors(name),
        NameRule::Dns1035Label => {
            if name.len() > DNS1123_LABEL_MAX {
                errs.push(format!("must be no more than {DNS1123_LABEL_MAX} characters"));
            }
            if !is_dns1035_label(name) {
                errs.push(DNS1035_MSG.into());
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                errs.push(format!("may not be '{name}'"));
            }
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    errs.push(format!("may not contain '{bad}'"));
                }
            }
        }
    }
    errs
}

/// A name given as generateName prefix is checked as if a suffix followed it.
pub fn generate_name_errors(rule: NameRule, prefix: &str) -> Vec<String> {
    let probe = format!("{}a", prefix.trim_end_matches('-'));
    if rule == NameRule::PathSegment { name_errors(rule, prefix) } else { name_errors(rule, &probe) }
}

/// The qualified-name (and label value) format, length aside.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Label and annotation keys: `[prefix/]name`.
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".into());
        } else if !is_dns1123_subdomain(p) {
            errs.push(format!("prefix part {SUBDOMAIN_MSG}"));
        }
        if name.contains('/') {
            errs.push("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into());
            return errs;
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else {
        if name.len() > 63 {
            errs.push("name part must be no more than 63 characters".into());
        }
        if !is_qualified_name_part(name) {
            errs.push(QUALIFIED_NAME_MSG.into());
        }
    }
    errs
}

pub fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > LABEL_VALUE_MAX {
        errs.push(format!("must be no more than {LABEL_VALUE_MAX} characters"));
    }
    if !v.is_empty() && !is_qualified_name_part(v) {
        errs.push(LABEL_VALUE_MSG.into());
    }
    errs
}

/// Causes for a labels map (`field` is e.g. "metadata.labels").
pub fn validate_labels(labels: &serde_json::Map<String, serde_json::Value>, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (k, v) in labels {
        for msg in qualified_name_errors(k) {
            causes.push(Cause::invalid(field, k, msg));
        }
        match v.as_str() {
            Some(s) => {
                for msg in label_value_errors(s) {
                    causes.push(Cause::invalid(field, s, msg));
                }
            }
            None => causes.push(Cause::invalid(format!("{field}.{k}"), v, "label values must be strings")),
        }
    }
    causes
}

pub fn validate_annotations(annotations: &serde_json::Map<String, serde_json::Value>, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0;
    for (k, v) in annotations {
        for msg in qualified_name_errors(&k.to_lowercase()) {
            causes.push(Cause::invalid(field, k, msg));
        }
        match v.as_str() {
            Some(s) => total += k.len() + s.len(),
            None => causes.push(Cause::invalid(format!("{field}.{k}"), v, "annotation values must be strings")),
        }
    }
    if total > ANNOTATIONS_TOTAL_MAX {
        causes.push(Cause::too_long(field, ANNOTATIONS_TOTAL_MAX));
    }
    causes
}

/// A string as Go's `%q` prints it (close enough: Rust's escaping of the rare
/// non-printable characters differs in form only).
pub fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

/// `field.Invalid` with the value already rendered as upstream renders it (a Go
/// `%#v` of a map or struct, a bare number).
pub fn invalid_raw(field: impl Into<String>, raw: impl Into<String>, detail: impl Into<String>) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {}: {}", raw.into(), detail.into()),
        field: field.into(),
    }
}

/// `field.Invalid` of a string value (always quoted, as upstream quotes strings).
pub fn invalid_str(field: impl Into<String>, value: &str, detail: impl Into<String>) -> Cause {
    invalid_raw(field, go_quote(value), detail)
}

/// `field.Invalid` of an integer value.
pub fn invalid_int(field: impl Into<String>, value: i64, detail: impl Into<String>) -> Cause {
    invalid_raw(field, value.to_string(), detail)
}

/// `field.NotFound`.
pub fn not_found(field: impl Into<String>, value: &str) -> Cause {
    Cause {
        reason: "FieldValueNotFound".into(),
        message: format!("Not found: {}", go_quote(value)),
        field: field.into(),
    }
}

/// `field.Duplicate` of a string value.
pub fn duplicate_str(field: impl Into<String>, value: &str) -> Cause {
    Cause {
        reason: "FieldValueDuplicate".into(),
        message: format!("Duplicate value: {}", go_quote(value)),
        field: field.into(),
    }
}

/// `field.NotSupported` with the value already rendered.
pub fn not_supported_raw(field: impl Into<String>, raw: impl Into<String>, supported: &[&str]) -> Cause {
    let list = supported.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!("Unsupported value: {}: supported values: {list}", raw.into()),
        field: field.into(),
    }
}

/// `field.TooMany`.
pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooMany".into(),
        message: format!("Too many: {actual}: must have at most {max} items"),
        field: field.into(),
    }
}

pub const NEGATIVE_MSG: &str = "must be greater than or equal to 0";
pub const IMMUTABLE_MSG: &str = "field is immutable";

/// `ValidateNonnegativeField`.
pub fn nonnegative(field: impl Into<String>, value: i64) -> Option<Cause> {
    (value < 0).then(|| invalid_int(field, value, NEGATIVE_MSG))
}

/// Upstream's `IsDNS1123Label`.
pub fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(format!("must be no more than {DNS1123_LABEL_MAX} characters"));
    }
    if !is_dns1123_label(s) {
        if is_dns1123_subdomain(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(LABEL_MSG.into());
        }
    }
    errs
}

/// Upstream's `IsDNS1123Subdomain`.
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"));
    }
    if !is_dns1123_subdomain(s) {
        errs.push(SUBDOMAIN_MSG.into());
    }
    errs
}

const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// Upstream's `IsConfigMapKey`: keys of ConfigMaps and Secrets.
pub fn config_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"));
    }
    if key.is_empty() || !key.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_')) {
        errs.push(CONFIG_KEY_MSG.into());
    }
    if key == "." {
        errs.push("must not be '.'".into());
    } else if key == ".." {
        errs.push("must not be '..'".into());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".into());
    }
    errs
}

/// Upstream's `IsValidPortName` (an IANA_SVC_NAME).
pub fn port_name_errors(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push("must be no more than 15 characters".into());
    }
    if port.is_empty() || !port.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    } else if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// Upstream's `IsValidPortNum`.
pub fn port_num_errors(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) { Vec::new() } else { vec!["must be between 1 and 65535, inclusive".into()] }
}

/// Upstream's `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is on by default).
pub fn env_var_name_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push("environment variable name must be non-empty".into());
    }
    if name.chars().any(|c| !c.is_ascii() || c.is_ascii_control() || c == '=') {
        errs.push(
            "a valid environment variable name must consist only of printable ASCII characters other than '='".into(),
        );
    }
    errs
}

/// Upstream's `IsValidPercent`.
pub fn percent_errors(s: &str) -> Vec<String> {
    let ok = s.strip_suffix('%').is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
    if ok {
        Vec::new()
    } else {
        vec!["a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')".into()]
    }
}

/// Upstream's `IsValidIP` message.
pub fn ip_errors(s: &str) -> Vec<String> {
    if s.parse::<std::net::IpAddr>().is_ok() {
        Vec::new()
    } else {
        vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()]
    }
}

/// A CIDR as upstream's `ParseCIDR` reads it: the network address and prefix length.
pub fn parse_cidr(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (ip, len) = s.split_once('/')?;
    let ip: std::net::IpAddr = ip.parse().ok()?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then(|| (mask_ip(ip, len), len))
}

fn mask_ip(ip: std::net::IpAddr, len: u8) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            std::net::IpAddr::V4((bits & mask).into())
        }
        std::net::IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
            std::net::IpAddr::V6((bits & mask).into())
        }
    }
}

/// Whether `ip` lies in the network `net/len`.
pub fn cidr_contains(net: std::net::IpAddr, len: u8, ip: std::net::IpAddr) -> bool {
    net.is_ipv4() == ip.is_ipv4() && mask_ip(ip, len) == net
}

/// Upstream's `ValidateLabelSelector` (metav1.LabelSelector as JSON).
pub fn validate_label_selector(sel: &serde_json::Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(serde_json::Value::as_object) {
        causes.extend(validate_labels(m, &format!("{field}.matchLabels")));
    }
    let exprs = sel.get("matchExpressions").and_then(serde_json::Value::as_array);
    for (i, e) in exprs.into_iter().flatten().enumerate() {
        let at = format!("{field}.matchExpressions[{i}]");
        let values = e.get("values").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
        let op = e.get("operator").and_then(serde_json::Value::as_str).unwrap_or("");
        match op {
            "In" | "NotIn" => {
                if values.is_empty() {
                    causes.push(Cause::required(
                        format!("{at}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    causes.push(Cause::forbidden(
                        format!("{at}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            other => causes.push(invalid_str(format!("{at}.operator"), other, "not a valid selector operator")),
        }
        let key = e.get("key").and_then(serde_json::Value::as_str).unwrap_or("");
        for msg in qualified_name_errors(key) {
            causes.push(invalid_str(format!("{at}.key"), key, msg));
        }
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or("");
            for msg in label_value_errors(v) {
                causes.push(invalid_str(format!("{at}.values[{j}]"), v, msg));
            }
        }
    }
    causes
}

/// Whether a metav1.LabelSelector (as JSON) selects `labels`. An empty selector selects
/// everything, an absent one (`None`) nothing — as upstream's `LabelSelectorAsSelector`.
pub fn label_selector_matches(
    sel: Option<&serde_json::Value>,
    labels: Option<&serde_json::Map<String, serde_json::Value>>,
) -> bool {
    match sel.filter(|s| !s.is_null()) {
        Some(sel) => crate::selector::LabelSelector::from_json(sel).matches(labels),
        None => false,
    }
}

/// Whether a metav1.LabelSelector (as JSON) has no requirement at all.
pub fn label_selector_is_empty(sel: &serde_json::Value) -> bool {
    let n = |k: &str| sel.get(k).and_then(|v| v.as_object().map(|m| m.len()).or(v.as_array().map(Vec::len)));
    n("matchLabels").unwrap_or(0) + n("matchExpressions").unwrap_or(0) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(name_errors(NameRule::Subdomain, "my-app.example.com").is_empty());
        assert!(!name_errors(NameRule::Subdomain, "My_App").is_empty());
        assert!(!name_errors(NameRule::Subdomain, "-a").is_empty());
        assert!(!name_errors(NameRule::Subdomain, &"a".repeat(254)).is_empty());
        assert!(name_errors(NameRule::Label, "kube-system").is_empty());
        assert!(!name_errors(NameRule::Label, "a.b").is_empty());
        assert!(!name_errors(NameRule::Dns1035Label, "1abc").is_empty());
        assert!(name_errors(NameRule::Dns1035Label, "abc-1").is_empty());
        assert!(name_errors(NameRule::PathSegment, "system:node:x").is_empty());
        assert!(!name_errors(NameRule::PathSegment, "a/b").is_empty());
        assert!(generate_name_errors(NameRule::Subdomain, "web-").is_empty());
    }

    #[test]
    fn multibyte_input_at_the_length_limits_is_an_error_not_a_panic() {
        let long = "é".repeat(32); // 64 bytes; byte 63 falls inside a character
        assert_eq!(label_value_errors(&long).len(), 2, "too long and not a valid label value");
        assert!(!qualified_name_errors(&long).is_empty());
        for rule in [NameRule::Label, NameRule::Dns1035Label, NameRule::Subdomain] {
            assert!(!name_errors(rule, &long).is_empty());
        }
        assert!(!name_errors(NameRule::Subdomain, &"é".repeat(127)).is_empty());
    }

    #[test]
    fn labels_and_annotations() {
        assert!(qualified_name_errors("app.kubernetes.io/name").is_empty());
        assert!(qualified_name_errors("app").is_empty());
        assert!(!qualified_name_errors("bad key").is_empty());
        assert!(!qualified_name_errors("/x").is_empty());
        assert!(!qualified_name_errors("a/b/c").is_empty());
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("v1.2_3").is_empty());
        assert!(!label_value_errors("-x").is_empty());
        assert!(!label_value_errors(&"x".repeat(64)).is_empty());
        let mut big = serde_json::Map::new();
        big.insert("k".into(), serde_json::Value::String("x".repeat(ANNOTATIONS_TOTAL_MAX)));
        assert_eq!(validate_annotations(&big, "metadata.annotations")[0].reason, "FieldValueTooLong");
    }
}
