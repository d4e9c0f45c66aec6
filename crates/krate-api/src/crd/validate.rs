//! Validation of custom objects against their version's schema, with upstream's causes
//! (kube-openapi's messages as apiextensions turns them into field errors), and the
//! seam where x-kubernetes-validations (CEL) rules are evaluated.

use serde_json::Value;

use super::schema::{Rule, Schema};
use crate::error::Cause;

/// Evaluates x-kubernetes-validations rules: the seam where CEL (krate-cel) plugs in.
/// `path` is the field path of the node the rules sit on ("" for the root), `schema`
/// that node's schema JSON (CEL types `self` by it), `self_value` its value and
/// `old_self` the same value in the stored object (given only for transition rules,
/// on updates). Returns the causes of failed rules (upstream: the rule's reason, on
/// `path` plus its fieldPath, with its message or messageExpression), empty when all
/// hold. Called with the rules without oldSelf on every write, and with the
/// transition rules on updates.
pub trait RuleEvaluator: Send + Sync {
    fn evaluate(
        &self,
        path: &str,
        rules: &[Rule],
        schema: &Value,
        self_value: &Value,
        old_self: Option<&Value>,
    ) -> Vec<Cause>;
}

/// Used until a CEL evaluator is wired in: rules are accepted without evaluation.
pub struct NoRules;
impl RuleEvaluator for NoRules {
    fn evaluate(&self, _: &str, _: &[Rule], _: &Value, _: &Value, _: Option<&Value>) -> Vec<Cause> {
        Vec::new()
    }
}

/// Whether a rule compares with the stored object (a transition rule).
fn is_transition(rule: &Rule) -> bool {
    rule.rule.contains("oldSelf")
}

/// Which rules a walk evaluates: on every write the rules without oldSelf (with the
/// schema checks); on updates, the transition rules alone (without schema checks).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
    Transitions,
}

fn evaluate(
    mode: Mode,
    rules: &dyn RuleEvaluator,
    path: &str,
    s: &Schema,
    v: &Value,
    old: Option<&Value>,
    out: &mut Vec<Cause>,
) {
    let chosen: Vec<Rule> = s
        .validations
        .iter()
        .filter(|r| match mode {
            Mode::Full => !is_transition(r),
            Mode::Transitions => is_transition(r) && (old.is_some() || r.optional_old_self),
        })
        .cloned()
        .collect();
    if !chosen.is_empty() {
        let schema = s.rules_schema.as_deref().unwrap_or(&Value::Null);
        out.extend(rules.evaluate(path, &chosen, schema, v, if mode == Mode::Full { None } else { old }));
    }
}

/// Evaluates the transition rules (those naming oldSelf) of an update, where the
/// value and its old counterpart both exist (as upstream, correlated by field name and
/// by map-list keys).
pub fn transition_rules(schema: &Schema, new: &Value, old: &Value, rules: &dyn RuleEvaluator) -> Vec<Cause> {
    let mut out = Vec::new();
    walk_transitions(schema, new, Some(old), "", rules, &mut out);
    out
}

fn walk_transitions(
    s: &Schema,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    rules: &dyn RuleEvaluator,
    out: &mut Vec<Cause>,
) {
    evaluate(Mode::Transitions, rules, path, s, v, old, out);
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(p) = s.property(k) {
                    let child_path = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk_transitions(p, child, old.and_then(|o| o.get(k)), &child_path, rules, out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = &s.items {
                for (i, x) in items.iter().enumerate() {
                    let old_x = correlated_item(s, x, old);
                    walk_transitions(item, x, old_x, &format!("{path}[{i}]"), rules, out);
                }
            }
        }
        _ => {}
    }
}

/// The old counterpart of a list item: by keys in map lists (none in other lists).
fn correlated_item<'a>(s: &Schema, x: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    let old_items = old.and_then(Value::as_array)?;
    match s.list_type.as_deref() {
        Some("map") => old_items.iter().find(|y| s.list_map_keys.iter().all(|k| y.get(k) == x.get(k))),
        _ => None,
    }
}

/// Validates `obj` (an object of the root schema) and its rules without oldSelf.
pub fn validate(schema: &Schema, obj: &Value, old: Option<&Value>, rules: &dyn RuleEvaluator) -> Vec<Cause> {
    let mut out = Vec::new();
    // The root's apiVersion, kind and metadata are the API server's, not the schema's.
    if let Some(m) = obj.as_object() {
        for (k, v) in m {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(p) = schema.property(k) {
                let old_v = old.and_then(|o| o.get(k));
                value(p, v, old_v, k, rules, &mut out);
            }
        }
        for r in &schema.required {
            if !matches!(r.as_str(), "apiVersion" | "kind" | "metadata") && !m.contains_key(r) {
                out.push(Cause::required(r.clone(), ""));
            }
        }
    }
    evaluate(Mode::Full, rules, "", schema, obj, old, &mut out);
    out
}

/// Go's %v of a float64 bound: integral values print without a fraction.
fn num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 { format!("{}", n as i64) } else { format!("{n}") }
}

/// The OpenAPI type name of a JSON value, as upstream's messages name it.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The value as upstream quotes it after "must be of type …: ".
fn shown(v: &Value) -> String {
    match v {
        Value::String(_) => "\"string\"".into(),
        other => format!("\"{}\"", type_name(other)),
    }
}

fn type_matches(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn value(s: &Schema, v: &Value, old: Option<&Value>, path: &str, rules: &dyn RuleEvaluator, out: &mut Vec<Cause>) {
    if v.is_null() {
        if !s.nullable && !s.type_.is_empty() {
            out.push(Cause::new(
                "FieldValueTypeInvalid",
                format!("Invalid value: \"null\": {path} in body must be of type {}: \"null\"", s.type_),
                path,
            ));
        }
        return;
    }
    if s.int_or_string && !(v.is_string() || v.is_i64() || v.is_u64()) {
        out.push(Cause::new(
            "FieldValueTypeInvalid",
            format!("Invalid value: {}: {path} in body must be of type integer,string: {}", shown(v), shown(v)),
            path,
        ));
        return;
    }
    if !s.type_.is_empty() && !type_matches(&s.type_, v) {
        out.push(Cause::new(
            "FieldValueTypeInvalid",
            format!("Invalid value: {}: {path} in body must be of type {}: {}", shown(v), s.type_, shown(v)),
            path,
        ));
        return;
    }
    if !s.enum_.is_empty() && !s.enum_.contains(v) {
        let supported: Vec<String> =
            s.enum_.iter().map(|e| e.as_str().map_or_else(|| e.to_string(), String::from)).collect();
        let refs: Vec<&str> = supported.iter().map(String::as_str).collect();
        let got = v.as_str().map_or_else(|| v.to_string(), String::from);
        out.push(Cause::not_supported(path, &got, &refs));
    }
    match v {
        Value::Number(n) => number(s, n.as_f64().unwrap_or(0.0), v, path, out),
        Value::String(text) => string(s, text, path, out),
        Value::Array(items) => array(s, items, old, path, rules, out),
        Value::Object(m) => object(s, m, old, path, rules, out),
        Value::Bool(_) | Value::Null => {}
    }
    junctions(s, v, path, out);
    evaluate(Mode::Full, rules, path, s, v, old, out);
}

fn number(s: &Schema, n: f64, v: &Value, path: &str, out: &mut Vec<Cause>) {
    if let Some(max) = s.maximum {
        if s.exclusive_maximum && n >= max {
            out.push(Cause::invalid(path, v, format!("{path} in body should be less than {}", num(max))));
        } else if n > max {
            out.push(Cause::invalid(path, v, format!("{path} in body should be less than or equal to {}", num(max))));
        }
    }
    if let Some(min) = s.minimum {
        if s.exclusive_minimum && n <= min {
            out.push(Cause::invalid(path, v, format!("{path} in body should be greater than {}", num(min))));
        } else if n < min {
            out.push(Cause::invalid(
                path,
                v,
                format!("{path} in body should be greater than or equal to {}", num(min)),
            ));
        }
    }
    if let Some(m) = s.multiple_of
        && m > 0.0
        && (n / m).fract().abs() > f64::EPSILON
    {
        out.push(Cause::invalid(path, v, format!("{path} in body should be a multiple of {}", num(m))));
    }
    if s.format == "int32" && (n < i32::MIN as f64 || n > i32::MAX as f64) {
        out.push(Cause::invalid(path, v, format!("{path} in body must be of type int32: \"{}\"", num(n))));
    }
}

fn string(s: &Schema, text: &str, path: &str, out: &mut Vec<Cause>) {
    let len = text.chars().count() as u64;
    if let Some(max) = s.max_length
        && len > max
    {
        out.push(Cause::too_long(path, max as usize));
    }
    if let Some(min) = s.min_length
        && len < min
    {
        out.push(Cause::invalid(path, text, format!("{path} in body should be at least {min} chars long")));
    }
    if let Some(re) = &s.pattern
        && !re.is_match(text)
    {
        out.push(Cause::invalid(path, text, format!("{path} in body should match '{}'", s.pattern_source)));
    }
    if !format_ok(&s.format, text) {
        out.push(Cause::invalid(path, text, format!("{path} in body must be of type {}: \"{text}\"", s.format)));
    }
}

/// The formats upstream checks (kube-openapi's strfmt registry, the common ones).
fn format_ok(format: &str, text: &str) -> bool {
    use base64::Engine as _;
    match format {
        "byte" => base64::engine::general_purpose::STANDARD.decode(text).is_ok(),
        "date-time" | "datetime" => text.parse::<jiff::Timestamp>().is_ok(),
        "date" => text.parse::<jiff::civil::Date>().is_ok() && text.len() == 10,
        "ipv4" => text.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<std::net::Ipv6Addr>().is_ok(),
        "uuid" => {
            let parts: Vec<&str> = text.split('-').collect();
            parts.len() == 5
                && [8, 4, 4, 4, 12]
                    .iter()
                    .zip(&parts)
                    .all(|(n, p)| p.len() == *n && p.chars().all(|c| c.is_ascii_hexdigit()))
        }
        "email" => text.split_once('@').is_some_and(|(a, b)| !a.is_empty() && b.contains('.') && !b.starts_with('.')),
        "hostname" => {
            !text.is_empty()
                && text.len() <= 255
                && text.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                })
        }
        _ => true,
    }
}

fn array(
    s: &Schema,
    items: &[Value],
    old: Option<&Value>,
    path: &str,
    rules: &dyn RuleEvaluator,
    out: &mut Vec<Cause>,
) {
    if let Some(max) = s.max_items
        && items.len() as u64 > max
    {
        out.push(Cause::new(
            "FieldValueTooMany",
            format!("Too many: {}: must have at most {max} items", items.len()),
            path,
        ));
    }
    if let Some(min) = s.min_items
        && (items.len() as u64) < min
    {
        out.push(Cause::invalid(path, "[...]", format!("{path} in body should have at least {min} items")));
    }
    match s.list_type.as_deref() {
        Some("set") => {
            for (i, x) in items.iter().enumerate() {
                if items[..i].contains(x) {
                    out.push(Cause::duplicate(
                        format!("{path}[{i}]"),
                        x.as_str().map_or_else(|| x.to_string(), String::from),
                    ));
                }
            }
        }
        Some("map") => {
            let key = |x: &Value| -> Vec<Value> {
                s.list_map_keys.iter().map(|k| x.get(k).cloned().unwrap_or(Value::Null)).collect()
            };
            for (i, x) in items.iter().enumerate() {
                if items[..i].iter().any(|y| key(y) == key(x)) {
                    let shown: Vec<String> = s
                        .list_map_keys
                        .iter()
                        .map(|k| format!("\"{k}\":{}", x.get(k).cloned().unwrap_or(Value::Null)))
                        .collect();
                    out.push(Cause::duplicate(
                        format!("{path}[{i}]"),
                        format!("map[string]interface {{}}{{{}}}", shown.join(", ")),
                    ));
                }
            }
        }
        _ => {}
    }
    if let Some(item) = &s.items {
        for (i, x) in items.iter().enumerate() {
            value(item, x, correlated_item(s, x, old), &format!("{path}[{i}]"), rules, out);
        }
    }
}

fn object(
    s: &Schema,
    m: &serde_json::Map<String, Value>,
    old: Option<&Value>,
    path: &str,
    rules: &dyn RuleEvaluator,
    out: &mut Vec<Cause>,
) {
    if let Some(max) = s.max_properties
        && m.len() as u64 > max
    {
        out.push(Cause::new(
            "FieldValueTooMany",
            format!("Too many: {}: must have at most {max} items", m.len()),
            path,
        ));
    }
    if let Some(min) = s.min_properties
        && (m.len() as u64) < min
    {
        out.push(Cause::invalid(path, "{...}", format!("{path} in body should have at least {min} properties")));
    }
    for r in &s.required {
        if !m.contains_key(r) {
            out.push(Cause::required(format!("{path}.{r}"), ""));
        }
    }
    if s.embedded_resource {
        for k in ["apiVersion", "kind"] {
            if m.get(k).and_then(Value::as_str).is_none_or(str::is_empty) {
                out.push(Cause::required(format!("{path}.{k}"), "must not be empty"));
            }
        }
    }
    for (k, v) in m {
        if s.embedded_resource && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(p) = s.property(k) {
            let child = if s.properties.contains_key(k) { format!("{path}.{k}") } else { format!("{path}[{k}]") };
            value(p, v, old.and_then(|o| o.get(k)), &child, rules, out);
        }
    }
}

/// allOf, anyOf, oneOf and not: value validations combined.
fn junctions(s: &Schema, v: &Value, path: &str, out: &mut Vec<Cause>) {
    let errs = |sub: &Schema| {
        let mut e = Vec::new();
        value(sub, v, None, path, &super::validate::NoRules, &mut e);
        e
    };
    for sub in &s.all_of {
        out.extend(errs(sub));
    }
    if !s.any_of.is_empty() && !s.int_or_string && s.any_of.iter().all(|sub| !errs(sub).is_empty()) {
        out.push(Cause::invalid(path, v, format!("{path} in body must validate at least one schema (anyOf)")));
    }
    if !s.one_of.is_empty() && s.one_of.iter().filter(|sub| errs(sub).is_empty()).count() != 1 {
        out.push(Cause::invalid(path, v, format!("{path} in body must validate one and only one schema (oneOf)")));
    }
    if let Some(n) = &s.not
        && errs(n).is_empty()
    {
        out.push(Cause::invalid(path, v, format!("{path} in body must not validate the schema (not)")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(&json!({"type": "object", "required": ["spec"], "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "name": {"type": "string", "maxLength": 5, "minLength": 2, "pattern": "^[a-z]+$"},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "port": {"x-kubernetes-int-or-string": true},
                "when": {"type": "string", "format": "date-time"},
                "note": {"type": "string", "nullable": true},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "pod": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            }},
        }}))
    }

    fn fields(obj: Value) -> Vec<(String, String)> {
        validate(&schema(), &obj, None, &NoRules).into_iter().map(|c| (c.field, c.message)).collect()
    }

    /// Fails every rule it sees, naming the rule and whether oldSelf came along.
    struct FailAll;
    impl RuleEvaluator for FailAll {
        fn evaluate(&self, path: &str, rules: &[Rule], schema: &Value, _: &Value, old: Option<&Value>) -> Vec<Cause> {
            assert!(schema.get("x-kubernetes-validations").is_some(), "the node's schema comes along");
            rules.iter().map(|r| Cause::invalid(path, "", format!("{} old={}", r.rule, old.is_some()))).collect()
        }
    }

    #[test]
    fn rules_are_evaluated_where_they_sit_and_transitions_only_on_update() {
        let s = Schema::parse(&json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.a > 0"}, {"rule": "self.a >= oldSelf.a"}],
            "properties": {"a": {"type": "integer"}}}}}));
        let new = json!({"spec": {"a": 2}});
        let old = json!({"spec": {"a": 1}});
        let created: Vec<String> = validate(&s, &new, None, &FailAll).into_iter().map(|c| c.message).collect();
        assert_eq!(created, vec!["Invalid value: \"\": self.a > 0 old=false"]);
        let updated: Vec<(String, String)> =
            transition_rules(&s, &new, &old, &FailAll).into_iter().map(|c| (c.field, c.message)).collect();
        assert_eq!(updated, vec![("spec".into(), "Invalid value: \"\": self.a >= oldSelf.a old=true".into())]);
    }

    #[test]
    fn valid_objects_pass() {
        let obj = json!({"spec": {"size": 3, "name": "abc", "mode": "fast", "port": "http", "when": "2024-01-02T03:04:05Z",
                                   "note": null, "tags": ["a", "b"], "pod": {"apiVersion": "v1", "kind": "Pod"}}});
        assert_eq!(fields(obj), vec![]);
    }

    #[test]
    fn upstream_messages_and_paths() {
        let got = fields(json!({"spec": {"size": "3"}}));
        assert_eq!(
            got,
            vec![(
                "spec.size".into(),
                "Invalid value: \"string\": spec.size in body must be of type integer: \"string\"".into()
            )]
        );
        let got = fields(
            json!({"spec": {"size": 11, "name": "ABCDEFG", "mode": "medium", "tags": ["a", "a", "b"], "pod": {}, "port": 1.5}}),
        );
        let msgs: Vec<String> = got.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        for want in [
            "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
            "spec.name: Too long: may not be more than 5 bytes",
            "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
            "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\"",
            "spec.tags: Too many: 3: must have at most 2 items",
            "spec.tags[1]: Duplicate value: \"a\"",
            "spec.pod.apiVersion: Required value: must not be empty",
            "spec.port: Invalid value: \"number\": spec.port in body must be of type integer,string: \"number\"",
        ] {
            assert!(msgs.iter().any(|m| m == want), "missing {want:?} in {msgs:#?}");
        }
        assert_eq!(fields(json!({"spec": {}})), vec![("spec.size".into(), "Required value".into())]);
        assert_eq!(fields(json!({})), vec![("spec".into(), "Required value".into())]);
    }
}
