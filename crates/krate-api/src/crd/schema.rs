//! A CRD version's openAPIV3Schema as a typed tree (upstream's structural schema), and the
//! checks that make a schema structural (the NonStructuralSchema condition).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// One x-kubernetes-validations rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    pub rule: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
    pub reason: Option<String>,
    pub field_path: Option<String>,
    pub optional_old_self: bool,
}

impl Rule {
    /// One entry of `x-kubernetes-validations` as the API carries it.
    pub fn from_json(r: &Value) -> Rule {
        let text = |k: &str| r.get(k).and_then(Value::as_str).map(String::from);
        Rule {
            rule: text("rule").unwrap_or_default(),
            message: text("message"),
            message_expression: text("messageExpression"),
            reason: text("reason"),
            field_path: text("fieldPath"),
            optional_old_self: r.get("optionalOldSelf").and_then(Value::as_bool).unwrap_or(false),
        }
    }
}

/// A node of a schema. Value-validation keywords (enum, bounds, pattern…) apply where
/// they appear; allOf/anyOf/oneOf/not hold value validations only (structural rule).
#[derive(Clone, Debug, Default)]
pub struct Schema {
    pub type_: String,
    pub format: String,
    pub description: String,
    pub properties: BTreeMap<String, Schema>,
    /// additionalProperties as a schema (maps).
    pub additional_properties: Option<Box<Schema>>,
    pub items: Option<Box<Schema>>,
    pub required: Vec<String>,
    pub enum_: Vec<Value>,
    pub nullable: bool,
    pub default: Option<Value>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: bool,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub unique_items: bool,
    pub pattern: Option<Arc<regex::Regex>>,
    pub pattern_source: String,
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    pub preserve_unknown_fields: bool,
    pub embedded_resource: bool,
    pub int_or_string: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    pub validations: Vec<Rule>,
    /// This node's schema as JSON, kept only where rules sit: CEL types `self` by it.
    pub rules_schema: Option<Arc<Value>>,
}

/// A schema that cannot be used, with upstream's field path and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaProblem {
    /// Upstream's cause type: "Forbidden", "Required", "Invalid".
    pub kind: &'static str,
    pub field: String,
    pub detail: String,
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}
fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}
fn b(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}
fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

impl Schema {
    /// Reads a JSONSchemaProps document. Problems with patterns are reported by
    /// `problems`; here an invalid pattern is simply not enforced.
    pub fn parse(v: &Value) -> Schema {
        let list = |k: &str| -> Vec<Schema> {
            v.get(k).and_then(Value::as_array).map(|a| a.iter().map(Schema::parse).collect()).unwrap_or_default()
        };
        let pattern_source = s(v, "pattern");
        Schema {
            type_: s(v, "type"),
            format: s(v, "format"),
            description: s(v, "description"),
            properties: v
                .get("properties")
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, p)| (k.clone(), Schema::parse(p))).collect())
                .unwrap_or_default(),
            additional_properties: v
                .get("additionalProperties")
                .filter(|a| a.is_object())
                .map(|a| Box::new(Schema::parse(a))),
            items: v.get("items").filter(|i| i.is_object()).map(|i| Box::new(Schema::parse(i))),
            required: v
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
                .unwrap_or_default(),
            enum_: v.get("enum").and_then(Value::as_array).cloned().unwrap_or_default(),
            nullable: b(v, "nullable"),
            default: v.get("default").cloned(),
            minimum: f(v, "minimum"),
            maximum: f(v, "maximum"),
            exclusive_minimum: b(v, "exclusiveMinimum"),
            exclusive_maximum: b(v, "exclusiveMaximum"),
            multiple_of: f(v, "multipleOf"),
            min_length: u(v, "minLength"),
            max_length: u(v, "maxLength"),
            min_items: u(v, "minItems"),
            max_items: u(v, "maxItems"),
            min_properties: u(v, "minProperties"),
            max_properties: u(v, "maxProperties"),
            unique_items: b(v, "uniqueItems"),
            pattern: (!pattern_source.is_empty())
                .then(|| regex::Regex::new(&pattern_source).ok().map(Arc::new))
                .flatten(),
            pattern_source,
            all_of: list("allOf"),
            any_of: list("anyOf"),
            one_of: list("oneOf"),
            not: v.get("not").filter(|n| n.is_object()).map(|n| Box::new(Schema::parse(n))),
            preserve_unknown_fields: b(v, "x-kubernetes-preserve-unknown-fields"),
            embedded_resource: b(v, "x-kubernetes-embedded-resource"),
            int_or_string: b(v, "x-kubernetes-int-or-string"),
            list_type: v.get("x-kubernetes-list-type").and_then(Value::as_str).map(String::from),
            list_map_keys: v
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
                .unwrap_or_default(),
            map_type: v.get("x-kubernetes-map-type").and_then(Value::as_str).map(String::from),
            validations: v
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Rule::from_json).collect())
                .unwrap_or_default(),
            rules_schema: v.get("x-kubernetes-validations").is_some().then(|| Arc::new(v.clone())),
        }
    }

    /// The schema of a property of an object node (declared, else additionalProperties).
    pub fn property(&self, name: &str) -> Option<&Schema> {
        self.properties.get(name).or(self.additional_properties.as_deref())
    }

    /// Whether unknown fields under this node are kept.
    pub fn keeps_unknown(&self) -> bool {
        self.preserve_unknown_fields
    }
}

/// The keywords allowed at the root of a CRD schema, besides type/properties and the
/// value validations (upstream: metadata may only name name and generateName).
const ROOT_ONLY_TYPES: &[&str] = &["object"];

/// Upstream's structural checks (apiextensions' `ValidateStructural` and the CRD
/// validation of openAPIV3Schema): every node has a type unless
/// x-kubernetes-int-or-string or x-kubernetes-preserve-unknown-fields; the root is an
/// object; metadata may only restrict name and generateName; value-validation
/// subtrees (allOf/anyOf/oneOf/not) may not declare types, defaults or descriptions
/// of their own beyond what the structural part has.
pub fn problems(raw: &Value, root: &str) -> Vec<SchemaProblem> {
    let mut out = Vec::new();
    let ty = s(raw, "type");
    if !ROOT_ONLY_TYPES.contains(&ty.as_str()) {
        if ty.is_empty() {
            out.push(SchemaProblem {
                kind: "Required",
                field: format!("{root}.type"),
                detail: "must not be empty at the root".into(),
            });
        } else {
            out.push(SchemaProblem {
                kind: "Invalid",
                field: format!("{root}.type"),
                detail: "must be object at the root".into(),
            });
        }
    }
    if let Some(meta) = raw.pointer("/properties/metadata") {
        if let Some(props) = meta.get("properties").and_then(Value::as_object) {
            for (name, _) in props {
                if name != "name" && name != "generateName" {
                    out.push(SchemaProblem {
                        kind: "Forbidden",
                        field: format!("{root}.properties[metadata]"),
                        detail: "must not specify anything other than name and generateName, but metadata is implicitly specified".into(),
                    });
                    break;
                }
            }
        }
        let mty = s(meta, "type");
        if !mty.is_empty() && mty != "object" {
            out.push(SchemaProblem {
                kind: "Invalid",
                field: format!("{root}.properties[metadata].type"),
                detail: "must be object".into(),
            });
        }
    }
    walk(raw, root, true, false, &mut out);
    out
}

/// `int_or_string_branch`: a direct allOf/anyOf branch of an int-or-string node, which
/// may name the integer or string type (upstream's special case).
fn walk(v: &Value, path: &str, structural: bool, int_or_string_branch: bool, out: &mut Vec<SchemaProblem>) {
    let Some(m) = v.as_object() else { return };
    let ty = s(v, "type");
    if structural {
        let int_or_string = b(v, "x-kubernetes-int-or-string");
        let preserve = b(v, "x-kubernetes-preserve-unknown-fields");
        if ty.is_empty() && !int_or_string && !preserve {
            out.push(SchemaProblem {
                kind: "Required",
                field: format!("{path}.type"),
                detail: "must not be empty for specified object fields".into(),
            });
        }
        if int_or_string && !ty.is_empty() {
            out.push(SchemaProblem {
                kind: "Invalid",
                field: format!("{path}.type"),
                detail: "must be empty if x-kubernetes-int-or-string is true".into(),
            });
        }
        if b(v, "x-kubernetes-embedded-resource") && ty != "object" {
            out.push(SchemaProblem {
                kind: "Invalid",
                field: format!("{path}.type"),
                detail: "must be object if x-kubernetes-embedded-resource is true".into(),
            });
        }
        if !ty.is_empty() && !["object", "array", "string", "integer", "number", "boolean"].contains(&ty.as_str()) {
            out.push(SchemaProblem {
                kind: "NotSupported",
                field: format!("{path}.type"),
                detail: format!(
                    "Unsupported value: \"{ty}\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
                ),
            });
        }
        if ty == "array" && !m.contains_key("items") {
            out.push(SchemaProblem {
                kind: "Required",
                field: format!("{path}.items"),
                detail: "must be specified".into(),
            });
        }
        if m.contains_key("properties")
            && m.get("additionalProperties").is_some_and(|a| a.is_object() || a == &Value::Bool(false))
        {
            out.push(SchemaProblem {
                kind: "Forbidden",
                field: format!("{path}.additionalProperties"),
                detail: "additionalProperties and properties are mutual exclusive".into(),
            });
        }
        if let Some(p) = m.get("pattern").and_then(Value::as_str)
            && let Err(e) = regex::Regex::new(p)
        {
            out.push(SchemaProblem {
                kind: "Invalid",
                field: format!("{path}.pattern"),
                detail: format!("must be a valid regular expression, but isn't: {e}"),
            });
        }
        if let Some(lt) = m.get("x-kubernetes-list-type").and_then(Value::as_str) {
            if ty != "array" {
                out.push(SchemaProblem {
                    kind: "Invalid",
                    field: format!("{path}.x-kubernetes-list-type"),
                    detail: "must only be used if type == \"array\"".into(),
                });
            }
            if lt == "map" && m.get("x-kubernetes-list-map-keys").and_then(Value::as_array).is_none_or(|k| k.is_empty())
            {
                out.push(SchemaProblem {
                    kind: "Required",
                    field: format!("{path}.x-kubernetes-list-map-keys"),
                    detail: "must not be empty if x-kubernetes-list-type is map".into(),
                });
            }
        }
    } else {
        // Inside allOf/anyOf/oneOf/not: value validations only.
        for (k, detail) in [
            ("type", "must be empty to be structural"),
            ("default", "must be undefined to be structural"),
            ("additionalProperties", "must be undefined to be structural"),
            ("nullable", "must be false to be structural"),
            ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
            ("x-kubernetes-embedded-resource", "must be false to be structural"),
            ("x-kubernetes-int-or-string", "must be false to be structural"),
        ] {
            let allowed = (k == "x-kubernetes-int-or-string" && m.get(k) == Some(&Value::Bool(false)))
                || (k == "type" && int_or_string_branch && matches!(ty.as_str(), "integer" | "string"));
            if m.contains_key(k) && !allowed {
                out.push(SchemaProblem { kind: "Forbidden", field: format!("{path}.{k}"), detail: detail.into() });
            }
        }
    }
    for (k, child) in m.get("properties").and_then(Value::as_object).into_iter().flatten() {
        walk(child, &format!("{path}.properties[{k}]"), structural, false, out);
    }
    if let Some(items) = m.get("items") {
        walk(items, &format!("{path}.items"), structural, false, out);
    }
    if let Some(ap) = m.get("additionalProperties").filter(|a| a.is_object()) {
        walk(ap, &format!("{path}.additionalProperties"), structural, false, out);
    }
    let int_or_string = b(v, "x-kubernetes-int-or-string");
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, child) in m.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
            walk(child, &format!("{path}.{key}[{i}]"), false, int_or_string && key != "oneOf", out);
        }
    }
    if let Some(n) = m.get("not") {
        walk(n, &format!("{path}.not"), false, false, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ROOT: &str = "spec.validation.openAPIV3Schema";

    #[test]
    fn structural_schema_passes() {
        let raw = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "minimum": 1},
                "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "items": {"type": "array", "items": {"type": "string"}},
            }},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }});
        // anyOf under int-or-string may name types, as upstream allows for that case.
        let p = problems(&raw, ROOT);
        assert!(p.iter().all(|p| !p.field.contains("spec.properties[replicas]")), "{p:?}");
        let s = Schema::parse(&raw);
        assert_eq!(s.properties["spec"].properties["replicas"].minimum, Some(1.0));
    }

    #[test]
    fn missing_types_and_items_are_not_structural() {
        let raw = json!({"type": "object", "properties": {"spec": {"properties": {"list": {"type": "array"}}}}});
        let p = problems(&raw, ROOT);
        let fields: Vec<&str> = p.iter().map(|p| p.field.as_str()).collect();
        assert!(fields.contains(&"spec.validation.openAPIV3Schema.properties[spec].type"), "{fields:?}");
        assert!(fields.contains(&"spec.validation.openAPIV3Schema.properties[spec].properties[list].items"));
    }

    #[test]
    fn metadata_may_only_restrict_names() {
        let raw = json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}});
        assert!(
            problems(&raw, ROOT).iter().any(|p| p.kind == "Forbidden" && p.field.ends_with("properties[metadata]"))
        );
    }
}
