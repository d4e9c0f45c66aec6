//! The issued certificate's subject, copied from the request as it is. rcgen keeps one
//! value per attribute type, so a request for O=a, O=b (a user in two groups) would lose
//! a group; upstream's signer copies the request's subject whole. This swaps the subject
//! in rcgen's certificate for the request's encoded one and signs it again, with a
//! minimal DER reader: the certificate is rcgen's own output, the subject a parsed
//! request's, so only definite-length encodings occur.

use rcgen::SigningKey;

#[derive(Debug, thiserror::Error)]
#[error("malformed DER: {0}")]
pub struct DerError(&'static str);

/// One DER element: its tag, and where its header and contents lie in the input.
struct Element {
    tag: u8,
    start: usize,
    content: usize,
    end: usize,
}

fn element(buf: &[u8], start: usize) -> Result<Element, DerError> {
    let tag = *buf.get(start).ok_or(DerError("truncated tag"))?;
    let first = *buf.get(start + 1).ok_or(DerError("truncated length"))?;
    let (len, content) = if first < 0x80 {
        (first as usize, start + 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return Err(DerError("unsupported length"));
        }
        let bytes = buf.get(start + 2..start + 2 + n).ok_or(DerError("truncated length"))?;
        (bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize), start + 2 + n)
    };
    let end = content.checked_add(len).filter(|e| *e <= buf.len()).ok_or(DerError("length past the end"))?;
    Ok(Element { tag, start, content, end })
}

/// The elements inside a constructed element's contents.
fn children(buf: &[u8], parent: &Element) -> Result<Vec<Element>, DerError> {
    let mut out = Vec::new();
    let mut at = parent.content;
    while at < parent.end {
        let e = element(buf, at)?;
        at = e.end;
        out.push(e);
    }
    Ok(out)
}

fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

const SEQUENCE: u8 = 0x30;
const BIT_STRING: u8 = 0x03;
const VERSION: u8 = 0xa0;

#[derive(Debug, thiserror::Error)]
pub enum SubjectError {
    #[error(transparent)]
    Der(#[from] DerError),
    #[error("signing failed: {0}")]
    Sign(#[from] rcgen::Error),
}

/// `cert` (DER, signed by `key`) with its subject replaced by `subject` (an encoded
/// Name) and signed again by `key`.
pub fn with_subject(cert: &[u8], subject: &[u8], key: &impl SigningKey) -> Result<Vec<u8>, SubjectError> {
    let outer = element(cert, 0)?;
    let parts = children(cert, &outer)?;
    let [tbs, algorithm, _signature] = parts.as_slice() else {
        return Err(DerError("a certificate has three parts").into());
    };
    let fields = children(cert, tbs)?;
    // version, serial, signature, issuer, validity, subject…; version may be absent.
    let index = if fields.first().is_some_and(|f| f.tag == VERSION) { 5 } else { 4 };
    let old = fields.get(index).filter(|f| f.tag == SEQUENCE).ok_or(DerError("no subject"))?;
    let parsed = element(subject, 0)?;
    if parsed.tag != SEQUENCE || parsed.end != subject.len() {
        return Err(DerError("the subject is not one Name").into());
    }
    let mut content = cert[tbs.content..old.start].to_vec();
    content.extend_from_slice(subject);
    content.extend_from_slice(&cert[old.end..tbs.end]);
    let new_tbs = encode(SEQUENCE, &content);
    let mut signature = vec![0u8]; // no unused bits
    signature.extend(key.sign(&new_tbs)?);
    let mut body = new_tbs;
    body.extend_from_slice(&cert[algorithm.start..algorithm.end]);
    body.extend(encode(BIT_STRING, &signature));
    Ok(encode(SEQUENCE, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_encode_in_short_and_long_form() {
        assert_eq!(encode(0x04, &[1, 2]), [0x04, 2, 1, 2]);
        let long = encode(0x04, &[0u8; 300]);
        assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2c]);
        let e = element(&long, 0).unwrap();
        assert_eq!((e.tag, e.content, e.end), (0x04, 4, 304));
    }

    #[test]
    fn truncated_or_overlong_input_is_an_error_not_a_panic() {
        assert!(element(&[0x30], 0).is_err());
        assert!(element(&[0x30, 0x05, 0], 0).is_err());
        assert!(element(&[0x30, 0x85, 1, 1, 1, 1, 1], 0).is_err());
        let key = rcgen::KeyPair::generate().unwrap();
        assert!(with_subject(&[0x30, 0x03, 0x02, 0x01, 0x00], &[0x30, 0x00], &key).is_err());
    }
}
