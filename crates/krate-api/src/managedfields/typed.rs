//! Objects seen through their schema facts, the way server-side apply sees them:
//! which paths an object sets, the value at a path, merging an applied configuration
//! into a live object, and removing paths.

use serde_json::{Map, Value};

use super::fieldpath::{Path, PathElement, Set};
use crate::crd::schema::Schema as CustomSchema;
use crate::schema::{self, Definition, Shape};

/// How the value under a field is tracked.
#[derive(Clone, Copy, Debug)]
pub enum Kind<'a> {
    /// Owned as a whole: scalars, atomic lists, maps and structs.
    Leaf,
    /// An object whose fields are tracked one by one (None: no schema is known).
    Struct(Option<&'static Definition>),
    /// A map whose keys are tracked one by one; values are structs of this definition,
    /// or leaves.
    Map(Option<&'static Definition>),
    /// A list of scalars tracked as a set.
    SetList,
    /// A list of objects tracked by their key fields.
    MapList(&'static [&'static str], Option<&'static Definition>),
    /// A custom resource's value, tracked as its structural schema says (objects field
    /// by field, maps key by key, x-kubernetes-list-type set and map lists by item).
    Custom(&'a CustomSchema),
    /// A custom resource's list with x-kubernetes-list-type map.
    CustomMapList(&'a CustomSchema),
}

fn struct_kind(def: Option<&'static Definition>) -> Kind<'static> {
    match def {
        Some(d) if d.map_type == Some("atomic") => Kind::Leaf,
        d => Kind::Struct(d),
    }
}

/// The tracking of a value with a custom schema node.
fn custom_kind(s: &CustomSchema) -> Kind<'_> {
    match s.type_.as_str() {
        "object" if s.map_type.as_deref() == Some("atomic") => Kind::Leaf,
        "object" => Kind::Custom(s),
        "array" => match s.list_type.as_deref() {
            Some("set") => Kind::SetList,
            Some("map") if !s.list_map_keys.is_empty() => Kind::CustomMapList(s),
            _ => Kind::Leaf,
        },
        // Untyped, preserved subtrees are tracked field by field like unknown structs.
        "" if s.preserve_unknown_fields => Kind::Struct(None),
        _ => Kind::Leaf,
    }
}

impl<'a> Kind<'a> {
    /// The keys and item tracking of a list-map.
    fn map_list(self) -> Option<(Vec<&'a str>, Kind<'a>)> {
        match self {
            Kind::MapList(keys, def) => Some((keys.to_vec(), struct_kind(def))),
            Kind::CustomMapList(s) => Some((
                s.list_map_keys.iter().map(String::as_str).collect(),
                s.items.as_deref().map_or(Kind::Struct(None), custom_kind),
            )),
            _ => None,
        }
    }

    /// The kind of the value under `key` of an object of this kind.
    pub fn child(self, key: &str, value: &Value) -> Kind<'a> {
        match self {
            Kind::Custom(s) => match s.property(key) {
                Some(p) => custom_kind(p),
                None if s.preserve_unknown_fields && value.is_object() => Kind::Struct(None),
                None => Kind::Leaf,
            },
            Kind::Struct(None) => {
                if value.is_object() {
                    Kind::Struct(None)
                } else {
                    Kind::Leaf
                }
            }
            Kind::Struct(Some(def)) => match def.field(key) {
                None => Kind::Leaf,
                Some(f) => {
                    let elem = f.elem.and_then(schema::definition);
                    match f.shape {
                        Shape::Struct if f.map_type != Some("atomic") => struct_kind(elem),
                        Shape::Map if f.map_type != Some("atomic") => Kind::Map(elem),
                        Shape::List => match f.list_type {
                            Some("set") => Kind::SetList,
                            Some("map") if !f.list_map_keys.is_empty() => Kind::MapList(f.list_map_keys, elem),
                            _ => Kind::Leaf,
                        },
                        _ => Kind::Leaf,
                    }
                }
            },
            Kind::Map(Some(def)) => struct_kind(Some(def)),
            _ => Kind::Leaf,
        }
    }
}

/// A key field of a list-map item. Upstream's key fields with a default count as
/// that default when absent: `protocol` (of container, service and endpoint ports) is
/// the only one among the built-in kinds, so an applied port without it matches the
/// defaulted live one.
fn key_field(item: &Value, key: &str) -> Option<Value> {
    match item.get(key) {
        Some(v) if !v.is_null() => Some(v.clone()),
        _ if key == "protocol" => Some(Value::String("TCP".into())),
        _ => None,
    }
}

/// Whether `item` has the key fields `key`.
fn matches_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| key_field(item, k).as_ref() == Some(v))
}

/// The key fields of a list-map item (None when none is set).
fn item_key(item: &Value, keys: &[&str]) -> Option<PathElement> {
    item.as_object()?;
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = key_field(item, k) {
            m.insert((*k).to_string(), v);
        }
    }
    (!m.is_empty()).then(|| PathElement::key(&m))
}

/// Every path `value` sets: leaves, and the items of sets and list-maps.
pub fn field_set(value: &Value, kind: Kind<'_>) -> Set {
    let mut out = Set::default();
    walk(value, kind, &mut Vec::new(), &mut out);
    out
}

fn walk(value: &Value, kind: Kind<'_>, path: &mut Path, out: &mut Set) {
    match (kind, value) {
        (Kind::Struct(_) | Kind::Map(_) | Kind::Custom(_), Value::Object(m)) if !m.is_empty() => {
            for (k, v) in m {
                if v.is_null() {
                    continue;
                }
                path.push(PathElement::Field(k.clone()));
                walk(v, kind.child(k, v), path, out);
                path.pop();
            }
        }
        (Kind::SetList, Value::Array(items)) if !items.is_empty() => {
            for item in items {
                path.push(PathElement::value(item));
                out.insert(path);
                path.pop();
            }
        }
        (Kind::MapList(..) | Kind::CustomMapList(_), Value::Array(items)) if !items.is_empty() => {
            let (keys, item_kind) = kind.map_list().expect("a list-map");
            if items.iter().any(|i| item_key(i, &keys).is_none()) {
                out.insert(path);
                return;
            }
            for item in items {
                path.push(item_key(item, &keys).expect("checked above"));
                out.insert(path);
                walk(item, item_kind, path, out);
                path.pop();
            }
        }
        _ => out.insert(path),
    }
}

/// The value at `path`, if the object has one there.
pub fn value_at<'a>(value: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    let Some((first, rest)) = path.split_first() else { return Some(value) };
    let next = match first {
        PathElement::Field(n) => value.get(n)?,
        PathElement::Key(k) => {
            let key: Map<String, Value> = serde_json::from_str(k).ok()?;
            value.as_array()?.iter().find(|i| matches_key(i, &key))?
        }
        PathElement::Value(v) => value.as_array()?.iter().find(|i| i.to_string() == *v)?,
        PathElement::Index(i) => value.as_array()?.get(*i)?,
    };
    value_at(next, rest)
}

/// Removes what `path` names from `value` (a field, or a list item).
pub fn remove_at(value: &mut Value, path: &[PathElement]) {
    let Some((last, parent)) = path.split_last() else { return };
    let Some(parent) = value_at_mut(value, parent) else { return };
    match last {
        PathElement::Field(n) => {
            parent.as_object_mut().map(|m| m.remove(n));
        }
        PathElement::Key(k) => {
            let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            if let Some(items) = parent.as_array_mut() {
                items.retain(|i| !matches_key(i, &key));
            }
        }
        PathElement::Value(v) => {
            if let Some(items) = parent.as_array_mut() {
                // A value path element is the item's compact JSON.
                items.retain(|i| serde_json::to_string(i).ok().as_deref() != Some(v.as_str()));
            }
        }
        PathElement::Index(i) => {
            if let Some(items) = parent.as_array_mut()
                && *i < items.len()
            {
                items.remove(*i);
            }
        }
    }
}

fn value_at_mut<'a>(value: &'a mut Value, path: &[PathElement]) -> Option<&'a mut Value> {
    let Some((first, rest)) = path.split_first() else { return Some(value) };
    let next = match first {
        PathElement::Field(n) => value.get_mut(n)?,
        PathElement::Key(k) => {
            let key: Map<String, Value> = serde_json::from_str(k).ok()?;
            value.as_array_mut()?.iter_mut().find(|i| matches_key(i, &key))?
        }
        PathElement::Value(v) => value.as_array_mut()?.iter_mut().find(|i| i.to_string() == *v)?,
        PathElement::Index(i) => value.as_array_mut()?.get_mut(*i)?,
    };
    value_at_mut(next, rest)
}

/// Merges an applied configuration into the live object: structs and maps field by
/// field, sets as unions, list-maps item by item on their keys, leaves replaced.
pub fn merge(live: Option<&Value>, applied: &Value, kind: Kind<'_>) -> Value {
    match (kind, live, applied) {
        (Kind::Struct(_) | Kind::Map(_) | Kind::Custom(_), Some(Value::Object(l)), Value::Object(a)) => {
            let mut out = l.clone();
            for (k, v) in a {
                if v.is_null() {
                    continue;
                }
                let merged = merge(l.get(k), v, kind.child(k, v));
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Kind::SetList, Some(Value::Array(l)), Value::Array(a)) => {
            let mut out = l.clone();
            out.extend(a.iter().filter(|v| !l.contains(v)).cloned());
            Value::Array(out)
        }
        (Kind::MapList(..) | Kind::CustomMapList(_), Some(Value::Array(l)), Value::Array(a)) => {
            let (keys, item_kind) = kind.map_list().expect("a list-map");
            let mut out = l.clone();
            for item in a {
                let key = item_key(item, &keys);
                match out.iter_mut().find(|o| key.is_some() && item_key(o, &keys) == key) {
                    Some(existing) => *existing = merge(Some(existing), item, item_kind),
                    None => out.push(merge(None, item, item_kind)),
                }
            }
            Value::Array(out)
        }
        (_, _, Value::Object(a)) => {
            // Nothing to merge into: the applied value, without its nulls.
            Value::Object(a.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), strip_nulls(v))).collect())
        }
        (_, _, a) => a.clone(),
    }
}

fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), strip_nulls(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Kind<'static> {
        Kind::Struct(schema::kind_definition("apps", "v1", "Deployment"))
    }

    #[test]
    fn custom_schemas_merge_list_maps_by_key() {
        let s = CustomSchema::parse(
            &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            }}}}),
        );
        let live = json!({"spec": {"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}], "tags": ["x"]}});
        let applied = json!({"spec": {"ports": [{"name": "b", "port": 3}], "tags": ["y"]}});
        let merged = merge(Some(&live), &applied, Kind::Custom(&s));
        assert_eq!(merged["spec"]["ports"], json!([{"name": "a", "port": 1}, {"name": "b", "port": 3}]));
        assert_eq!(merged["spec"]["tags"], json!(["x", "y"]));
        let fields = field_set(&applied, Kind::Custom(&s)).to_fields_v1();
        assert!(fields["f:spec"]["f:ports"].get("k:{\"name\":\"b\"}").is_some(), "{fields}");
    }

    #[test]
    fn field_sets_follow_list_and_map_types() {
        let d = json!({"metadata": {"labels": {"app": "x"}, "finalizers": ["a"]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "i", "args": ["1"]}]}}}});
        let set = field_set(&d, deployment());
        let fields = set.to_fields_v1();
        assert_eq!(
            fields,
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"a\"": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {},
                    "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}, "f:args": {}}}}}}
            })
        );
        for p in set.paths() {
            assert!(value_at(&d, &p).is_some(), "{p:?}");
        }
    }

    #[test]
    fn defaulted_key_fields_match() {
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}}});
        let applied = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}]}]}}}});
        let merged = merge(Some(&live), &applied, deployment());
        let ports = &merged["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert_eq!(ports, &json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}]));
        for p in field_set(&applied, deployment()).paths() {
            assert!(value_at(&applied, &p).is_some() && value_at(&live, &p[..p.len() - 1]).is_some(), "{p:?}");
        }
    }

    #[test]
    fn merge_and_remove() {
        let live = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}}});
        let applied = json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "3"}, {"name": "c", "image": "4"}]}}}});
        let mut merged = merge(Some(&live), &applied, deployment());
        assert_eq!(merged["spec"]["replicas"], 1);
        let images: Vec<&str> = merged["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["image"].as_str().unwrap())
            .collect();
        assert_eq!(images, ["1", "3", "4"]);
        let item = field_set(&json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}}), deployment());
        for p in item.paths() {
            remove_at(&mut merged, &p);
        }
        assert_eq!(merged["spec"]["template"]["spec"]["containers"].as_array().unwrap().len(), 2);
    }
}
