//! Label selectors and node selector terms, parsed once per pod and matched many times.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
    /// An operator or value that cannot match (an invalid requirement matches nothing).
    Never,
}

#[derive(Clone, Debug, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::In(vs), Some(v)) => vs.iter().any(|x| x == v),
            (Op::In(_), None) => false,
            (Op::NotIn(vs), Some(v)) => !vs.iter().any(|x| x == v),
            (Op::NotIn(_), None) => true,
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
            (Op::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
            _ => false,
        }
    }
}

/// A label selector; `nothing` selects no object (a nil selector where upstream says so).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    pub fn nothing() -> Selector {
        Selector { requirements: Vec::new(), nothing: true }
    }

    /// A nil selector selects nothing; an empty one everything.
    pub fn from_label_selector(selector: Option<&LabelSelector>) -> Selector {
        let Some(s) = selector else { return Selector::nothing() };
        let mut requirements: Vec<Requirement> = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement { key: k.clone(), op: Op::In(vec![v.clone()]) })
            .collect();
        for e in s.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let op = match e.operator.as_str() {
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                _ => Op::Never,
            };
            requirements.push(Requirement { key: e.key.clone(), op });
        }
        Selector { requirements, nothing: false }
    }

    /// Adds `key in (value)` (matchLabelKeys) or `key notin (value)` (mismatchLabelKeys).
    pub fn require(&mut self, key: &str, value: &str, equal: bool) {
        let values = vec![value.to_string()];
        let op = if equal { Op::In(values) } else { Op::NotIn(values) };
        self.requirements.push(Requirement { key: key.to_string(), op });
    }

    pub fn matches(&self, labels: Option<&Labels>) -> bool {
        !self.nothing
            && self.requirements.iter().all(|r| r.matches(labels.and_then(|l| l.get(&r.key)).map(String::as_str)))
    }

    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// The selector of a label map (a Service's or ReplicationController's): each pair
    /// required; an empty map selects everything.
    pub fn from_map(map: &Labels) -> Selector {
        let requirements =
            map.iter().map(|(k, v)| Requirement { key: k.clone(), op: Op::In(vec![v.clone()]) }).collect();
        Selector { requirements, nothing: false }
    }

    /// Adds `other`'s requirements (none from a selector of nothing, as upstream's
    /// Selector.Add of Requirements()).
    pub fn add_requirements_of(&mut self, other: &Selector) {
        if !other.nothing {
            self.requirements.extend(other.requirements.iter().cloned());
        }
    }
}

/// One node selector term: its expressions on labels and on fields (metadata.name).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTerm {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

fn requirement(r: &NodeSelectorRequirement) -> Requirement {
    let values = r.values.clone().unwrap_or_default();
    let number = || values.first().filter(|_| values.len() == 1).and_then(|v| v.parse::<i64>().ok());
    let op = match r.operator.as_str() {
        "In" => Op::In(values.clone()),
        "NotIn" => Op::NotIn(values.clone()),
        "Exists" => Op::Exists,
        "DoesNotExist" => Op::DoesNotExist,
        "Gt" => number().map_or(Op::Never, Op::Gt),
        "Lt" => number().map_or(Op::Never, Op::Lt),
        _ => Op::Never,
    };
    Requirement { key: r.key.clone(), op }
}

impl NodeTerm {
    pub fn new(term: &NodeSelectorTerm) -> NodeTerm {
        NodeTerm {
            labels: term.match_expressions.iter().flatten().map(requirement).collect(),
            fields: term
                .match_fields
                .iter()
                .flatten()
                .map(|r| {
                    let mut req = requirement(r);
                    // Only metadata.name is a selectable node field.
                    if r.key != "metadata.name" || !matches!(req.op, Op::In(_) | Op::NotIn(_)) {
                        req.op = Op::Never;
                    }
                    req
                })
                .collect(),
        }
    }

    /// An empty term matches no node.
    pub fn matches(&self, name: &str, labels: Option<&Labels>) -> bool {
        if self.labels.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.labels.iter().all(|r| r.matches(labels.and_then(|l| l.get(&r.key)).map(String::as_str)))
            && self.fields.iter().all(|r| r.matches(Some(name)))
    }
}

/// Terms ORed, as in a NodeSelector.
pub fn node_selector_terms(selector: &NodeSelector) -> Vec<NodeTerm> {
    selector.node_selector_terms.iter().map(NodeTerm::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn label_selectors() {
        let s: LabelSelector = serde_json::from_value(json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}))
        .unwrap();
        let s = Selector::from_label_selector(Some(&s));
        assert!(s.matches(Some(&labels(&[("app", "web")]))));
        assert!(!s.matches(Some(&labels(&[("app", "web"), ("tier", "db")]))));
        assert!(!Selector::from_label_selector(None).matches(Some(&labels(&[]))));
        assert!(Selector::from_label_selector(Some(&LabelSelector::default())).matches(None));
    }

    #[test]
    fn node_terms() {
        let t: NodeSelectorTerm = serde_json::from_value(json!({
            "matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}))
        .unwrap();
        let t = NodeTerm::new(&t);
        assert!(t.matches("n1", Some(&labels(&[("cores", "8")]))));
        assert!(!t.matches("n2", Some(&labels(&[("cores", "8")]))));
        assert!(!t.matches("n1", Some(&labels(&[("cores", "2")]))));
        assert!(!NodeTerm::new(&NodeSelectorTerm::default()).matches("n1", None));
    }
}
