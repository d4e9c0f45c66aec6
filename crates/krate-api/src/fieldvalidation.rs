//! Server-side field validation (`?fieldValidation=Ignore|Warn|Strict`, upstream's
//! KEP-2885): fields an object's type does not know and fields a JSON body names twice
//! are dropped silently (Ignore), reported as Warning headers (Warn, the default), or
//! refused with one 400 listing them all (Strict).

use std::fmt;

use parking_lot::Mutex;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::error::{ApiError, ApiResult};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    /// The query parameter; absent or empty means Warn, as upstream.
    pub fn parse(value: Option<&str>) -> ApiResult<Self> {
        match value.unwrap_or("") {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// Warnings for the response (`Warning: 299 - "…"` headers), collected along the request.
#[derive(Debug, Default)]
pub struct Warnings(Mutex<Vec<String>>);

impl Warnings {
    pub fn add(&self, warning: impl Into<String>) {
        let w = warning.into();
        let mut list = self.0.lock();
        if !list.contains(&w) {
            list.push(w);
        }
    }

    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock())
    }
}

/// What the decoder found wrong with the fields of a body.
#[derive(Debug, Default)]
pub struct FieldProblems {
    pub unknown: Vec<String>,
    pub duplicate: Vec<String>,
}

impl FieldProblems {
    fn messages(&self) -> impl Iterator<Item = String> + '_ {
        let dups = self.duplicate.iter().map(|p| format!("duplicate field \"{p}\""));
        dups.chain(self.unknown.iter().map(|p| format!("unknown field \"{p}\"")))
    }

    /// Applies the directive: Ok (with warnings added under Warn) or, under Strict, the
    /// 400 upstream gives (`Kind in version "v" cannot be handled as a Kind: strict
    /// decoding error: …`).
    pub fn enforce(&self, directive: FieldValidation, kind: &str, version: &str, warnings: &Warnings) -> ApiResult<()> {
        if self.unknown.is_empty() && self.duplicate.is_empty() {
            return Ok(());
        }
        match directive {
            FieldValidation::Ignore => Ok(()),
            FieldValidation::Warn => {
                self.messages().for_each(|m| warnings.add(m));
                Ok(())
            }
            FieldValidation::Strict => Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                self.messages().collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

/// One step of a field's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A field an object's type has no place for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownField(pub Vec<Step>);

impl UnknownField {
    pub fn from_path(path: &serde_ignored::Path<'_>) -> Self {
        use serde_ignored::Path;
        let mut steps = Vec::new();
        let mut at = path;
        loop {
            match at {
                Path::Root => break,
                Path::Seq { parent, index } => {
                    steps.push(Step::Index(*index));
                    at = parent;
                }
                Path::Map { parent, key } => {
                    steps.push(Step::Key(key.clone()));
                    at = parent;
                }
                Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => at = parent,
            }
        }
        steps.reverse();
        UnknownField(steps)
    }
}

/// As upstream prints a field path: `spec.containers[0].image`.
impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(k) if i == 0 => f.write_str(k)?,
                Step::Key(k) => write!(f, ".{k}")?,
                Step::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Drops unknown fields from an object, as upstream's typed decoding does.
pub fn prune(obj: &mut serde_json::Value, fields: &[UnknownField]) {
    for field in fields {
        let Some((Step::Key(last), parents)) = field.0.split_last() else { continue };
        let parent = parents.iter().try_fold(&mut *obj, |at, step| match step {
            Step::Key(k) => at.get_mut(k.as_str()),
            Step::Index(n) => at.get_mut(*n),
        });
        if let Some(m) = parent.and_then(serde_json::Value::as_object_mut) {
            m.remove(last);
        }
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_string() } else { format!("{parent}.{key}") }
}

/// The paths of object keys a JSON document names more than once (the last one wins
/// when it is decoded). Not JSON: no duplicates (the decoder reports the syntax error).
pub fn duplicate_fields(json: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(json);
    let _ = DupSeed { path: String::new(), found: &mut found }.deserialize(&mut de);
    found
}

/// Walks any JSON value, recording duplicate keys of its objects.
struct DupSeed<'a> {
    path: String,
    found: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for DupSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DupSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq.next_element_seed(DupSeed { path: format!("{}[{i}]", self.path), found: self.found })?.is_some() {
            i += 1;
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            if !keys.insert(key) && !self.found.contains(&path) {
                self.found.push(path.clone());
            }
            map.next_value_seed(DupSeed { path, found: self.found })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicates_are_found_at_their_paths() {
        let body = br#"{"metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","image":"x","image":"y"}]},"spec":{}}"#;
        assert_eq!(duplicate_fields(body), vec!["metadata.name", "spec.containers[0].image", "spec"]);
        assert!(duplicate_fields(br#"{"a":{"b":1},"c":[{"b":2},{"b":3}]}"#).is_empty());
        assert!(duplicate_fields(b"not json").is_empty());
    }

    #[test]
    fn unknown_fields_of_a_typed_kind() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "colour": "red"},
            "spec": {"containers": [{"name": "c", "image": "x", "imagee": "y"}], "bogus": 1}});
        let unknown = crate::generated::shape::check("", "v1", "Pod", &pod).unwrap();
        let mut paths: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        paths.sort();
        assert_eq!(paths, vec!["metadata.colour", "spec.bogus", "spec.containers[0].imagee"]);
        let mut pruned = pod.clone();
        prune(&mut pruned, &unknown);
        assert_eq!(
            pruned,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}})
        );
        let ok = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"any": "key"}});
        assert!(crate::generated::shape::check("", "v1", "ConfigMap", &ok).unwrap().is_empty());
    }

    #[test]
    fn directives() {
        assert_eq!(FieldValidation::parse(None).unwrap(), FieldValidation::Warn);
        assert_eq!(FieldValidation::parse(Some("Strict")).unwrap(), FieldValidation::Strict);
        assert_eq!(FieldValidation::parse(Some("strict")).unwrap_err().status()["code"], 400);
        let problems = FieldProblems { unknown: vec!["spec.x".into()], duplicate: vec!["spec.y".into()] };
        let w = Warnings::default();
        problems.enforce(FieldValidation::Ignore, "Pod", "v1", &w).unwrap();
        assert!(w.take().is_empty());
        problems.enforce(FieldValidation::Warn, "Pod", "v1", &w).unwrap();
        assert_eq!(w.take(), vec!["duplicate field \"spec.y\"", "unknown field \"spec.x\""]);
        let e = problems.enforce(FieldValidation::Strict, "Pod", "v1", &w).unwrap_err();
        assert_eq!(
            e.status()["message"],
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: duplicate field \"spec.y\", unknown field \"spec.x\""
        );
    }
}
