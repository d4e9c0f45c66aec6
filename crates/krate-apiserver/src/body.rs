//! Request bodies in, responses out: JSON and YAML, size limits, content negotiation.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use serde_json::Value;

use krate_api::ApiError;
use krate_api::fieldvalidation::FieldValidation;

pub type Body = BoxBody<Bytes, std::io::Error>;

/// Upstream refuses request bodies over 3 MiB.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// How to write a response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
    /// JSON, as a meta.k8s.io/v1 Table (server-side printing).
    Table,
    /// `application/vnd.kubernetes.protobuf`, for built-in kinds (see [`for_kind`]).
    Protobuf,
    /// JSON, as meta.k8s.io/v1 PartialObjectMetadata(List): objects' metadata only, what
    /// metadata-only clients and informers (garbage collector, namespace deleter) ask for.
    Metadata,
}

/// Picks the response format from Accept; 406 when only formats we do not speak are acceptable.
pub fn negotiate(headers: &HeaderMap) -> Result<Format, ApiError> {
    negotiate_with(headers, true)
}

/// The format for answers about a kind: protobuf only when the kind has a protobuf
/// encoding (custom resources do not); otherwise the client's next choice, as upstream.
pub fn for_kind(headers: &HeaderMap, format: Format, protobuf: bool) -> Result<Format, ApiError> {
    if format == Format::Protobuf && !protobuf { negotiate_with(headers, false) } else { Ok(format) }
}

fn negotiate_with(headers: &HeaderMap, protobuf: bool) -> Result<Format, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else { return Ok(Format::Json) };
    for item in accept.split(',') {
        let mut parts = item.split(';').map(|p| p.trim().to_ascii_lowercase());
        let mt = parts.next().unwrap_or_default();
        let params: Vec<String> = parts.collect();
        let param = |k: &str| params.iter().find_map(|p| p.strip_prefix(&format!("{k}=")).map(String::from));
        if let Some(as_) = param("as") {
            // Only Tables of meta.k8s.io v1 (or v1beta1) are offered; other forms are skipped.
            let is_table = as_ == "table"
                && param("g").as_deref() == Some("meta.k8s.io")
                && matches!(param("v").as_deref(), Some("v1" | "v1beta1"));
            let is_meta = matches!(as_.as_str(), "partialobjectmetadata" | "partialobjectmetadatalist")
                && param("g").as_deref() == Some("meta.k8s.io")
                && matches!(param("v").as_deref(), Some("v1" | "v1beta1"));
            if mt == "application/json" || mt == "*/*" {
                if is_table {
                    return Ok(Format::Table);
                }
                if is_meta {
                    return Ok(Format::Metadata);
                }
            }
            continue;
        }
        match mt.as_str() {
            "" | "*/*" | "application/*" | "application/json" => return Ok(Format::Json),
            "application/yaml" => return Ok(Format::Yaml),
            krate_api::protobuf::MEDIA_TYPE if protobuf => return Ok(Format::Protobuf),
            _ => {}
        }
    }
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/yaml{} (asked for {accept})",
        if protobuf { ", application/vnd.kubernetes.protobuf" } else { "" }
    )))
}

/// An object's PartialObjectMetadata: its metadata under meta.k8s.io/v1's kind.
pub fn partial_metadata(obj: &Value) -> Value {
    serde_json::json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| serde_json::json!({})),
    })
}

/// Reads a body of at most [`MAX_BODY_BYTES`].
pub async fn read<B>(body: B) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes> + Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::too_large("the request body is too large: it may be at most 3145728 bytes"))
        }
        Err(e) => Err(ApiError::bad_request(format!("reading the request body failed: {e}"))),
    }
}

/// Decodes a JSON, YAML or protobuf object according to Content-Type.
pub fn decode(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let ct = content_type(headers);
    let value: Value = match ct.as_str() {
        "" | "application/json" | "*/*" => {
            serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("error decoding JSON: {e}")))?
        }
        "application/yaml" => {
            serde_yaml_ng::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
        }
        krate_api::protobuf::MEDIA_TYPE => krate_api::protobuf::decode(bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding protobuf: {e}")))?,
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {other})"
            )));
        }
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    Ok(value)
}

/// Fields a JSON request body names twice, when field validation looks at them.
pub fn duplicate_fields(headers: &HeaderMap, bytes: &[u8], directive: FieldValidation) -> Vec<String> {
    let json = matches!(content_type(headers).as_str(), "" | "application/json" | "*/*");
    if directive == FieldValidation::Ignore || !json {
        return Vec::new();
    }
    krate_api::fieldvalidation::duplicate_fields(bytes)
}

/// Warnings as upstream sends them: `Warning: 299 - "text"`, one header each.
pub fn add_warnings(response: &mut Response<Body>, warnings: Vec<String>) {
    for w in warnings {
        let text = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
}

pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default()
}

tokio::task_local! {
    /// Whether this request's JSON answers are indented (`?pretty`, or curl/wget/browsers).
    static PRETTY: bool;
}

/// Runs a request's handling with its pretty-printing choice.
pub async fn with_pretty<F: std::future::Future>(pretty: bool, f: F) -> F::Output {
    PRETTY.scope(pretty, f).await
}

/// Upstream's choice: `?pretty=true|1` (or false), else clients that people read with.
pub fn wants_pretty(query: Option<&str>, headers: &HeaderMap) -> bool {
    if let Some(v) = query {
        return v == "true" || v == "1";
    }
    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    ua.starts_with("curl") || ua.starts_with("Wget") || ua.starts_with("Mozilla/")
}

/// Indents compact JSON by two spaces per level, keeping its key order (a re-parse into
/// a map would sort the keys).
fn indent(json: Bytes) -> Bytes {
    let mut out = Vec::with_capacity(json.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.extend(std::iter::repeat_n(b' ', depth * 2));
    };
    let mut bytes = json.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b'{' | b'[' => {
                out.push(b);
                let close = if b == b'{' { b'}' } else { b']' };
                if bytes.peek() == Some(&close) {
                    out.push(close);
                    bytes.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(b);
            }
            b',' => {
                out.push(b);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            b' ' | b'\n' | b'\t' | b'\r' => {}
            _ => out.push(b),
        }
    }
    out.push(b'\n');
    Bytes::from(out)
}

pub fn respond_bytes(status: StatusCode, format: Format, json: Bytes) -> Response<Body> {
    let protobuf = (format == Format::Protobuf)
        .then(|| serde_json::from_slice::<Value>(&json).ok())
        .flatten()
        .and_then(|v| krate_api::protobuf::encode(&v).ok());
    let (ct, body) = match format {
        // A value with no protobuf encoding (not a built-in kind) goes out as JSON.
        Format::Protobuf => match protobuf {
            Some(b) => (krate_api::protobuf::MEDIA_TYPE, Bytes::from(b)),
            None => ("application/json", json),
        },
        Format::Json | Format::Table | Format::Metadata if PRETTY.try_with(|p| *p).unwrap_or(false) => {
            ("application/json", indent(json))
        }
        Format::Json | Format::Table | Format::Metadata => ("application/json", json),
        Format::Yaml => {
            let v: Value = serde_json::from_slice(&json).unwrap_or(Value::Null);
            ("application/yaml", Bytes::from(serde_yaml_ng::to_string(&v).unwrap_or_default()))
        }
    };
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, ct)
        .header("cache-control", "no-cache, private")
        .body(full(body))
        .expect("static headers are valid")
}

pub fn respond(status: StatusCode, format: Format, value: &Value) -> Response<Body> {
    respond_bytes(status, format, Bytes::from(serde_json::to_vec(value).unwrap_or_default()))
}

pub fn error(e: &ApiError, format: Format) -> Response<Body> {
    let status = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = respond(status, format, &e.status());
    if let Some(secs) = e.retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    resp
}

pub fn text(status: StatusCode, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
        .body(full(body))
        .expect("static headers are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indenting_keeps_key_order_and_strings() {
        let compact = Bytes::from_static(br#"{"kind":"X","a":{"b":[1,{"c":"x,{y}: \"z\""}],"e":{},"f":[]}}"#);
        let want = "{\n  \"kind\": \"X\",\n  \"a\": {\n    \"b\": [\n      1,\n      {\n        \"c\": \"x,{y}: \\\"z\\\"\"\n      }\n    ],\n    \"e\": {},\n    \"f\": []\n  }\n}\n";
        assert_eq!(String::from_utf8(indent(compact.clone()).to_vec()).unwrap(), want);
        let back: Value = serde_json::from_slice(&indent(compact.clone())).unwrap();
        assert_eq!(back, serde_json::from_slice::<Value>(&compact).unwrap());
    }
}
