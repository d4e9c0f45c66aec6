//! Documents served with an ETag (OpenAPI, aggregated discovery): the hash of their
//! bytes, and 304 Not Modified when the client already holds them.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, header};

use crate::body::{self, Body};

/// Upstream's document hash: SHA-512 of the bytes, in upper-case hex.
pub fn hash(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA512, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02X}")).collect()
}

/// Whether If-None-Match names `etag` (quoted or weak forms, or `*`).
pub fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/").trim_matches('"') == etag
        },
    )
}

/// A 200 with the document, or a 304 when the client's copy is current.
pub fn respond(
    headers: &HeaderMap,
    etag: &str,
    bytes: Bytes,
    content_type: &str,
    cache_control: &str,
) -> Response<Body> {
    let quoted = format!("\"{etag}\"");
    let (status, body) =
        if not_modified(headers, etag) { (StatusCode::NOT_MODIFIED, Bytes::new()) } else { (StatusCode::OK, bytes) };
    let mut builder = Response::builder()
        .status(status)
        .header(header::ETAG, quoted.as_str())
        .header(header::CACHE_CONTROL, cache_control)
        .header(header::VARY, "Accept");
    if status == StatusCode::OK {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    builder.body(body::full(body)).unwrap_or_else(|_| {
        // Only a content type echoed from a client could be malformed; answer without it.
        Response::builder()
            .status(status)
            .header(header::ETAG, quoted.as_str())
            .body(body::full(Bytes::new()))
            .expect("static headers are valid")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_forms() {
        let mut h = HeaderMap::new();
        assert!(!not_modified(&h, "AB"));
        h.insert(header::IF_NONE_MATCH, "\"XY\", W/\"AB\"".parse().unwrap());
        assert!(not_modified(&h, "AB"));
        assert!(!not_modified(&h, "CD"));
        assert_eq!(hash(b"").len(), 128);
    }
}
