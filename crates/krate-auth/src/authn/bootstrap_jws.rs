//! Detached JWS signatures of the kube-public/cluster-info ConfigMap, as upstream's
//! bootstrap signer writes them (`jws-kubeconfig-<token id>`, k8s.io/cluster-bootstrap's
//! ComputeDetachedSignature): HS256 keyed with the token's secret, `kid` = the token id,
//! the payload left out (`header..signature`). A joining node that knows the token
//! checks the ConfigMap's kubeconfig — and so the cluster CA in it — against it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;

/// The data key of the ConfigMap holding token `id`'s signature.
pub fn signature_key(id: &str) -> String {
    format!("jws-kubeconfig-{id}")
}

/// `content` signed with token `id.secret`, detached (`header..signature`).
pub fn detached_signature(content: &str, id: &str, secret: &str) -> String {
    let header = B64URL.encode(serde_json::json!({"alg": "HS256", "kid": id}).to_string());
    let signature = sign(&header, content, secret);
    format!("{header}..{signature}")
}

fn sign(header_b64: &str, content: &str, secret: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let input = format!("{header_b64}.{}", B64URL.encode(content));
    B64URL.encode(ring::hmac::sign(&key, input.as_bytes()).as_ref())
}

/// Whether `detached` is token `id.secret`'s signature of `content`.
pub fn verify(content: &str, detached: &str, id: &str, secret: &str) -> bool {
    let Some((header, signature)) = detached.split_once("..") else { return false };
    let Ok(header_json) = B64URL.decode(header) else { return false };
    let Ok(h) = serde_json::from_slice::<serde_json::Value>(&header_json) else { return false };
    if h["alg"] != "HS256" || h["kid"] != id {
        return false;
    }
    let Ok(given) = B64URL.decode(signature) else { return false };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let input = format!("{header}.{}", B64URL.encode(content));
    ring::hmac::verify(&key, input.as_bytes(), &given).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_only_with_the_same_token_and_content() {
        let sig = detached_signature("kubeconfig", "abcdef", "0123456789abcdef");
        assert!(sig.contains(".."));
        assert!(verify("kubeconfig", &sig, "abcdef", "0123456789abcdef"));
        assert!(!verify("kubeconfig!", &sig, "abcdef", "0123456789abcdef"));
        assert!(!verify("kubeconfig", &sig, "abcdef", "0123456789abcdeX"));
        assert!(!verify("kubeconfig", &sig, "abcdeg", "0123456789abcdef"));
        assert!(!verify("kubeconfig", "garbage", "abcdef", "0123456789abcdef"));
    }
}
