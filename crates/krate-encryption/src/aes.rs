//! The aescbc and aesgcm providers, byte-compatible with upstream's.
//!
//! aescbc: a random 16-byte IV, then AES-CBC of the data with PKCS#7 padding.
//! aesgcm: a random 12-byte nonce, then AES-GCM of the data with the store key as
//! authenticated data. Keys are 16, 24 or 32 bytes (AES-128/192/256).

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use aes_gcm::AesGcm;
use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use async_trait::async_trait;
use bytes::Bytes;
use rand::RngCore;

use crate::TransformError;
use crate::transformer::Transformer;

const BLOCK: usize = 16;
pub(crate) const GCM_NONCE: usize = 12;

/// One AES key of any allowed size.
#[derive(Clone)]
enum AesKey {
    A128([u8; 16]),
    A192([u8; 24]),
    A256([u8; 32]),
}

impl AesKey {
    fn new(key: &[u8]) -> Result<Self, String> {
        Ok(match key.len() {
            16 => AesKey::A128(key.try_into().expect("length checked")),
            24 => AesKey::A192(key.try_into().expect("length checked")),
            32 => AesKey::A256(key.try_into().expect("length checked")),
            n => return Err(format!("crypto/aes: invalid key size {n}")),
        })
    }
}

/// AES-CBC with PKCS#7 padding (`aescbc`).
pub struct Cbc {
    key: AesKey,
    name: String,
}

impl Cbc {
    pub fn new(name: &str, key: &[u8]) -> Result<Self, String> {
        Ok(Cbc { key: AesKey::new(key)?, name: format!("aescbc key {name}") })
    }

    fn encrypt(&self, iv: &[u8; BLOCK], data: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; data.len() + BLOCK - data.len() % BLOCK];
        buf[..data.len()].copy_from_slice(data);
        let n = data.len();
        let out = match &self.key {
            AesKey::A128(k) => {
                cbc::Encryptor::<aes::Aes128>::new(k.into(), iv.into()).encrypt_padded_mut::<Pkcs7>(&mut buf, n)
            }
            AesKey::A192(k) => {
                cbc::Encryptor::<aes::Aes192>::new(k.into(), iv.into()).encrypt_padded_mut::<Pkcs7>(&mut buf, n)
            }
            AesKey::A256(k) => {
                cbc::Encryptor::<aes::Aes256>::new(k.into(), iv.into()).encrypt_padded_mut::<Pkcs7>(&mut buf, n)
            }
        };
        let len = out.expect("buffer has room for a full block of padding").len();
        buf.truncate(len);
        buf
    }

    fn decrypt(&self, iv: &[u8; BLOCK], data: &mut [u8]) -> Result<usize, TransformError> {
        let out = match &self.key {
            AesKey::A128(k) => {
                cbc::Decryptor::<aes::Aes128>::new(k.into(), iv.into()).decrypt_padded_mut::<Pkcs7>(data)
            }
            AesKey::A192(k) => {
                cbc::Decryptor::<aes::Aes192>::new(k.into(), iv.into()).decrypt_padded_mut::<Pkcs7>(data)
            }
            AesKey::A256(k) => {
                cbc::Decryptor::<aes::Aes256>::new(k.into(), iv.into()).decrypt_padded_mut::<Pkcs7>(data)
            }
        };
        out.map(|plain| plain.len()).map_err(|_| TransformError::cipher(&self.name, "invalid padding on input"))
    }
}

#[async_trait]
impl Transformer for Cbc {
    async fn transform_from_storage(&self, data: Bytes, _aad: &[u8]) -> Result<(Bytes, bool), TransformError> {
        if data.len() < BLOCK {
            return Err(TransformError::cipher(&self.name, "the stored data was shorter than the required size"));
        }
        let iv: [u8; BLOCK] = data[..BLOCK].try_into().expect("length checked");
        let mut body = data[BLOCK..].to_vec();
        if body.is_empty() || !body.len().is_multiple_of(BLOCK) {
            return Err(TransformError::cipher(&self.name, "the stored data is not a multiple of the block size"));
        }
        let len = self.decrypt(&iv, &mut body)?;
        body.truncate(len);
        Ok((body.into(), false))
    }

    async fn transform_to_storage(&self, data: Bytes, _aad: &[u8]) -> Result<Bytes, TransformError> {
        let mut iv = [0u8; BLOCK];
        rand::rng().fill_bytes(&mut iv);
        let mut out = iv.to_vec();
        out.extend_from_slice(&self.encrypt(&iv, &data));
        Ok(out.into())
    }
}

/// AES-GCM with a 12-byte nonce before the sealed data, the store key authenticated.
pub struct Gcm {
    cipher: GcmCipher,
    name: String,
}

enum GcmCipher {
    A128(Box<AesGcm<aes::Aes128, U12>>),
    A192(Box<AesGcm<aes::Aes192, U12>>),
    A256(Box<AesGcm<aes::Aes256, U12>>),
}

impl Gcm {
    /// `name` says which provider and key, for error messages.
    pub fn new(name: impl Into<String>, key: &[u8]) -> Result<Self, String> {
        let cipher = match AesKey::new(key)? {
            AesKey::A128(k) => GcmCipher::A128(Box::new(AesGcm::new(&k.into()))),
            AesKey::A192(k) => GcmCipher::A192(Box::new(AesGcm::new(&k.into()))),
            AesKey::A256(k) => GcmCipher::A256(Box::new(AesGcm::new(&k.into()))),
        };
        Ok(Gcm { cipher, name: name.into() })
    }

    /// nonce ‖ sealed data.
    pub fn seal(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, TransformError> {
        let mut nonce = [0u8; GCM_NONCE];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload { msg: data, aad };
        let sealed = match &self.cipher {
            GcmCipher::A128(c) => c.encrypt(&nonce.into(), payload),
            GcmCipher::A192(c) => c.encrypt(&nonce.into(), payload),
            GcmCipher::A256(c) => c.encrypt(&nonce.into(), payload),
        }
        .map_err(|_| TransformError::cipher(&self.name, "encryption failed"))?;
        let mut out = Vec::with_capacity(GCM_NONCE + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    pub fn open(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, TransformError> {
        if data.len() < GCM_NONCE {
            return Err(TransformError::cipher(&self.name, "the stored data was shorter than the required size"));
        }
        let (nonce, sealed) = data.split_at(GCM_NONCE);
        let nonce: [u8; GCM_NONCE] = nonce.try_into().expect("length checked");
        let payload = Payload { msg: sealed, aad };
        match &self.cipher {
            GcmCipher::A128(c) => c.decrypt(&nonce.into(), payload),
            GcmCipher::A192(c) => c.decrypt(&nonce.into(), payload),
            GcmCipher::A256(c) => c.decrypt(&nonce.into(), payload),
        }
        .map_err(|_| TransformError::cipher(&self.name, "cipher: message authentication failed"))
    }
}

#[async_trait]
impl Transformer for Gcm {
    async fn transform_from_storage(&self, data: Bytes, aad: &[u8]) -> Result<(Bytes, bool), TransformError> {
        Ok((self.open(&data, aad)?.into(), false))
    }
    async fn transform_to_storage(&self, data: Bytes, aad: &[u8]) -> Result<Bytes, TransformError> {
        Ok(self.seal(&data, aad)?.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cbc_round_trips_every_key_size_with_pkcs7() {
        for len in [16, 24, 32] {
            let t = Cbc::new("k", &vec![7u8; len]).unwrap();
            for plain in [&b""[..], b"0123456789abcdef", b"{\"kind\":\"Secret\"}"] {
                let stored = t.transform_to_storage(Bytes::copy_from_slice(plain), b"/k").await.unwrap();
                // IV + padded blocks: a full block of padding on aligned input.
                assert_eq!(stored.len(), BLOCK + (plain.len() / BLOCK + 1) * BLOCK);
                assert_eq!(&t.transform_from_storage(stored, b"/other").await.unwrap().0[..], plain);
            }
        }
    }

    #[tokio::test]
    async fn cbc_wrong_key_fails() {
        let a = Cbc::new("a", &[1u8; 32]).unwrap();
        let b = Cbc::new("b", &[2u8; 32]).unwrap();
        let stored = a.transform_to_storage(Bytes::from_static(b"some secret data"), b"").await.unwrap();
        // A wrong key decrypts to garbage, which almost never ends in valid padding.
        let res = b.transform_from_storage(stored, b"").await;
        assert!(res.is_err() || &res.unwrap().0[..] != b"some secret data");
    }

    #[tokio::test]
    async fn gcm_round_trips_and_authenticates_the_key_path() {
        for len in [16, 24, 32] {
            let t = Gcm::new("aesgcm key k", &vec![9u8; len]).unwrap();
            let stored = t.transform_to_storage(Bytes::from_static(b"plain"), b"/registry/secrets/a/b").await.unwrap();
            assert_eq!(stored.len(), GCM_NONCE + 5 + 16);
            assert_eq!(
                &t.transform_from_storage(stored.clone(), b"/registry/secrets/a/b").await.unwrap().0[..],
                b"plain"
            );
            assert!(
                t.transform_from_storage(stored, b"/registry/secrets/a/c").await.is_err(),
                "moved value must not decrypt"
            );
        }
        let other = Gcm::new("other", &[1u8; 32]).unwrap();
        let stored = Gcm::new("k", &[2u8; 32]).unwrap().seal(b"x", b"").unwrap();
        assert!(other.open(&stored, b"").is_err());
    }

    #[test]
    fn bad_key_sizes_are_refused() {
        assert!(Cbc::new("k", &[0u8; 20]).is_err());
        assert!(Gcm::new("k", &[0u8; 8]).is_err());
    }
}
