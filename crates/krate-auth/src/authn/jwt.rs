//! Signed JSON Web Tokens (JWS compact form) with ES256: ECDSA P-256, which ring both
//! generates and verifies, so service-account tokens need no RSA or JOSE crate.
//! The key is made once and kept in the data dir (upstream's --service-account-key-file
//! and --service-account-signing-key-file in one).

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, UnparsedPublicKey};
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

/// The DER prefix of a P-256 SubjectPublicKeyInfo; the 65-byte point follows.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a PKCS#8 P-256 private key: {reason}")]
    Invalid { path: String, reason: String },
    #[error("generating a signing key failed")]
    Generate,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwtError {
    #[error("not a JWT")]
    Malformed,
    #[error("unsupported signing algorithm {0:?}")]
    Algorithm(String),
    #[error("invalid signature")]
    Signature,
}

pub struct SigningKey {
    pair: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
}

impl SigningKey {
    fn from_pkcs8(der: &[u8]) -> Result<SigningKey, String> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| e.to_string())?;
        // Upstream's key id: the SHA-256 of the public key's PKIX DER, base64url.
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(pair.public_key().as_ref());
        let kid = B64.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Ok(SigningKey { pair, kid, rng })
    }

    /// A fresh key, not stored (tests).
    pub fn generate() -> Result<SigningKey, KeyError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| KeyError::Generate)?;
        Self::from_pkcs8(doc.as_ref()).map_err(|_| KeyError::Generate)
    }

    /// Loads the key at `path`, creating it (mode 0600) on first start. Blocking.
    pub fn load_or_create(path: &Path) -> Result<SigningKey, KeyError> {
        let name = path.display().to_string();
        let io = |source| KeyError::Io { path: name.clone(), source };
        match std::fs::read(path) {
            Ok(pem) => {
                let der = PrivatePkcs8KeyDer::from_pem_slice(&pem)
                    .map_err(|e| KeyError::Invalid { path: name.clone(), reason: e.to_string() })?;
                Self::from_pkcs8(der.secret_pkcs8_der())
                    .map_err(|reason| KeyError::Invalid { path: name.clone(), reason })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let rng = SystemRandom::new();
                let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(|_| KeyError::Generate)?;
                write_private(path, &krate_api::pem::encode("PRIVATE KEY", doc.as_ref())).map_err(io)?;
                tracing::info!(path = %name, "created the service-account signing key");
                Self::from_pkcs8(doc.as_ref()).map_err(|reason| KeyError::Invalid { path: name.clone(), reason })
            }
            Err(e) => Err(io(e)),
        }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// `claims` signed, in compact form.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let mut out = format!("{}.{}", B64.encode(header.to_string()), B64.encode(claims.to_string()));
        // ring fails only on a broken RNG; such a token is refused by every verifier.
        let sig = self.pair.sign(&self.rng, out.as_bytes()).map(|s| B64.encode(s.as_ref())).unwrap_or_default();
        out.push('.');
        out.push_str(&sig);
        out
    }

    /// The public key as a JSON Web Key (the JWKS document's entry).
    pub fn jwk(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": B64.encode(&point[1..33]),
            "y": B64.encode(&point[33..65]),
        })
    }

    /// The claims of `token` if this key signed it.
    pub fn verify(&self, token: &str) -> Result<Value, JwtError> {
        let (header, claims, sig) = split(token)?;
        let header: Value = decode_json(header)?;
        match header.get("alg").and_then(Value::as_str) {
            Some("ES256") => {}
            other => return Err(JwtError::Algorithm(other.unwrap_or("").to_string())),
        }
        let sig = B64.decode(sig).map_err(|_| JwtError::Malformed)?;
        let signed = &token[..header_len(token)];
        UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, self.pair.public_key().as_ref())
            .verify(signed.as_bytes(), &sig)
            .map_err(|_| JwtError::Signature)?;
        decode_json(claims)
    }
}

/// The three dot-separated parts of a compact JWS.
fn split(token: &str) -> Result<(&str, &str, &str), JwtError> {
    let mut parts = token.split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(h), Some(c), Some(s), None) if !h.is_empty() && !c.is_empty() => Ok((h, c, s)),
        _ => Err(JwtError::Malformed),
    }
}

/// Length of "header.claims", the signed part.
fn header_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

fn decode_json(part: &str) -> Result<Value, JwtError> {
    let bytes = B64.decode(part).map_err(|_| JwtError::Malformed)?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed)?;
    if v.is_object() { Ok(v) } else { Err(JwtError::Malformed) }
}

/// The claims of a JWT without checking its signature: only to see whose it is (the
/// issuer) before the right verifier checks it.
pub fn peek_claims(token: &str) -> Option<Value> {
    let (_, claims, _) = split(token).ok()?;
    decode_json(claims).ok()
}

/// Writes a file only its owner can read (keys, tokens), atomically.
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_claims_verify_and_tampering_is_caught() {
        let key = SigningKey::generate().unwrap();
        let claims = json!({"iss": "me", "sub": "you"});
        let token = key.sign(&claims);
        assert_eq!(key.verify(&token).unwrap(), claims);
        assert_eq!(peek_claims(&token).unwrap(), claims);
        // Claims swapped for others under the same signature.
        let (h, _, s) = split(&token).unwrap();
        let forged = format!("{h}.{}.{s}", B64.encode(json!({"iss": "me", "sub": "admin"}).to_string()));
        assert_eq!(key.verify(&forged), Err(JwtError::Signature));
        // Another key's signature.
        let other = SigningKey::generate().unwrap();
        assert_eq!(other.verify(&token), Err(JwtError::Signature));
        // alg none.
        let none = format!("{}.{}.", B64.encode(r#"{"alg":"none"}"#), B64.encode(claims.to_string()));
        assert_eq!(key.verify(&none), Err(JwtError::Algorithm("none".into())));
    }

    #[test]
    fn the_key_is_kept_across_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tls/sa.key");
        let first = SigningKey::load_or_create(&path).unwrap();
        let again = SigningKey::load_or_create(&path).unwrap();
        assert_eq!(first.kid(), again.kid());
        let token = first.sign(&json!({"a": 1}));
        assert!(again.verify(&token).is_ok());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(first.jwk()["kid"], first.kid());
        std::fs::write(&path, "garbage").unwrap();
        assert!(matches!(SigningKey::load_or_create(&path), Err(KeyError::Invalid { .. })));
    }

    #[test]
    fn mutated_tokens_never_panic_and_never_verify() {
        let key = SigningKey::generate().unwrap();
        let good = key.sign(&json!({"iss": "me", "exp": 1}));
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = b"abcXYZ019-_.=+/ \x00\xff";
        for round in 0..3000 {
            let mut bytes = good.clone().into_bytes();
            match round % 3 {
                0 => {
                    for _ in 0..(1 + next() % 3) {
                        let i = (next() as usize) % bytes.len();
                        bytes[i] = alphabet[(next() as usize) % alphabet.len()];
                    }
                }
                1 => bytes.truncate((next() as usize) % bytes.len()),
                _ => bytes = (0..(next() % 300)).map(|_| next() as u8).collect(),
            }
            let token = String::from_utf8_lossy(&bytes).into_owned();
            if token == good {
                continue;
            }
            let _ = peek_claims(&token);
            assert!(key.verify(&token).is_err(), "mutated token verified: {token}");
        }
    }
}
