//! Label and field selectors in their string forms (`?labelSelector=`, `?fieldSelector=`).

use std::collections::BTreeSet;

use crate::validation::{label_value_errors, qualified_name_errors};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelOp {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    GreaterThan(i64),
    LessThan(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRequirement {
    pub key: String,
    pub op: LabelOp,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<LabelRequirement>,
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced parenthesis".into());
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced parenthesis".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn check_key(key: &str) -> Result<(), String> {
    match qualified_name_errors(key).first() {
        Some(e) => Err(format!("key: Invalid value: \"{key}\": {e}")),
        None => Ok(()),
    }
}

fn check_value(v: &str) -> Result<(), String> {
    match label_value_errors(v).first() {
        Some(e) => Err(format!("values[0][{v}]: Invalid value: \"{v}\": {e}")),
        None => Ok(()),
    }
}

fn parse_set(rest: &str) -> Result<BTreeSet<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{}', expected: '('", rest.trim()))?;
    let mut set = BTreeSet::new();
    for v in inner.split(',') {
        let v = v.trim();
        check_value(v)?;
        set.insert(v.to_string());
    }
    Ok(set)
}

fn parse_requirement(raw: &str) -> Result<LabelRequirement, String> {
    let r = raw.trim();
    if r.is_empty() {
        return Err("found '', expected: identifier".into());
    }
    if let Some(key) = r.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(LabelRequirement { key: key.into(), op: LabelOp::DoesNotExist });
    }
    // Set-based: "key in (a,b)" / "key notin (a,b)".
    if let Some(pos) = r.find(|c: char| c.is_whitespace() || c == '(') {
        let (key, rest) = (&r[..pos], r[pos..].trim_start());
        for (word, is_in) in [("notin", false), ("in", true)] {
            if let Some(after) = rest.strip_prefix(word)
                && (after.starts_with('(') || after.starts_with(char::is_whitespace))
            {
                check_key(key)?;
                let set = parse_set(after)?;
                let op = if is_in { LabelOp::In(set) } else { LabelOp::NotIn(set) };
                return Ok(LabelRequirement { key: key.into(), op });
            }
        }
    }
    for (sym, kind) in [("!=", 0), ("==", 1), ("=", 1), (">", 2), ("<", 3)] {
        if let Some((key, value)) = r.split_once(sym) {
            let (key, value) = (key.trim(), value.trim());
            check_key(key)?;
            let op = match kind {
                0 | 1 => {
                    check_value(value)?;
                    if kind == 0 { LabelOp::NotEquals(value.into()) } else { LabelOp::Equals(value.into()) }
                }
                _ => {
                    let n = value
                        .parse::<i64>()
                        .map_err(|_| format!("for 'Gt', 'Lt' operators, the value must be an integer: {value}"))?;
                    if kind == 2 { LabelOp::GreaterThan(n) } else { LabelOp::LessThan(n) }
                }
            };
            return Ok(LabelRequirement { key: key.into(), op });
        }
    }
    check_key(r)?;
    Ok(LabelRequirement { key: r.into(), op: LabelOp::Exists })
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let requirements = split_top_level(s)?
            .into_iter()
            .map(|r| parse_requirement(r).map_err(|e| format!("unable to parse requirement: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The structured form (metav1.LabelSelector as JSON: matchLabels, matchExpressions).
    /// An unknown operator selects nothing, as upstream's conversion refuses it.
    pub fn from_json(sel: &serde_json::Value) -> Self {
        let mut requirements = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(serde_json::Value::as_object) {
            for (k, v) in m {
                requirements
                    .push(LabelRequirement { key: k.clone(), op: LabelOp::Equals(v.as_str().unwrap_or("").into()) });
            }
        }
        for e in sel.get("matchExpressions").and_then(serde_json::Value::as_array).into_iter().flatten() {
            let key = e.get("key").and_then(serde_json::Value::as_str).unwrap_or("").to_string();
            let values: BTreeSet<String> = e
                .get("values")
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .map(String::from)
                .collect();
            let op = match e.get("operator").and_then(serde_json::Value::as_str).unwrap_or("") {
                "In" => LabelOp::In(values),
                "NotIn" => LabelOp::NotIn(values),
                "Exists" => LabelOp::Exists,
                "DoesNotExist" => LabelOp::DoesNotExist,
                // Matches nothing: an empty In set.
                _ => LabelOp::In(BTreeSet::new()),
            };
            requirements.push(LabelRequirement { key, op });
        }
        LabelSelector { requirements }
    }

    /// Matches a labels map (missing labels = empty map).
    pub fn matches(&self, labels: Option<&serde_json::Map<String, serde_json::Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(|v| v.as_str());
        self.requirements.iter().all(|r| match &r.op {
            LabelOp::Exists => get(&r.key).is_some(),
            LabelOp::DoesNotExist => get(&r.key).is_none(),
            LabelOp::Equals(v) => get(&r.key) == Some(v.as_str()),
            LabelOp::NotEquals(v) => get(&r.key) != Some(v.as_str()),
            LabelOp::In(set) => get(&r.key).is_some_and(|v| set.contains(v)),
            LabelOp::NotIn(set) => get(&r.key).is_none_or(|v| !set.contains(v)),
            LabelOp::GreaterThan(n) => get(&r.key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            LabelOp::LessThan(n) => get(&r.key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub negate: bool,
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma-joined,
/// with `\` escaping `,`, `=` and `\` in values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            parts.last_mut().unwrap().push('\\');
            parts.last_mut().unwrap().push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else {
            parts.last_mut().unwrap().push(c);
        }
    }
    parts
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid field selector: invalid escape sequence: \\{e}")),
                None => return Err("invalid field selector: unterminated escape".into()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        for part in split_unescaped(s, ',') {
            // Find the operator outside escapes: `\=` has been kept escaped by the split.
            let raw = part.as_str();
            let (field, value, negate) = if let Some(i) = find_op(raw, "!=") {
                (&raw[..i], &raw[i + 2..], true)
            } else if let Some(i) = find_op(raw, "==") {
                (&raw[..i], &raw[i + 2..], false)
            } else if let Some(i) = find_op(raw, "=") {
                (&raw[..i], &raw[i + 1..], false)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{raw}'"));
            };
            requirements.push(FieldRequirement { field: field.trim().to_string(), value: unescape(value)?, negate });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value required for `field` by an `=` requirement, if any (used to narrow lists).
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.requirements.iter().find(|r| r.field == field && !r.negate).map(|r| r.value.as_str())
    }

    /// Matches using `value_of(field)`; unknown fields were rejected when the request was
    /// checked against the kind's supported fields.
    pub fn matches(&self, value_of: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let v = value_of(&r.field).unwrap_or_default();
            (v == r.value) != r.negate
        })
    }
}

fn find_op(s: &str, op: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if s[i..].starts_with(op) {
            return Some(i);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn label_selector_syntax() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, api)"));
        assert!(m("app in(web)"));
        assert!(!m("app notin (web,api)"));
        assert!(m("env notin (prod)"), "notin matches a missing label");
        assert!(m("tier"));
        assert!(m("!env"));
        assert!(!m("!app"));
        assert!(m("app=web,tier in (front,back),!env"));
        assert!(m("n>3") && !m("n<3"));
        assert!(!LabelSelector::parse("app").unwrap().matches(None));
        assert!(LabelSelector::parse("app in (a").is_err());
        assert!(LabelSelector::parse("bad key=x").is_err());
        assert!(LabelSelector::parse("app=in valid").is_err());
    }

    #[test]
    fn structured_selectors_match_like_string_ones() {
        let l = labels(json!({"app": "web", "tier": "front"}));
        let sel = |v: serde_json::Value| LabelSelector::from_json(&v).matches(Some(&l));
        assert!(sel(json!({"matchLabels": {"app": "web"}})));
        assert!(!sel(json!({"matchLabels": {"app": "db"}})));
        assert!(sel(json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]})));
        assert!(sel(json!({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]})));
        assert!(!sel(json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]})));
        assert!(sel(json!({})), "an empty selector selects everything");
    }

    #[test]
    fn field_selector_syntax() {
        let f = FieldSelector::parse("metadata.name=a\\,b,status.phase!=Running").unwrap();
        assert_eq!(f.requirements[0].value, "a,b");
        assert!(f.requirements[1].negate);
        let value_of = |field: &str| match field {
            "metadata.name" => Some("a,b".to_string()),
            "status.phase" => Some("Pending".to_string()),
            _ => None,
        };
        assert!(f.matches(value_of));
        assert_eq!(f.required_value("metadata.name"), Some("a,b"));
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("spec.nodeName==").unwrap().matches(|_| None));
    }
}
