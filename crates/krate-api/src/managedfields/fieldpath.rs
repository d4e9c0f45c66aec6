//! Sets of field paths and their FieldsV1 encoding (`{"f:spec": {"f:replicas": {}}}`),
//! the form managedFields entries record ownership in.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// One step of a path: a field of an object (or a key of a map), an item of an
/// associative list by its key fields, an item of a set by its value, or (for lists
/// without keys) an index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    Field(String),
    /// The key fields of a list-map item, as canonical JSON (sorted keys).
    Key(String),
    /// A set item, as canonical JSON.
    Value(String),
    Index(usize),
}

pub type Path = Vec<PathElement>;

impl PathElement {
    pub fn key(fields: &Map<String, Value>) -> Self {
        PathElement::Key(Value::Object(fields.clone()).to_string())
    }

    pub fn value(v: &Value) -> Self {
        PathElement::Value(v.to_string())
    }

    fn encode(&self) -> String {
        match self {
            PathElement::Field(n) => format!("f:{n}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Result<Self, String> {
        let (kind, rest) = s.split_at_checked(2).ok_or_else(|| format!("invalid path element {s:?}"))?;
        let json = |r: &str| -> Result<Value, String> {
            serde_json::from_str(r).map_err(|e| format!("invalid path element {s:?}: {e}"))
        };
        match kind {
            "f:" => Ok(PathElement::Field(rest.to_string())),
            "k:" => match json(rest)? {
                Value::Object(m) => Ok(PathElement::key(&m)),
                _ => Err(format!("invalid path element {s:?}: a key must be an object")),
            },
            "v:" => Ok(PathElement::value(&json(rest)?)),
            "i:" => rest.parse().map(PathElement::Index).map_err(|_| format!("invalid path element {s:?}")),
            _ => Err(format!("invalid path element {s:?}")),
        }
    }
}

impl fmt::Display for PathElement {
    /// As upstream prints paths in conflict messages: `.spec.containers[name="app"].image`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(n) => write!(f, ".{n}"),
            PathElement::Key(k) => {
                let m: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

pub fn display(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of paths, as a tree: `members` end here, `children` continue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn contains(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    /// Whether any member lies strictly below `path`.
    pub fn has_descendants(&self, path: &[PathElement]) -> bool {
        match path {
            [] => !self.is_empty(),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has_descendants(rest)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(Set::is_empty)
    }

    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (k, c) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    pub fn difference(&self, other: &Set) -> Set {
        let mut out = Set { members: self.members.difference(&other.members).cloned().collect(), ..Set::default() };
        for (k, c) in &self.children {
            let rest = match other.children.get(k) {
                Some(theirs) => c.difference(theirs),
                None => c.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(k.clone(), rest);
            }
        }
        out
    }

    /// Every member path.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        let mut elements: BTreeSet<&PathElement> = self.members.iter().collect();
        elements.extend(self.children.keys());
        for e in elements {
            prefix.push(e.clone());
            if self.members.contains(e) {
                out.push(prefix.clone());
            }
            if let Some(c) = self.children.get(e) {
                c.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// Keeps only the paths `keep` accepts.
    pub fn filter(&self, keep: &dyn Fn(&[PathElement]) -> bool) -> Set {
        let mut out = Set::default();
        for p in self.paths() {
            if keep(&p) {
                out.insert(&p);
            }
        }
        out
    }

    /// The FieldsV1 form: a member with children carries a "." entry.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        for e in &self.members {
            m.insert(e.encode(), Value::Object(Map::new()));
        }
        for (e, c) in &self.children {
            if c.is_empty() {
                continue;
            }
            let Value::Object(mut inner) = c.to_fields_v1() else { continue };
            if self.members.contains(e) {
                inner.insert(".".into(), Value::Object(Map::new()));
            }
            m.insert(e.encode(), Value::Object(inner));
        }
        Value::Object(m)
    }

    pub fn from_fields_v1(v: &Value) -> Result<Set, String> {
        let Value::Object(m) = v else { return Err("fieldsV1 must be an object".into()) };
        let mut out = Set::default();
        for (k, child) in m {
            if k == "." {
                continue;
            }
            let e = PathElement::decode(k)?;
            let Value::Object(cm) = child else { return Err(format!("fieldsV1 entry {k:?} must be an object")) };
            if cm.is_empty() || cm.contains_key(".") {
                out.members.insert(e.clone());
            }
            if cm.keys().any(|k| k != ".") {
                out.children.insert(e, Set::from_fields_v1(child)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(n: &str) -> PathElement {
        PathElement::Field(n.into())
    }

    #[test]
    fn fields_v1_round_trip() {
        let v = json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}, "f:replicas": {}},
            "f:finalizers": {"v:\"a\"": {}}
        });
        let set = Set::from_fields_v1(&v).unwrap();
        assert!(set.contains(&[f("spec"), f("replicas")]));
        let item = [f("spec"), f("containers"), PathElement::key(json!({"name": "c"}).as_object().unwrap())];
        assert!(set.contains(&item));
        assert!(set.has_descendants(&item));
        assert!(!set.contains(&[f("metadata"), f("labels")]));
        assert_eq!(set.to_fields_v1(), v);
        assert_eq!(display(&[item.to_vec(), vec![f("image")]].concat()), ".spec.containers[name=\"c\"].image");
    }

    #[test]
    fn set_algebra() {
        let mut a = Set::default();
        a.insert(&[f("a"), f("x")]);
        a.insert(&[f("b")]);
        let mut b = Set::default();
        b.insert(&[f("a"), f("x")]);
        b.insert(&[f("c")]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("b")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.difference(&a).is_empty());
        assert!(Set::from_fields_v1(&json!({"x:bad": {}})).is_err());
        assert!(Set::from_fields_v1(&json!({"k:[1]": {}})).is_err());
    }
}
