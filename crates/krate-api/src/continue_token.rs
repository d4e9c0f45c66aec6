//! List continuation tokens: the revision of the first page and the key to continue
//! after, relative to the collection, base64-encoded JSON as upstream does.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use serde::{Deserialize, Serialize};

use krate_store::Revision;

#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Token {
    v: String,
    rv: Revision,
    start: String,
}

/// A token continuing after `after` (relative key) at `revision`; revision -1 means
/// "at the latest revision" (offered after the original one expired).
pub fn encode(revision: Revision, after: &str) -> String {
    let t = Token { v: "meta.k8s.io/v1".into(), rv: revision, start: format!("{after}\0") };
    URL_SAFE.encode(serde_json::to_vec(&t).unwrap_or_default())
}

/// (revision, relative key to continue after).
pub fn decode(token: &str) -> Result<(Revision, String), String> {
    let invalid =
        || "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".to_string();
    let bytes = URL_SAFE.decode(token.trim()).map_err(|_| invalid())?;
    let t: Token = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    if t.v != "meta.k8s.io/v1" {
        return Err("continue key is not valid: server does not recognize this encoded version".into());
    }
    let start = t.start.strip_suffix('\0').unwrap_or(&t.start).to_string();
    if start.is_empty() || start.contains("..") || start.starts_with('/') {
        return Err("continue key is not valid: invalid start key".into());
    }
    if t.rv == 0 || t.rv < -1 {
        return Err(invalid());
    }
    Ok((t.rv, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        let t = encode(42, "default/web-1");
        assert_eq!(decode(&t).unwrap(), (42, "default/web-1".to_string()));
        assert!(decode("not base64!").is_err());
        assert!(decode(&URL_SAFE.encode(b"{\"v\":\"x\",\"rv\":1,\"start\":\"a\"}")).is_err());
        assert!(decode(&encode(5, "../etc")).is_err());
    }
}
