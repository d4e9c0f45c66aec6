//! The Swagger 2.0 document in gnostic's protobuf form (`openapi.v2.Document` of
//! gnostic-models' OpenAPIv2.proto), which kubectl asks /openapi/v2 for
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`). Only what the
//! documents built here contain is encoded; field numbers are the proto's.
//! Values that gnostic keeps as `Any` (vendor extensions, defaults, enums) carry
//! their YAML text; JSON is YAML, so they carry their JSON.

use serde_json::{Map, Value};

/// A protobuf message being written (proto3: empty scalars are left out).
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(((field as u64) << 3) | wire as u64);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn str_of(&mut self, field: u32, v: Option<&Value>) {
        if let Some(s) = v.and_then(Value::as_str) {
            self.string(field, s);
        }
    }

    fn strings(&mut self, field: u32, v: Option<&Value>) {
        for s in v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            self.bytes(field, s.as_bytes());
        }
    }

    fn boolean(&mut self, field: u32, v: Option<&Value>) {
        if v.and_then(Value::as_bool) == Some(true) {
            self.key(field, 0);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, v: Option<&Value>) {
        if let Some(n) = v.and_then(Value::as_i64).filter(|n| *n != 0) {
            self.key(field, 0);
            self.varint(n as u64);
        }
    }

    fn double(&mut self, field: u32, v: Option<&Value>) {
        if let Some(n) = v.and_then(Value::as_f64).filter(|n| *n != 0.0) {
            self.key(field, 1);
            self.0.extend_from_slice(&n.to_le_bytes());
        }
    }

    /// A sub-message; written even when empty, since its presence means something.
    fn message(&mut self, field: u32, m: Msg) {
        self.bytes(field, &m.0);
    }
}

/// `Any { string yaml = 2; }`.
fn any(v: &Value) -> Msg {
    let mut m = Msg::default();
    m.string(2, &v.to_string());
    m
}

/// `NamedAny { string name = 1; Any value = 2; }` for each `x-` key of `obj`.
fn vendor_extensions(m: &mut Msg, field: u32, obj: &Map<String, Value>) {
    for (k, v) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Msg::default();
        named.string(1, k);
        named.message(2, any(v));
        m.message(field, named);
    }
}

fn schema(v: &Value) -> Msg {
    let mut m = Msg::default();
    let Some(o) = v.as_object() else { return m };
    m.str_of(1, o.get("$ref"));
    m.str_of(2, o.get("format"));
    m.str_of(3, o.get("title"));
    m.str_of(4, o.get("description"));
    if let Some(d) = o.get("default") {
        m.message(5, any(d));
    }
    m.double(6, o.get("multipleOf"));
    m.double(7, o.get("maximum"));
    m.boolean(8, o.get("exclusiveMaximum"));
    m.double(9, o.get("minimum"));
    m.boolean(10, o.get("exclusiveMinimum"));
    m.int64(11, o.get("maxLength"));
    m.int64(12, o.get("minLength"));
    m.str_of(13, o.get("pattern"));
    m.int64(14, o.get("maxItems"));
    m.int64(15, o.get("minItems"));
    m.boolean(16, o.get("uniqueItems"));
    m.int64(17, o.get("maxProperties"));
    m.int64(18, o.get("minProperties"));
    m.strings(19, o.get("required"));
    for e in o.get("enum").and_then(Value::as_array).into_iter().flatten() {
        m.message(20, any(e));
    }
    match o.get("additionalProperties") {
        // AdditionalPropertiesItem { Schema schema = 1; bool boolean = 2; }
        Some(Value::Bool(b)) => {
            let mut item = Msg::default();
            item.key(2, 0);
            item.varint(*b as u64);
            m.message(21, item);
        }
        Some(s @ Value::Object(_)) => {
            let mut item = Msg::default();
            item.message(1, schema(s));
            m.message(21, item);
        }
        _ => {}
    }
    match o.get("type") {
        // TypeItem { repeated string value = 1; }
        Some(t @ Value::String(_)) => {
            let mut item = Msg::default();
            item.str_of(1, Some(t));
            m.message(22, item);
        }
        Some(t @ Value::Array(_)) => {
            let mut item = Msg::default();
            item.strings(1, Some(t));
            m.message(22, item);
        }
        _ => {}
    }
    if let Some(items) = o.get("items") {
        // ItemsItem { repeated Schema schema = 1; }
        let mut item = Msg::default();
        match items {
            Value::Array(list) => list.iter().for_each(|s| item.message(1, schema(s))),
            s => item.message(1, schema(s)),
        }
        m.message(23, item);
    }
    for s in o.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        m.message(24, schema(s));
    }
    if let Some(Value::Object(props)) = o.get("properties") {
        m.message(25, named_schemas(props));
    }
    m.boolean(27, o.get("readOnly"));
    if let Some(e) = o.get("example") {
        m.message(30, any(e));
    }
    vendor_extensions(&mut m, 31, o);
    m
}

/// `{ repeated NamedSchema additional_properties = 1; }` (Properties, Definitions).
fn named_schemas(map: &Map<String, Value>) -> Msg {
    let mut m = Msg::default();
    for (name, s) in map {
        let mut named = Msg::default();
        named.string(1, name);
        named.message(2, schema(s));
        m.message(1, named);
    }
    m
}

/// `ParametersItem { Parameter parameter = 1; }`, `Parameter { BodyParameter = 1;
/// NonBodyParameter = 2 }`; non-body parameters here are query or path ones.
fn parameter(v: &Value) -> Msg {
    let mut p = Msg::default();
    let location = v.get("in").and_then(Value::as_str).unwrap_or("");
    if location == "body" {
        let mut b = Msg::default();
        b.str_of(1, v.get("description"));
        b.str_of(2, v.get("name"));
        b.str_of(3, v.get("in"));
        b.boolean(4, v.get("required"));
        if let Some(s) = v.get("schema") {
            b.message(5, schema(s));
        }
        p.message(1, b);
    } else {
        let mut sub = Msg::default();
        sub.boolean(1, v.get("required"));
        sub.str_of(2, v.get("in"));
        sub.str_of(3, v.get("description"));
        sub.str_of(4, v.get("name"));
        // QueryParameterSubSchema has allow_empty_value = 5 before type; PathParameterSubSchema does not.
        let (ty, unique, which) = if location == "path" { (5, 19, 4) } else { (6, 20, 3) };
        sub.str_of(ty, v.get("type"));
        sub.boolean(unique, v.get("uniqueItems"));
        let mut non_body = Msg::default();
        non_body.message(which, sub);
        p.message(2, non_body);
    }
    let mut item = Msg::default();
    item.message(1, p);
    item
}

fn operation(v: &Value) -> Msg {
    let mut m = Msg::default();
    let Some(o) = v.as_object() else { return m };
    m.strings(1, o.get("tags"));
    m.str_of(2, o.get("summary"));
    m.str_of(3, o.get("description"));
    m.str_of(5, o.get("operationId"));
    m.strings(6, o.get("produces"));
    m.strings(7, o.get("consumes"));
    for p in o.get("parameters").and_then(Value::as_array).into_iter().flatten() {
        m.message(8, parameter(p));
    }
    if let Some(Value::Object(responses)) = o.get("responses") {
        // Responses { repeated NamedResponseValue response_code = 1; }
        let mut rs = Msg::default();
        for (code, r) in responses {
            let mut response = Msg::default();
            response.str_of(1, r.get("description"));
            if let Some(s) = r.get("schema") {
                // SchemaItem { Schema schema = 1; }
                let mut item = Msg::default();
                item.message(1, schema(s));
                response.message(2, item);
            }
            let mut value = Msg::default();
            value.message(1, response);
            let mut named = Msg::default();
            named.string(1, code);
            named.message(2, value);
            rs.message(1, named);
        }
        m.message(9, rs);
    }
    m.strings(10, o.get("schemes"));
    vendor_extensions(&mut m, 13, o);
    m
}

fn path_item(v: &Value) -> Msg {
    let mut m = Msg::default();
    for (field, method) in
        [(2, "get"), (3, "put"), (4, "post"), (5, "delete"), (6, "options"), (7, "head"), (8, "patch")]
    {
        if let Some(op) = v.get(method) {
            m.message(field, operation(op));
        }
    }
    for p in v.get("parameters").and_then(Value::as_array).into_iter().flatten() {
        m.message(9, parameter(p));
    }
    m
}

/// `SecurityRequirement { repeated NamedStringArray additional_properties = 1; }`.
fn security_requirement(v: &Value) -> Msg {
    let mut m = Msg::default();
    for (name, scopes) in v.as_object().into_iter().flatten() {
        let mut array = Msg::default();
        array.strings(1, Some(scopes));
        let mut named = Msg::default();
        named.string(1, name);
        named.message(2, array);
        m.message(1, named);
    }
    m
}

/// `SecurityDefinitions`: API-key schemes only (`SecurityDefinitionsItem.api_key_security = 2`).
fn security_definitions(v: &Map<String, Value>) -> Msg {
    let mut m = Msg::default();
    for (name, def) in v {
        let mut key = Msg::default();
        key.str_of(1, def.get("type"));
        key.str_of(2, def.get("name"));
        key.str_of(3, def.get("in"));
        key.str_of(4, def.get("description"));
        let mut item = Msg::default();
        item.message(2, key);
        let mut named = Msg::default();
        named.string(1, name);
        named.message(2, item);
        m.message(1, named);
    }
    m
}

/// Encodes a Swagger 2.0 document as `openapi.v2.Document`.
pub fn document(doc: &Value) -> Vec<u8> {
    let mut m = Msg::default();
    m.str_of(1, doc.get("swagger"));
    if let Some(info) = doc.get("info") {
        let mut i = Msg::default();
        i.str_of(1, info.get("title"));
        i.str_of(2, info.get("version"));
        m.message(2, i);
    }
    if let Some(Value::Object(paths)) = doc.get("paths") {
        // Paths { repeated NamedPathItem path = 2; }
        let mut ps = Msg::default();
        for (path, item) in paths {
            let mut named = Msg::default();
            named.string(1, path);
            named.message(2, path_item(item));
            ps.message(2, named);
        }
        m.message(8, ps);
    }
    if let Some(Value::Object(defs)) = doc.get("definitions") {
        m.message(9, named_schemas(defs));
    }
    for s in doc.get("security").and_then(Value::as_array).into_iter().flatten() {
        m.message(12, security_requirement(s));
    }
    if let Some(Value::Object(defs)) = doc.get("securityDefinitions") {
        m.message(13, security_definitions(defs));
    }
    m.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_as_protoc_would() {
        // Document{swagger:"2.0", info:{title:"K"}} by hand: 0a 03 "2.0" 12 03 (0a 01 "K").
        let bytes = document(&json!({"swagger": "2.0", "info": {"title": "K"}}));
        assert_eq!(bytes, [0x0a, 3, b'2', b'.', b'0', 0x12, 3, 0x0a, 1, b'K']);
        // A schema with a type, a required list and an extension.
        let s = schema(&json!({"type": "object", "required": ["a"], "x-kubernetes-map-type": "atomic"})).0;
        let want: Vec<u8> = [
            vec![0x9a, 0x01, 1, b'a'],    // required (19)
            vec![0xb2, 0x01, 8, 0x0a, 6], // type (22) { value (1) }
            b"object".to_vec(),
            vec![0xfa, 0x01, 35, 0x0a, 21], // vendor_extension (31) { name (1)
            b"x-kubernetes-map-type".to_vec(),
            vec![0x12, 10, 0x12, 8], //   value (2) { yaml (2) } }
            b"\"atomic\"".to_vec(),
        ]
        .concat();
        assert_eq!(s, want);
    }
}
