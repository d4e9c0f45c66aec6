//! Label selectors (metav1.LabelSelector) as NetworkPolicies use them: matchLabels and
//! matchExpressions all hold. A selector upstream could not convert (an unknown
//! operator, In without values) selects nothing, so a bad policy never opens traffic.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
    Never,
}

/// A parsed selector; the empty one matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector matching every label set (`{}`).
    pub fn everything() -> Selector {
        Selector::default()
    }

    pub fn from_api(selector: &LabelSelector) -> Selector {
        let mut requirements: Vec<Requirement> =
            selector.match_labels.iter().flatten().map(|(k, v)| Requirement::Equals(k.clone(), v.clone())).collect();
        for expr in selector.match_expressions.iter().flatten() {
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let key = expr.key.clone();
            requirements.push(match expr.operator.as_str() {
                "In" if !values.is_empty() => Requirement::In(key, values),
                "NotIn" if !values.is_empty() => Requirement::NotIn(key, values),
                "Exists" if values.is_empty() => Requirement::Exists(key),
                "DoesNotExist" if values.is_empty() => Requirement::DoesNotExist(key),
                _ => Requirement::Never,
            });
        }
        Selector { requirements }
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => labels.get(k).is_none_or(|v| !set.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::Never => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn selector(json: serde_json::Value) -> Selector {
        Selector::from_api(&serde_json::from_value(json).unwrap())
    }

    #[test]
    fn match_labels_and_expressions_all_hold() {
        let web = labels(&[("app", "web"), ("tier", "front")]);
        assert!(Selector::everything().matches(&web));
        assert!(Selector::everything().matches(&Labels::new()));
        assert!(selector(serde_json::json!({"matchLabels": {"app": "web"}})).matches(&web));
        assert!(!selector(serde_json::json!({"matchLabels": {"app": "db"}})).matches(&web));
        let expr = |op: &str, values: &[&str]| {
            selector(serde_json::json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]}))
        };
        assert!(expr("In", &["front", "back"]).matches(&web));
        assert!(!expr("In", &["back"]).matches(&web));
        assert!(!expr("NotIn", &["front"]).matches(&web));
        assert!(expr("NotIn", &["back"]).matches(&web));
        assert!(expr("NotIn", &["back"]).matches(&Labels::new()), "NotIn holds for a missing key");
        assert!(expr("Exists", &[]).matches(&web));
        assert!(!expr("DoesNotExist", &[]).matches(&web));
        assert!(expr("DoesNotExist", &[]).matches(&Labels::new()));
        // What upstream refuses to convert selects nothing.
        assert!(!expr("In", &[]).matches(&web));
        assert!(!expr("Gt", &["1"]).matches(&web));
        assert!(!expr("Exists", &["x"]).matches(&web));
        let both = selector(serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}]
        }));
        assert!(!both.matches(&web), "every requirement must hold");
    }
}
