//! Pruning (unknown fields dropped, as upstream's structural pruning) and defaulting
//! (schema defaults filled in, as upstream's structural defaulting) of custom objects.

use serde_json::{Map, Value};

use super::schema::Schema;
use crate::fieldvalidation::{Step, UnknownField};

/// ObjectMeta's fields: what metadata of an embedded resource may hold.
const META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The fields of `obj` the schema has no place for (root apiVersion, kind and metadata
/// are always known), in document order.
pub fn unknown_fields(schema: &Schema, obj: &Value) -> Vec<UnknownField> {
    let mut out = Vec::new();
    let mut path = Vec::new();
    walk_object(schema, obj, true, &mut path, &mut out);
    out
}

fn walk_object(s: &Schema, v: &Value, resource: bool, path: &mut Vec<Step>, out: &mut Vec<UnknownField>) {
    let Some(m) = v.as_object() else {
        if let Value::Array(items) = v
            && let Some(item) = &s.items
        {
            for (i, x) in items.iter().enumerate() {
                path.push(Step::Index(i));
                walk_object(item, x, item.embedded_resource, path, out);
                path.pop();
            }
        }
        return;
    };
    for (k, child) in m {
        path.push(Step::Key(k.clone()));
        if resource && (k == "apiVersion" || k == "kind") {
        } else if resource && k == "metadata" {
            // Metadata's own fields are ObjectMeta's (the root's are checked by the
            // typed decode of metadata; embedded ones here).
            if path.len() > 1
                && let Some(meta) = child.as_object()
            {
                for mk in meta.keys().filter(|mk| !META_FIELDS.contains(&mk.as_str())) {
                    path.push(Step::Key(mk.clone()));
                    out.push(UnknownField(path.clone()));
                    path.pop();
                }
            }
        } else if let Some(p) = s.property(k) {
            walk_object(p, child, p.embedded_resource, path, out);
        } else if !s.keeps_unknown() {
            out.push(UnknownField(path.clone()));
        }
        path.pop();
    }
}

/// Fills in schema defaults, top down: a default applies where the field is absent (or
/// null and not nullable), and what it brings is defaulted in turn.
pub fn apply_defaults(s: &Schema, v: &mut Value) {
    match v {
        Value::Object(m) => default_object(s, m),
        Value::Array(items) => {
            if let Some(item) = &s.items {
                items.iter_mut().for_each(|x| apply_defaults(item, x));
            }
        }
        _ => {}
    }
}

fn default_object(s: &Schema, m: &mut Map<String, Value>) {
    for (k, p) in &s.properties {
        if let Some(d) = &p.default {
            let missing = match m.get(k) {
                None => true,
                Some(Value::Null) => !p.nullable,
                Some(_) => false,
            };
            if missing {
                m.insert(k.clone(), d.clone());
            }
        }
    }
    for (k, child) in m.iter_mut() {
        if let Some(p) = s.property(k) {
            apply_defaults(p, child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer", "default": 3},
                "mode": {"type": "string", "default": "fast"},
                "opts": {"type": "object", "default": {}, "properties": {"level": {"type": "integer", "default": 1}}},
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "embedded": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            }},
        }}))
    }

    #[test]
    fn unknown_fields_are_found_except_where_preserved() {
        let obj = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a"}, "extra": 1,
            "spec": {"size": 1, "bogus": true, "free": {"anything": 1}, "labels": {"k": "v"},
                     "list": [{"a": "b", "c": 1}],
                     "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1}, "spec": {}}}});
        let mut found: Vec<String> = unknown_fields(&schema(), &obj).iter().map(ToString::to_string).collect();
        found.sort();
        assert_eq!(found, vec!["extra", "spec.bogus", "spec.embedded.metadata.junk", "spec.list[0].c"]);
    }

    #[test]
    fn defaults_fill_absent_fields_top_down() {
        let mut obj = json!({"spec": {"mode": "slow", "list": [{}], "size": null}});
        apply_defaults(&schema(), &mut obj);
        assert_eq!(obj["spec"]["size"], 3);
        assert_eq!(obj["spec"]["mode"], "slow");
        assert_eq!(obj["spec"]["opts"], json!({"level": 1}));
        assert_eq!(obj["spec"]["list"][0]["a"], "x");
    }
}
