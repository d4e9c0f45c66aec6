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

pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= DNS1123_LABEL_MAX
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|c| is_lower_alnum(*c) || *c == b'-')
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= DNS1123_SUBDOMAIN_MAX
        && !s.is_empty()
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && is_lower_alnum(b[0])
                && is_lower_alnum(b[b.len() - 1])
                && b.iter().all(|c| is_lower_alnum(*c) || *c == b'-')
        })
}

fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// Messages for a name that breaks `rule` (empty when valid).
pub fn name_errors(rule: NameRule, name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    match rule {
        NameRule::Subdomain => {
            if name.len() > DNS1123_SUBDOMAIN_MAX {
                errs.push(format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"));
            }
            if !is_dns1123_subdomain(name) && name.len() <= DNS1123_SUBDOMAIN_MAX {
                errs.push(SUBDOMAIN_MSG.into());
            }
        }
        NameRule::Label => {
            if name.len() > DNS1123_LABEL_MAX {
                errs.push(format!("must be no more than {DNS1123_LABEL_MAX} characters"));
            }
            if !is_dns1123_label(&name[..name.len().min(DNS1123_LABEL_MAX)]) || name.is_empty() {
                errs.push(LABEL_MSG.into());
            }
        }
        NameRule::Dns1035Label => {
            if name.len() > DNS1123_LABEL_MAX {
                errs.push(format!("must be no more than {DNS1123_LABEL_MAX} characters"));
            }
            if !is_dns1035_label(&name[..name.len().min(DNS1123_LABEL_MAX)]) {
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

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
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
        if !is_qualified_name_part(&name[..name.len().min(63)]) {
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
    if !v.is_empty() && !is_qualified_name_part(&v[..v.len().min(63)]) {
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
