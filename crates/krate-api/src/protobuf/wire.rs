//! The protobuf wire format: varints, tags, length-delimited fields. Decoding never
//! panics: every malformed input is an error.

pub const VARINT: u8 = 0;
pub const FIXED64: u8 = 1;
pub const LEN: u8 = 2;
pub const FIXED32: u8 = 5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub fn err<T>(msg: impl Into<String>) -> Result<T, WireError> {
    Err(WireError(msg.into()))
}

#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    pub fn key(&mut self, tag: u32, wire: u8) {
        self.varint(((tag as u64) << 3) | wire as u64);
    }
    pub fn varint_field(&mut self, tag: u32, v: u64) {
        self.key(tag, VARINT);
        self.varint(v);
    }
    pub fn bytes_field(&mut self, tag: u32, b: &[u8]) {
        self.key(tag, LEN);
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }
    pub fn double_field(&mut self, tag: u32, v: f64) {
        self.key(tag, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
}

/// One field as read from the wire.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'a [u8]),
}

pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn varint(&mut self) -> Result<u64, WireError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.data.get(self.pos) else { return err("truncated varint") };
            self.pos += 1;
            if i == 9 && b > 1 {
                return err("varint overflows 64 bits");
            }
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        err("varint longer than 10 bytes")
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.data.len());
        let Some(end) = end else { return err("truncated field") };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next field (number and value), or None at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = key >> 3;
        if tag == 0 || tag > u32::MAX as u64 >> 3 {
            return err(format!("invalid field number {tag}"));
        }
        let v = match (key & 7) as u8 {
            VARINT => Value::Varint(self.varint()?),
            FIXED64 => Value::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| WireError("".into()))?)),
            LEN => {
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| WireError("length too large".into()))?;
                Value::Len(self.take(n)?)
            }
            FIXED32 => Value::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| WireError("".into()))?)),
            w => return err(format!("unsupported wire type {w} (field {tag})")),
        };
        Ok(Some((tag as u32, v)))
    }
}

/// Reads every field of a message.
pub fn fields(data: &[u8]) -> Result<Vec<(u32, Value<'_>)>, WireError> {
    let mut r = Reader::new(data);
    let mut out = Vec::new();
    while let Some(f) = r.next_field()? {
        out.push(f);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_malformed_input_is_an_error() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX, (-1i64) as u64] {
            let mut w = Writer::default();
            w.varint(v);
            assert_eq!(Reader::new(&w.buf).varint().unwrap(), v);
        }
        assert!(Reader::new(&[0x80]).varint().is_err());
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        assert!(fields(&[0x0a, 0x05, b'a']).is_err()); // length past the end
        assert!(fields(&[0x0b]).is_err()); // wire type 3 (groups)
        assert!(fields(&[0x00, 0x00]).is_err()); // field number 0
    }
}
