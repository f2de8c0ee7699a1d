//! permessage-deflate (RFC 7692): the negotiation, compressing one message,
//! and inflating one message within a bound. No I/O, and no state that
//! outlives a message.
//!
//! The server always answers with `server_no_context_takeover` and
//! `client_no_context_takeover` (RFC 7692 §7.1.1.1 and §7.1.2.2 let a server
//! add both whether or not the client offered them). Each message is then
//! compressed and inflated on its own, which is what lets throng:
//! - compress a broadcast once and send the same bytes to every subscriber
//!   that negotiated deflate (the encode-once design: one plain and one
//!   compressed copy at most, whatever the number of subscribers), and
//! - keep no zlib state per connection: the compressor and the inflater
//!   belong to the thread (a shard) and are reset for every message, so an
//!   idle socket with deflate costs nothing more than without.
//!
//! The crate: flate2 on the zlib-rs backend (pure Rust, no C toolchain),
//! because it does raw deflate with any window size from 9 to 15 bits: a
//! client that limits the server's window (`server_max_window_bits=10`, as
//! the Autobahn TestSuite's section 13 does) gets messages compressed within
//! that window, where miniz_oxide (flate2's default) only does 15 bits and
//! libdeflater only one-shot calls, which cannot stop inflating at a bound.
//!
//! Sending a message uncompressed (RSV1 clear) is always allowed (RFC 7692
//! §6), so a message under [`MIN_COMPRESS`] bytes, or one that compression
//! would not shrink, goes plain.

use std::cell::RefCell;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::frame::{encode_header, Opcode};

/// The extension's token in `Sec-WebSocket-Extensions`.
pub const EXTENSION: &str = "permessage-deflate";

/// What a client offers: the extension with `client_max_window_bits` (the
/// offer of browsers and Node's `ws`).
pub const CLIENT_OFFER: &str = "permessage-deflate; client_max_window_bits";

/// Messages shorter than this go uncompressed: below it, the deflate block
/// overhead and the CPU outweigh the few bytes saved.
pub const MIN_COMPRESS: usize = 256;

/// The compression level: zlib's default trade of speed for size, paid once
/// per broadcast (not per subscriber).
const LEVEL: u32 = 6;

/// Every message compressed with a sync flush ends with these four bytes,
/// which RFC 7692 §7.2.1 removes from the wire and §7.2.2 adds back.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// What the server agreed to with one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreement {
    /// The largest LZ77 window the server may use (`server_max_window_bits`,
    /// 15 unless the client asked for less).
    pub server_window: u8,
    /// Whether the client named `server_max_window_bits` (it is then echoed).
    server_window_named: bool,
}

impl Agreement {
    /// The `Sec-WebSocket-Extensions` value to answer with.
    pub fn response(&self) -> String {
        let mut r = format!("{EXTENSION}; server_no_context_takeover; client_no_context_takeover");
        if self.server_window_named {
            r.push_str(&format!("; server_max_window_bits={}", self.server_window));
        }
        r
    }
}

/// Picks the first `permessage-deflate` offer the server can honour from the
/// client's `Sec-WebSocket-Extensions` values (one header or several, each a
/// comma-separated list). An offer with an unknown or repeated parameter or
/// a bad value is declined (RFC 7692 §7.1: "a server MUST decline an
/// extension negotiation offer" it cannot accept), and the next one is tried.
pub fn negotiate<'a>(headers: impl IntoIterator<Item = &'a str>) -> Option<Agreement> {
    headers
        .into_iter()
        .flat_map(|h| h.split(','))
        .find_map(accept_offer)
}

/// One offer, `permessage-deflate; param[=value]; ...`, if acceptable.
fn accept_offer(offer: &str) -> Option<Agreement> {
    let mut parts = offer.split(';').map(str::trim);
    if !parts.next()?.eq_ignore_ascii_case(EXTENSION) {
        return None;
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut agreed = Agreement {
        server_window: 15,
        server_window_named: false,
    };
    for param in parts {
        let (name, value) = match param.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
            None => (param, None),
        };
        if seen.contains(&name) {
            return None;
        }
        seen.push(name);
        match (name, value) {
            ("server_no_context_takeover" | "client_no_context_takeover", None) => {}
            ("server_max_window_bits", Some(v)) => {
                agreed.server_window = window_bits(v)?;
                agreed.server_window_named = true;
            }
            // The client's own window: our inflater takes any up to 15.
            ("client_max_window_bits", None) => {}
            ("client_max_window_bits", Some(v)) => {
                window_bits(v)?;
            }
            _ => return None,
        }
    }
    Some(agreed)
}

/// A window-bits value: 8 to 15, digits only.
fn window_bits(v: &str) -> Option<u8> {
    if v.is_empty() || v.len() > 2 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().filter(|b| (8..=15).contains(b))
}

/// Appends the header of a compressed frame (RSV1 set) for `len` bytes.
pub fn encode_compressed_header(out: &mut Vec<u8>, opcode: Opcode, len: usize) {
    let at = out.len();
    encode_header(out, true, opcode, len, None);
    out[at] |= 0x40;
}

/// A compressor per window size this thread has used (index: bits - 9),
/// created on first use and reset for every message.
struct Compressors([Option<Compress>; 7]);

thread_local! {
    static COMPRESSORS: RefCell<Compressors> = const {
        RefCell::new(Compressors([None, None, None, None, None, None, None]))
    };
}

/// Compresses `body` as one message within a window of `window` bits and
/// appends the deflate data (without the RFC's 4-byte tail) to `out`.
/// Returns false, leaving `out` as it was, when the message should go
/// plain: under [`MIN_COMPRESS`], not smaller compressed, or a window of 8
/// bits (which zlib cannot compress within; plain honours it).
pub fn compress(body: &[u8], window: u8, out: &mut Vec<u8>) -> bool {
    body.len() >= MIN_COMPRESS && compress_with(body, window, out, false)
}

/// As [`compress`], for every message whatever its size and ratio (the
/// echo endpoint, whose compression the Autobahn TestSuite measures).
pub fn compress_always(body: &[u8], window: u8, out: &mut Vec<u8>) -> bool {
    compress_with(body, window, out, true)
}

fn compress_with(body: &[u8], window: u8, out: &mut Vec<u8>, always: bool) -> bool {
    if !(9..=15).contains(&window) {
        return false;
    }
    let start = out.len();
    let ok = COMPRESSORS.with(|c| {
        let mut c = c.borrow_mut();
        let slot = &mut c.0[(window - 9) as usize];
        let comp = slot.get_or_insert_with(|| {
            Compress::new_with_window_bits(Compression::new(LEVEL), false, window)
        });
        comp.reset();
        deflate_all(comp, body, out)
    });
    if ok && out.len() >= start + TAIL.len() && out[out.len() - 4..] == TAIL {
        out.truncate(out.len() - 4);
        if always || out.len() - start < body.len() {
            return true;
        }
    }
    out.truncate(start);
    false
}

/// Runs the compressor over the whole input with a sync flush.
fn deflate_all(comp: &mut Compress, body: &[u8], out: &mut Vec<u8>) -> bool {
    let mut pos = 0;
    out.reserve(body.len() / 2 + 64);
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(256));
        }
        let before = comp.total_in();
        match comp.compress_vec(&body[pos..], out, FlushCompress::Sync) {
            Ok(Status::Ok | Status::BufError) => {}
            Ok(Status::StreamEnd) | Err(_) => return false,
        }
        pos += (comp.total_in() - before) as usize;
        // zlib fills the output whole while it has more to write: room
        // left with all input taken means the flush is complete.
        if pos == body.len() && out.len() < out.capacity() {
            return true;
        }
    }
}

/// Why a compressed message could not be inflated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    /// It inflates past the bound (close 1009).
    #[error("message too big once inflated")]
    TooBig,
    /// Not valid deflate data (close 1007, as a message that cannot be
    /// decoded).
    #[error("invalid compressed data")]
    Invalid,
}

/// Inflates one message at a time, within a bound, checked while
/// inflating: a decompression bomb stops at the bound, having produced at
/// most the bound plus one step. Owned by a shard, reset per message; its
/// window (32 KiB) and tables are the shard's, not a connection's.
pub struct Inflater {
    inner: Decompress,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater {
            inner: Decompress::new_with_window_bits(false, 15),
        }
    }
}

/// Output produced per step, so the bound is checked often.
const STEP: usize = 16 * 1024;

impl Inflater {
    /// Inflates `data` (one message's payload, without the 4-byte tail)
    /// into `out` (cleared first), failing once it would pass `max` bytes.
    pub fn inflate(
        &mut self,
        data: &[u8],
        max: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), InflateError> {
        self.inner.reset(false);
        out.clear();
        // A message that ended with a final block needs no tail.
        if !self.feed(data, max, out)? {
            self.feed(&TAIL, max, out)?;
        }
        Ok(())
    }

    /// Inflates `input` into `out` in steps of at most [`STEP`] bytes,
    /// checking the bound after each. True when a final block ended it.
    fn feed(&mut self, input: &[u8], max: usize, out: &mut Vec<u8>) -> Result<bool, InflateError> {
        let mut pos = 0;
        loop {
            // out.len() <= max here: one byte past the bound tells it is passed.
            let room = STEP.min(max + 1 - out.len());
            let len = out.len();
            out.resize(len + room, 0);
            let (in0, out0) = (self.inner.total_in(), self.inner.total_out());
            let r = self
                .inner
                .decompress(&input[pos..], &mut out[len..], FlushDecompress::Sync);
            let produced = (self.inner.total_out() - out0) as usize;
            let consumed = (self.inner.total_in() - in0) as usize;
            out.truncate(len + produced);
            pos += consumed;
            let status = r.map_err(|_| InflateError::Invalid)?;
            if out.len() > max {
                return Err(InflateError::TooBig);
            }
            if status == Status::StreamEnd {
                return Ok(true);
            }
            if pos == input.len() && produced < room {
                return Ok(false);
            }
            if produced == 0 && consumed == 0 {
                return Err(InflateError::Invalid);
            }
        }
    }
}

/// Inflates with a fresh inflater (clients, tests): one message, bounded.
pub fn inflate_once(data: &[u8], max: usize) -> Result<Vec<u8>, InflateError> {
    let mut out = Vec::new();
    Inflater::default().inflate(data, max, &mut out)?;
    Ok(out)
}

/// Compresses one message for a client (the bench): a 15-bit window, with
/// the RFC's tail removed; `None` when it should go plain.
pub fn compress_once(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    compress(body, 15, &mut out).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(n: usize) -> Vec<u8> {
        let mut s = String::from("[");
        while s.len() < n {
            s.push_str(r#"{"user":"ada","body":"hello there, how are you?","at":1700000000},"#);
        }
        s.push(']');
        s.into_bytes()
    }

    #[test]
    fn negotiates_what_browsers_and_ws_offer() {
        let a = negotiate(["permessage-deflate; client_max_window_bits"]).unwrap();
        assert_eq!(a.server_window, 15);
        assert_eq!(
            a.response(),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
        );
        let a = negotiate([
            "x-webkit-deflate-frame",
            "permessage-deflate; server_max_window_bits=10",
        ])
        .unwrap();
        assert_eq!(a.server_window, 10);
        assert!(a.response().ends_with("; server_max_window_bits=10"));
        assert_eq!(negotiate(["foo, bar"]), None);
        assert_eq!(negotiate(std::iter::empty()), None);
    }

    #[test]
    fn declines_offers_it_cannot_honour_and_takes_the_next() {
        for bad in [
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; client_max_window_bits=1x",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; unknown",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
        ] {
            assert_eq!(negotiate([bad]), None, "{bad}");
        }
        let a = negotiate([
            "permessage-deflate; server_max_window_bits=99, permessage-deflate; client_no_context_takeover",
        ])
        .unwrap();
        assert_eq!(a.server_window, 15);
    }

    #[test]
    fn round_trips_and_skips_small_messages() {
        let body = json(4000);
        for window in 9..=15 {
            let mut out = vec![1, 2];
            assert!(compress(&body, window, &mut out), "window {window}");
            assert!(
                out.len() - 2 < body.len() / 4,
                "{} of {}",
                out.len(),
                body.len()
            );
            assert_eq!(inflate_once(&out[2..], 1 << 20).unwrap(), body);
        }
        let mut out = Vec::new();
        assert!(!compress(&body[..100], 15, &mut out) && out.is_empty());
        assert!(compress_always(b"hi", 15, &mut out));
        assert_eq!(inflate_once(&out, 10).unwrap(), b"hi");
        assert!(compress_always(b"", 9, &mut out));
        out.clear();
        assert!(!compress(&body, 8, &mut out) && out.is_empty());
        // Random bytes do not shrink: plain.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..2000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert!(!compress(&noise, 15, &mut out) && out.is_empty());
    }

    #[test]
    fn inflating_stops_at_the_bound() {
        // 10 MB of zeros compress to about 10 KB.
        let zeros = vec![0u8; 10 << 20];
        let mut c = Vec::new();
        assert!(compress(&zeros, 15, &mut c));
        assert!(c.len() < 20_000, "{}", c.len());
        let mut inf = Inflater::default();
        let mut out = Vec::new();
        assert_eq!(inf.inflate(&c, 65536, &mut out), Err(InflateError::TooBig));
        assert!(out.len() <= 65536 + 1, "stopped early: {}", out.len());
        assert!(out.capacity() < 1 << 20, "{}", out.capacity());
        // The same inflater, reset, inflates the next message.
        let body = json(3000);
        let mut c2 = Vec::new();
        assert!(compress(&body, 15, &mut c2));
        inf.inflate(&c2, 65536, &mut out).unwrap();
        assert_eq!(out, body);
        // Exactly at the bound is fine.
        inf.inflate(&c2, body.len(), &mut out).unwrap();
        assert_eq!(
            inf.inflate(&c2, body.len() - 1, &mut out),
            Err(InflateError::TooBig)
        );
        assert_eq!(
            inf.inflate(&[0xff, 0xff, 0xff], 100, &mut out),
            Err(InflateError::Invalid)
        );
        // An empty message: the compressed empty block.
        assert_eq!(inflate_once(&[0x02, 0x00], 10).unwrap(), b"");
    }

    #[test]
    fn a_compressed_header_sets_rsv1() {
        let mut out = Vec::new();
        encode_compressed_header(&mut out, Opcode::Text, 5);
        assert_eq!(out, [0xc1, 5]);
    }
}
