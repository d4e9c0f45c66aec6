//! Strategic merge patch (application/strategic-merge-patch+json), as upstream's
//! apimachinery strategicpatch applies it on the server: maps merge key by key, lists
//! whose field has the `merge` patch strategy merge element by element on their merge
//! key (or as sets, for scalars), other lists and scalars are replaced, and `null`
//! deletes. The directives: `$patch: replace|delete|merge` on a map, `{"$patch":
//! "replace"}` and `{"$patch": "delete", KEY: V}` in a merging list,
//! `$retainKeys`, `$deleteFromPrimitiveList/FIELD` and `$setElementOrder/FIELD`.
//! Field facts (strategies, merge keys) come from [`crate::schema`].

use serde_json::{Map, Value};

use crate::schema::{self, Definition, Shape};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Why a patch could not be applied: the client's mistake, a 400 for the caller.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct PatchError(String);

fn err<T>(msg: impl Into<String>) -> Result<T, PatchError> {
    Err(PatchError(msg.into()))
}

/// What is known of the object at some place in the document.
#[derive(Clone, Copy)]
enum Schema {
    /// An object with fields; None when nothing is known (custom or free-form data).
    Struct(Option<&'static Definition>),
    /// A map whose values have this definition (or are scalars).
    MapOf(Option<&'static Definition>),
}

/// How the field under a key is patched.
struct FieldMeta {
    schema: Schema,
    merge_list: bool,
    merge_key: Option<&'static str>,
    replace: bool,
}

impl Schema {
    fn lookup(self, key: &str) -> FieldMeta {
        let plain = |schema| FieldMeta { schema, merge_list: false, merge_key: None, replace: false };
        match self {
            Schema::MapOf(elem) => plain(Schema::Struct(elem)),
            Schema::Struct(None) => plain(Schema::Struct(None)),
            Schema::Struct(Some(def)) => match def.field(key) {
                None => plain(Schema::Struct(None)),
                Some(f) => {
                    let elem = f.elem.and_then(schema::definition);
                    let schema = if f.shape == Shape::Map { Schema::MapOf(elem) } else { Schema::Struct(elem) };
                    FieldMeta {
                        schema,
                        merge_list: f.shape == Shape::List && f.has_strategy("merge"),
                        merge_key: f.merge_key,
                        replace: f.has_strategy("replace"),
                    }
                }
            },
        }
    }
}

/// Applies `patch` to `original`, an object of the OpenAPI definition `definition`
/// (None: no schema is known, so lists are replaced as in a merge patch).
pub fn apply(original: &Value, patch: &Value, definition: Option<&'static Definition>) -> Result<Value, PatchError> {
    let (Value::Object(o), Value::Object(p)) = (original, patch) else {
        return err("a strategic merge patch must be a JSON object");
    };
    Ok(Value::Object(merge_map(o.clone(), p.clone(), Schema::Struct(definition))?))
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: Schema,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => Ok(strip_nulls_and_directives(patch, schema)?),
            Some("delete") => Ok(Map::new()),
            Some("merge") => merge_map(original, patch, schema),
            _ => err(format!("Unknown patch type: {directive} in map: {}", Value::Object(patch))),
        };
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_orders(&mut original, &mut patch, schema)?;
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(gone) = value else {
                return err("invalid patch: $deleteFromPrimitiveList must be a list of scalars");
            };
            if let Some(Value::Array(items)) = original.get_mut(field) {
                items.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if key.starts_with(SET_ELEMENT_ORDER) {
            return err(format!("invalid patch: {key} must have a matching list"));
        }
        if value.is_null() {
            original.remove(&key);
            continue;
        }
        let meta = schema.lookup(&key);
        let merged = match (original.remove(&key), value) {
            (Some(Value::Object(o)), Value::Object(p)) if !meta.replace => Value::Object(merge_map(o, p, meta.schema)?),
            (Some(Value::Array(o)), Value::Array(p)) if meta.merge_list => {
                Value::Array(merge_list(o, p, meta.schema, meta.merge_key)?)
            }
            // A new value still loses its nulls and directives, as if merged into nothing.
            (None, Value::Object(p)) if !meta.replace => Value::Object(merge_map(Map::new(), p, meta.schema)?),
            (None, Value::Array(p)) if meta.merge_list => {
                Value::Array(merge_list(Vec::new(), p, meta.schema, meta.merge_key)?)
            }
            (_, p) => p,
        };
        original.insert(key, merged);
    }
    Ok(original)
}

/// `$patch: replace` keeps the patch as it is, minus what only makes sense as a patch.
fn strip_nulls_and_directives(patch: Map<String, Value>, schema: Schema) -> Result<Map<String, Value>, PatchError> {
    merge_map(Map::new(), patch, schema)
}

/// `$retainKeys`: keys of the original not listed are cleared; every key the patch sets
/// must be listed.
fn retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<(), PatchError> {
    let Some(keys) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(keys) = keys else {
        return err("invalid patch: $retainKeys must be a list of field names");
    };
    let keep = |k: &str| keys.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
            || k == DIRECTIVE
        {
            continue;
        }
        if !keep(k) {
            return err(format!("invalid patch: the field {k:?} is set but not in $retainKeys"));
        }
    }
    original.retain(|k, _| keep(k));
    Ok(())
}

/// `$setElementOrder/FIELD`: merges FIELD (if patched) and orders the result: patch
/// items in the given order, items only the server has kept where they were relative
/// to them.
fn set_element_orders(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: Schema,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    for key in keys {
        let order = patch.remove(&key).unwrap_or(Value::Null);
        let Value::Array(order) = order else {
            return err(format!("invalid patch: {key} must be a list"));
        };
        let field = &key[SET_ELEMENT_ORDER.len()..];
        let meta = schema.lookup(field);
        let server = match original.get(field) {
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => return err(format!("invalid patch: {field} is not a list")),
            None => None,
        };
        let patched = match patch.remove(field) {
            Some(Value::Array(p)) => Some(p),
            Some(Value::Null) | None => None,
            Some(_) => return err(format!("invalid patch: {field} must be a list to have {key}")),
        };
        let merged = match (server.clone(), patched) {
            (None, None) => continue,
            (Some(s), None) => s,
            (s, Some(p)) if meta.merge_list => merge_list(s.unwrap_or_default(), p, meta.schema, meta.merge_key)?,
            (_, Some(p)) => p,
        };
        let key_of = |v: &Value| -> Value {
            match meta.merge_key {
                Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
                None => v.clone(),
            }
        };
        let ordered =
            order_elements(merged, &order.iter().map(key_of).collect::<Vec<_>>(), &server.unwrap_or_default(), &key_of);
        original.insert(field.to_string(), Value::Array(ordered));
    }
    Ok(())
}

fn merge_list(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    schema: Schema,
    merge_key: Option<&'static str>,
) -> Result<Vec<Value>, PatchError> {
    if patch.iter().any(Value::is_array) || original.iter().any(Value::is_array) {
        return err("lists of lists are not supported");
    }
    let objects = patch.iter().chain(original.iter()).any(Value::is_object);
    if !objects {
        // Scalars merge as a set: the original's, then the patch's new ones.
        for v in patch {
            if !original.contains(&v) {
                original.push(v);
            }
        }
        return Ok(original);
    }
    let Some(key) = merge_key else {
        return err("cannot merge lists of objects without a merge key");
    };
    let server_order = original.clone();
    let mut replace = false;
    let mut items = Vec::new();
    for v in patch {
        let Value::Object(mut m) = v else {
            return err(format!("list element types are not identical: {v}"));
        };
        match m.get(DIRECTIVE).map(|d| d.as_str()) {
            None => items.push(m),
            Some(Some("delete")) => {
                let Some(k) = m.get(key) else {
                    return err(format!("map: {} does not contain declared merge key: {key}", Value::Object(m)));
                };
                let k = k.clone();
                original.retain(|o| o.get(key) != Some(&k));
            }
            Some(Some("replace")) => {
                m.remove(DIRECTIVE);
                replace = true;
            }
            Some(Some("merge")) => return err("merging lists cannot yet be specified in the patch"),
            Some(_) => {
                return err(format!("Unknown patch type: {} in map: {}", m[DIRECTIVE], Value::Object(m.clone())));
            }
        }
    }
    if replace {
        return items.into_iter().map(|m| strip_nulls_and_directives(m, schema).map(Value::Object)).collect();
    }
    let patch_keys: Vec<Value> = items.iter().map(|m| m.get(key).cloned().unwrap_or(Value::Null)).collect();
    for m in items {
        let Some(k) = m.get(key).cloned() else {
            return err(format!("map: {} does not contain declared merge key: {key}", Value::Object(m)));
        };
        match original.iter_mut().find(|o| o.get(key) == Some(&k)) {
            Some(Value::Object(o)) => {
                let merged = merge_map(std::mem::take(o), m, schema)?;
                *o = merged;
            }
            Some(_) => return err("list element types are not identical"),
            None => original.push(Value::Object(merge_map(Map::new(), m, schema)?)),
        }
    }
    let key_of = |v: &Value| v.get(key).cloned().unwrap_or(Value::Null);
    Ok(order_elements(original, &patch_keys, &server_order, &key_of))
}

/// Orders merged list items: those named in `order` (by key) in that order, the
/// server's other items interleaved where they stood relative to them.
fn order_elements(
    merged: Vec<Value>,
    order: &[Value],
    server: &[Value],
    key_of: &dyn Fn(&Value) -> Value,
) -> Vec<Value> {
    let server_index = |v: &Value| {
        let k = key_of(v);
        server.iter().position(|s| key_of(s) == k)
    };
    let (mut named, mut server_only): (Vec<Value>, Vec<Value>) =
        merged.into_iter().partition(|v| order.contains(&key_of(v)));
    named.sort_by_key(|v| {
        let k = key_of(v);
        order.iter().position(|o| *o == k)
    });
    server_only.sort_by_key(|v| server_index(v));
    let mut out = Vec::with_capacity(named.len() + server_only.len());
    let (mut named, mut server_only) = (named.into_iter().peekable(), server_only.into_iter().peekable());
    loop {
        match (named.peek(), server_only.peek()) {
            (Some(n), Some(s)) => {
                let take_server = matches!((server_index(n), server_index(s)), (Some(a), Some(b)) if b < a);
                out.push(if take_server { server_only.next() } else { named.next() }.expect("peeked"));
            }
            (Some(_), None) => out.extend(named.by_ref()),
            (None, Some(_)) => out.extend(server_only.by_ref()),
            (None, None) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(original: Value, patch: Value) -> Value {
        apply(&original, &patch, schema::kind_definition("", "v1", "Pod")).unwrap()
    }

    fn deployment(original: Value, patch: Value) -> Value {
        apply(&original, &patch, schema::kind_definition("apps", "v1", "Deployment")).unwrap()
    }

    #[test]
    fn maps_merge_and_null_deletes() {
        let out = pod(
            json!({"metadata": {"labels": {"a": "1", "b": "2"}, "name": "p"}}),
            json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
        );
        assert_eq!(out, json!({"metadata": {"labels": {"b": "2", "c": "3"}, "name": "p"}}));
    }

    #[test]
    fn containers_merge_on_name() {
        let out = pod(
            json!({"spec": {"containers": [{"name": "a", "image": "x:1", "ports": [{"containerPort": 80}]}, {"name": "b", "image": "y"}]}}),
            json!({"spec": {"containers": [{"name": "a", "image": "x:2"}, {"name": "c", "image": "z"}]}}),
        );
        // Upstream's order: patch items first unless a server-only item stood before them.
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "x:2", "ports": [{"containerPort": 80}]}, {"name": "c", "image": "z"}, {"name": "b", "image": "y"}])
        );
    }

    #[test]
    fn lists_without_merge_strategy_are_replaced() {
        // container args have no patch strategy: replaced whole.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a", "args": ["1", "2"]}]}}),
            json!({"spec": {"containers": [{"name": "a", "args": ["3"]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["args"], json!(["3"]));
    }

    #[test]
    fn delete_directive_in_a_list_removes_by_merge_key() {
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
        );
        assert_eq!(out["spec"]["containers"], json!([{"name": "b"}]));
    }

    #[test]
    fn replace_directive_in_a_list_replaces_it() {
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "c"}, {"$patch": "replace"}]}}),
        );
        assert_eq!(out["spec"]["containers"], json!([{"name": "c"}]));
    }

    #[test]
    fn replace_and_delete_directives_on_maps() {
        let out = pod(
            json!({"metadata": {"labels": {"a": "1"}, "annotations": {"x": "y"}}}),
            json!({"metadata": {"labels": {"b": "2", "$patch": "replace"}, "annotations": {"$patch": "delete"}}}),
        );
        assert_eq!(out["metadata"], json!({"labels": {"b": "2"}, "annotations": {}}));
    }

    #[test]
    fn scalar_merge_lists_union_and_delete_from_primitive_list() {
        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "c"]));
    }

    #[test]
    fn set_element_order_orders_the_merged_list() {
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}], "containers": [{"name": "c", "image": "i"}]}}),
        );
        let names: Vec<&str> =
            out["spec"]["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        // b is server-only: it goes before c, which followed it on the server (upstream's rule).
        assert_eq!(names, ["b", "c", "a"]);
        assert_eq!(out["spec"]["containers"][1]["image"], "i");
    }

    #[test]
    fn retain_keys_clears_other_fields() {
        // Deployment strategy has patch strategy retainKeys: switching to Recreate drops rollingUpdate.
        let out = deployment(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let bad = apply(
            &json!({"spec": {}}),
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
            schema::kind_definition("apps", "v1", "Deployment"),
        );
        assert!(bad.is_err());
    }

    #[test]
    fn new_values_lose_directives_and_nulls() {
        let out = deployment(
            json!({"spec": {}}),
            json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "a", "image": null}]}}}}),
        );
        assert_eq!(out["spec"]["template"]["spec"], json!({"containers": [{"name": "a"}]}));
    }

    #[test]
    fn missing_merge_key_and_bad_directives_are_errors() {
        let def = schema::kind_definition("", "v1", "Pod");
        let original = json!({"spec": {"containers": [{"name": "a"}]}});
        assert!(apply(&original, &json!({"spec": {"containers": [{"image": "x"}]}}), def).is_err());
        assert!(apply(&original, &json!({"spec": {"$patch": "bogus"}}), def).is_err());
        assert!(apply(&original, &json!(["not", "an", "object"]), def).is_err());
    }

    #[test]
    fn client_mistakes_in_deployments_are_errors() {
        let def = schema::kind_definition("apps", "v1", "Deployment");
        let original =
            json!({"metadata": {"name": "p"}, "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}});
        for bad in [
            json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}}),
            json!({"metadata": {"labels": {"$patch": "bogus"}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "$patch": "merge"}]}}}}),
            json!({"metadata": {"$retainKeys": ["name"], "labels": {"x": "y"}}}),
        ] {
            assert!(apply(&original, &bad, def).is_err(), "{bad}");
        }
    }

    #[test]
    fn without_a_schema_lists_are_replaced() {
        let out = apply(&json!({"a": [1, 2], "m": {"x": 1}}), &json!({"a": [3], "m": {"y": 2}}), None).unwrap();
        assert_eq!(out, json!({"a": [3], "m": {"x": 1, "y": 2}}));
    }

    #[test]
    fn maps_of_objects_merge_by_key() {
        // A Secret's data is a plain map; a ConfigMap's too. Env vars merge on name inside containers.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]}}),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "3"}]}]}}),
        );
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}])
        );
    }
}
