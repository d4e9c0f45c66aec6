//! The shape of the generated protobuf facts (`generated::protobuf`).

/// One protobuf message of a built-in type.
#[derive(Debug)]
pub struct Message {
    /// The OpenAPI definition name (or the k8s-pb message for helper messages).
    pub name: &'static str,
    /// A helper message wrapping one repeated field (ExtraValue, Verbs…): in JSON it is
    /// that list itself.
    pub wrap: bool,
    /// Sorted by field number.
    pub fields: &'static [Field],
}

#[derive(Debug)]
pub struct Field {
    /// The JSON name (for `Ty::Inline`, the protobuf name: the fields sit in the parent).
    pub json: &'static str,
    pub tag: u32,
    pub ty: Ty,
    pub repeated: bool,
    /// Whether upstream's generated.proto packs this repeated scalar (it never does: proto2).
    pub packed: bool,
    /// A zero value ("" / 0 / false) of this field means something (a pointer in Go, or a
    /// required field), so decoding keeps it; other zero scalars are dropped, as Go's
    /// `omitempty` drops them.
    pub keep_zero: bool,
}

/// A field's value type. Message indexes point into `generated::protobuf::MESSAGES`.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Str,
    I32,
    I64,
    Bool,
    F64,
    /// `[]byte`: a base64 string in JSON.
    Bytes,
    Msg(u16),
    /// A message holding one list; the JSON value is the list.
    Wrapped(u16),
    /// Go's `json:",inline"` embedding: a nested message whose fields sit in this object.
    Inline(u16),
    /// `map<string, V>` (entries: key = 1, value = 2).
    Map(&'static Ty),
    /// metav1.Time: {seconds = 1, nanos = 2} ⇄ RFC 3339 to the second.
    Time,
    /// metav1.MicroTime: {seconds = 1, nanos = 2} ⇄ RFC 3339 to the microsecond.
    MicroTime,
    /// metav1.Duration: {duration = 1 (nanoseconds)} ⇄ Go's duration string.
    Duration,
    /// resource.Quantity: {string = 1} ⇄ its string.
    Quantity,
    /// intstr.IntOrString: {type = 1, intVal = 2, strVal = 3} ⇄ a number or a string.
    IntOrString,
    /// runtime.RawExtension, metav1.FieldsV1, apiextensions JSON: {raw = 1} holding JSON.
    RawJson,
    /// JSONSchemaPropsOrArray: {schema = 1, jSONSchemas = 2} ⇄ a schema or a list of them.
    SchemaOrArray(u16),
    /// JSONSchemaPropsOrBool: {allows = 1, schema = 2} ⇄ a bool or a schema.
    SchemaOrBool(u16),
    /// JSONSchemaPropsOrStringArray: {schema = 1, property = 2} ⇄ a schema or strings.
    SchemaOrStringArray(u16),
}
