//! OpenID Connect discovery for service-account tokens, so that other systems can check
//! them: `/.well-known/openid-configuration` and the key set at `/openid/v1/jwks`.
//! Readable without credentials (upstream's system:service-account-issuer-discovery).

use serde_json::{Value, json};

use super::jwt::SigningKey;

pub const CONFIGURATION_PATH: &str = "/.well-known/openid-configuration";
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// Upstream lets caches keep both documents for an hour.
pub const CACHE_CONTROL: &str = "public, max-age=3600";
pub const JWKS_CONTENT_TYPE: &str = "application/jwk-set+json";

pub struct Discovery {
    configuration: Vec<u8>,
    jwks: Vec<u8>,
}

impl Discovery {
    /// `external_url`: where this server is reached (https://host:port); the key set's
    /// address is under it unless `jwks_uri` says otherwise.
    pub fn new(issuer: &str, external_url: &str, jwks_uri: Option<&str>, key: &SigningKey) -> Discovery {
        let jwks_uri =
            jwks_uri.map(String::from).unwrap_or_else(|| format!("{}{JWKS_PATH}", external_url.trim_end_matches('/')));
        let configuration = json!({
            "issuer": issuer,
            "jwks_uri": jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        });
        let jwks = json!({"keys": [key.jwk()]});
        Discovery { configuration: to_vec(&configuration), jwks: to_vec(&jwks) }
    }

    pub fn configuration(&self) -> &[u8] {
        &self.configuration
    }

    pub fn jwks(&self) -> &[u8] {
        &self.jwks
    }

    /// Whether `path` is one of the two documents (they are public).
    pub fn is_discovery_path(path: &str) -> bool {
        path == CONFIGURATION_PATH || path == JWKS_PATH
    }
}

fn to_vec(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_name_the_issuer_and_the_key() {
        let key = SigningKey::generate().unwrap();
        let d = Discovery::new("https://issuer", "https://127.0.0.1:6443/", None, &key);
        let conf: Value = serde_json::from_slice(d.configuration()).unwrap();
        assert_eq!(conf["issuer"], "https://issuer");
        assert_eq!(conf["jwks_uri"], "https://127.0.0.1:6443/openid/v1/jwks");
        let jwks: Value = serde_json::from_slice(d.jwks()).unwrap();
        assert_eq!(jwks["keys"][0]["kid"], key.kid());
        assert_eq!(jwks["keys"][0]["kty"], "EC");
    }
}
