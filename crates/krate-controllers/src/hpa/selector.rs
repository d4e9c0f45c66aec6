//! Label selectors in their string form (a Scale's status.selector: "app=web,tier in
//! (a,b),!canary"), parsed and matched as apimachinery's labels.Parse does.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|t| !t.is_empty()).collect()
}

fn values(list: &str) -> Result<Vec<String>, String> {
    let inner = list
        .trim()
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(|| format!("found '{list}', expected: '('"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, String> {
        let mut reqs = Vec::new();
        for term in terms(s) {
            let key_and = |op: &str| term.split_once(op).map(|(k, v)| (k.trim().to_string(), v.trim().to_string()));
            let req = if let Some((k, v)) = key_and("!=") {
                Requirement::NotEquals(k, v)
            } else if let Some((k, v)) = key_and("==").or_else(|| key_and("=")) {
                Requirement::Equals(k, v)
            } else if let Some((k, v)) = term.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), values(v)?)
            } else if let Some((k, v)) = term.split_once(" in ") {
                Requirement::In(k.trim().into(), values(v)?)
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::DoesNotExist(k.trim().into())
            } else if term.contains(char::is_whitespace) || term.contains(['(', ')']) {
                return Err(format!("unable to parse requirement: {term:?}"));
            } else {
                Requirement::Exists(term.into())
            };
            reqs.push(req);
        }
        Ok(Selector(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selectors_parse_and_match_as_apimachinery() {
        let s = Selector::parse("app=web,tier in (a, b),!canary,env!=prod,zone").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "b"), ("zone", "z1")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c"), ("zone", "z1")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("zone", "z1"), ("canary", "1")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("zone", "z1"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        let n = Selector::parse("tier notin (x),app==api").unwrap();
        assert!(n.matches(&labels(&[("app", "api")])));
        assert!(!n.matches(&labels(&[("app", "api"), ("tier", "x")])));
        assert!(Selector::parse("").unwrap().matches(&labels(&[])));
        assert!(Selector::parse("a b").is_err());
    }
}
