//! The secretbox provider: XSalsa20-Poly1305 with a random 24-byte nonce, stored as
//! nonce ‖ tag ‖ ciphertext (NaCl's layout, as upstream).

use async_trait::async_trait;
use bytes::Bytes;
use crypto_secretbox::aead::{AeadInPlace, KeyInit};
use crypto_secretbox::{Tag, XSalsa20Poly1305};
use rand::RngCore;

use crate::TransformError;
use crate::transformer::Transformer;

const NONCE: usize = 24;
const TAG: usize = 16;

pub struct Secretbox {
    cipher: XSalsa20Poly1305,
    name: String,
}

impl Secretbox {
    pub fn new(name: &str, key: &[u8]) -> Result<Self, String> {
        let key: [u8; 32] =
            key.try_into().map_err(|_| format!("expected key size 32 for secretbox provider, got {}", key.len()))?;
        Ok(Secretbox { cipher: XSalsa20Poly1305::new(&key.into()), name: format!("secretbox key {name}") })
    }
}

#[async_trait]
impl Transformer for Secretbox {
    async fn transform_from_storage(&self, data: Bytes, _aad: &[u8]) -> Result<(Bytes, bool), TransformError> {
        if data.len() < NONCE + TAG {
            return Err(TransformError::cipher(&self.name, "the stored data was shorter than the required size"));
        }
        let nonce: [u8; NONCE] = data[..NONCE].try_into().expect("length checked");
        let tag = Tag::clone_from_slice(&data[NONCE..NONCE + TAG]);
        let mut body = data[NONCE + TAG..].to_vec();
        self.cipher
            .decrypt_in_place_detached(&nonce.into(), b"", &mut body, &tag)
            .map_err(|_| TransformError::cipher(&self.name, "output array too small"))?;
        Ok((body.into(), false))
    }

    async fn transform_to_storage(&self, data: Bytes, _aad: &[u8]) -> Result<Bytes, TransformError> {
        let mut nonce = [0u8; NONCE];
        rand::rng().fill_bytes(&mut nonce);
        let mut body = data.to_vec();
        let tag = self
            .cipher
            .encrypt_in_place_detached(&nonce.into(), b"", &mut body)
            .map_err(|_| TransformError::cipher(&self.name, "encryption failed"))?;
        let mut out = Vec::with_capacity(NONCE + TAG + body.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&tag);
        out.extend_from_slice(&body);
        Ok(out.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip_layout_and_wrong_key() {
        let t = Secretbox::new("k", &[3u8; 32]).unwrap();
        let stored = t.transform_to_storage(Bytes::from_static(b"hello"), b"").await.unwrap();
        assert_eq!(stored.len(), NONCE + TAG + 5);
        assert_eq!(&t.transform_from_storage(stored.clone(), b"").await.unwrap().0[..], b"hello");
        let other = Secretbox::new("o", &[4u8; 32]).unwrap();
        assert!(other.transform_from_storage(stored, b"").await.is_err());
        assert!(Secretbox::new("k", &[0u8; 16]).is_err());
    }
}
