//! The client side of SPDY/3.1 framing, as much as the Kubernetes streaming protocols
//! use (the runtime's streaming server speaks it, through Go's spdystream): streams
//! opened with SYN_STREAM carrying a few headers, DATA frames with FIN for half-close,
//! PING echoed, everything else read and set aside.
//!
//! Header blocks are zlib streams shared by the whole connection. This side never
//! needs to read the peer's (replies carry nothing it uses) and writes its own as
//! stored (uncompressed) deflate blocks, each followed by an empty stored block as a
//! sync flush would, so the peer's inflater hands over every block at once.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

pub const VERSION: u16 = 3;
/// The Upgrade token of a SPDY connection.
pub const UPGRADE: &str = "SPDY/3.1";

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 0x01;
/// The largest frame payload (24-bit length).
const MAX_PAYLOAD: usize = 0x00ff_ffff;

/// A frame read from the peer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        fin: bool,
        data: Bytes,
    },
    SynStream {
        stream: u32,
        fin: bool,
    },
    SynReply {
        stream: u32,
        fin: bool,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Ping(u32),
    GoAway,
    /// SETTINGS, HEADERS, WINDOW_UPDATE and anything newer: nothing to do.
    Other(u16),
}

/// Reads the next frame; None at the end of the connection.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let mut head = [0u8; 8];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    let word = |i: usize| payload.get(i..i + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff);
    let fin = flags & FLAG_FIN != 0;
    if head[0] & 0x80 == 0 {
        let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
        return Ok(Some(Frame::Data { stream, fin, data: Bytes::from(payload) }));
    }
    let kind = u16::from_be_bytes([head[2], head[3]]);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("short SPDY control frame {kind}"));
    Ok(Some(match kind {
        SYN_STREAM => Frame::SynStream { stream: word(0).ok_or_else(bad)?, fin },
        SYN_REPLY => Frame::SynReply { stream: word(0).ok_or_else(bad)?, fin },
        RST_STREAM => Frame::RstStream { stream: word(0).ok_or_else(bad)?, status: word(4).ok_or_else(bad)? },
        PING => Frame::Ping(payload.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(bad)?),
        GOAWAY => Frame::GoAway,
        other => Frame::Other(other),
    }))
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

/// The writing side's header compression context.
#[derive(Default)]
pub struct HeaderWriter {
    started: bool,
}

impl HeaderWriter {
    /// A name/value block (names lowercase) as the next piece of the connection's
    /// zlib stream.
    pub fn block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut nv = Vec::new();
        nv.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            nv.extend_from_slice(&(name.len() as u32).to_be_bytes());
            nv.extend_from_slice(name.as_bytes());
            nv.extend_from_slice(&(value.len() as u32).to_be_bytes());
            nv.extend_from_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(nv.len() + 16);
        if !self.started {
            // zlib header: deflate, 32 KiB window, no preset dictionary.
            out.extend_from_slice(&[0x78, 0x01]);
            self.started = true;
        }
        for piece in nv.chunks(0xffff) {
            stored_block(&mut out, piece);
        }
        stored_block(&mut out, &[]);
        out
    }
}

/// A non-final stored deflate block.
fn stored_block(out: &mut Vec<u8>, data: &[u8]) {
    let len = data.len() as u16;
    out.push(0x00);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(data);
}

/// SYN_STREAM opening `stream` with `headers`.
pub fn syn_stream(writer: &mut HeaderWriter, stream: u32, headers: &[(&str, &str)], fin: bool) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes());
    // Priority 0, slot 0.
    payload.extend_from_slice(&[0, 0]);
    payload.extend_from_slice(&writer.block(headers));
    control(SYN_STREAM, if fin { FLAG_FIN } else { 0 }, &payload)
}

/// DATA frames carrying `data` on `stream`, the last with FIN if `fin` (an empty
/// `data` with `fin` half-closes the stream).
pub fn data(stream: u32, data: &[u8], fin: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    let mut pieces: Vec<&[u8]> = data.chunks(MAX_PAYLOAD).collect();
    if pieces.is_empty() {
        pieces.push(&[]);
    }
    let last = pieces.len() - 1;
    for (i, piece) in pieces.into_iter().enumerate() {
        out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        out.push(if fin && i == last { FLAG_FIN } else { 0 });
        out.extend_from_slice(&(piece.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(piece);
    }
    out
}

/// PING with `id` (also the echo of a peer's ping).
pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// GOAWAY: this side opens no more streams.
pub fn goaway(last_good: u32) -> Vec<u8> {
    let mut payload = last_good.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    control(GOAWAY, 0, &payload)
}

/// RST_STREAM with CANCEL.
pub fn rst_stream(stream: u32) -> Vec<u8> {
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend_from_slice(&5u32.to_be_bytes());
    control(RST_STREAM, 0, &payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_blocks_are_stored_deflate_after_one_zlib_header() {
        let mut w = HeaderWriter::default();
        let first = w.block(&[("streamType", "error")]);
        assert_eq!(&first[..2], &[0x78, 0x01]);
        assert_eq!((0x78u32 * 256 + 0x01) % 31, 0, "a valid zlib header");
        // Stored block: header byte, LEN, NLEN, then the name/value block.
        let nv_len = 4 + 4 + 10 + 4 + 5;
        assert_eq!(&first[2..7], &[0, nv_len as u8, 0, !(nv_len as u8), 0xff]);
        assert_eq!(&first[7..11], &1u32.to_be_bytes());
        assert_eq!(&first[15..25], b"streamtype");
        assert_eq!(&first[first.len() - 5..], &[0, 0, 0, 0xff, 0xff], "ends with a sync flush");
        let second = w.block(&[]);
        assert_eq!(second, vec![0, 4, 0, 0xfb, 0xff, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    }

    #[tokio::test]
    async fn frames_read_back() {
        let mut w = HeaderWriter::default();
        let mut wire = syn_stream(&mut w, 1, &[("streamtype", "stdin")], false);
        wire.extend(data(3, b"hello", true));
        wire.extend(ping(2));
        wire.extend(goaway(0));
        wire.extend(data(5, b"", true));
        let mut r = &wire[..];
        assert_eq!(read_frame(&mut r).await.unwrap(), Some(Frame::SynStream { stream: 1, fin: false }));
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Some(Frame::Data { stream: 3, fin: true, data: Bytes::from_static(b"hello") })
        );
        assert_eq!(read_frame(&mut r).await.unwrap(), Some(Frame::Ping(2)));
        assert_eq!(read_frame(&mut r).await.unwrap(), Some(Frame::GoAway));
        assert_eq!(read_frame(&mut r).await.unwrap(), Some(Frame::Data { stream: 5, fin: true, data: Bytes::new() }));
        assert_eq!(read_frame(&mut r).await.unwrap(), None);
    }
}
