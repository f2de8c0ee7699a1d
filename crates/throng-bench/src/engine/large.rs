//! Messages longer than the shared read buffer (a list-mode
//! `presence_state` of more than ~5,000 users, a diff of as many joins),
//! read as they arrive instead of whole.
//!
//! A frame that fits the shared buffer is read as before: its start is kept
//! (`Rx::Partial`) until the rest comes. A longer one would need a buffer
//! of its size on every connection receiving it, all at once when the
//! server sends the same state or diff to thousands; instead its first
//! bytes (at least [`HEAD_MIN`]) say what it is, and then:
//! - a `presence_state` is only counted: its bytes go by and are dropped;
//! - a `presence_diff` is counted and identified by its signature (first
//!   and last [`SIG_HEAD`] bytes and length, see `presence`); the first
//!   connection of this agent to receive a diff keeps it whole to read its
//!   keys once, the others let it go by;
//! - anything else is kept whole (it may be a reply or a stamped broadcast)
//!   and handled as a small one when complete.
//!
//! So a connection holds a buffer only while a message it must read is
//! incomplete, and otherwise a [`Large`] of a few hundred bytes while its
//! message goes by. Messages are at most [`MAX_MESSAGE`] bytes.

use throng_protocol::frame::Opcode;

use super::conn::Rx;
use super::presence::{event_in_head, full_sig, head_sig, SIG_HEAD};
use super::socket::ErrKind;
use super::{Cause, Engine, READ_BUF};
use crate::presence::Kind;
use crate::sys;

/// The largest message a connection accepts (a list-mode state of ~5
/// million users); past it the session fails with `other`.
pub(super) const MAX_MESSAGE: u64 = 256 << 20;

/// Bytes of a large message needed before it is classified.
pub(super) const HEAD_MIN: usize = 4096;

/// A message longer than the shared buffer, arriving.
pub(crate) struct Large {
    opcode: Opcode,
    fin: bool,
    /// Its length, and the bytes still to come.
    len: u64,
    left: u64,
    kind: Kind,
    /// The signature of its start (diffs).
    head_sig: u64,
    /// Its last [`SIG_HEAD`] bytes so far (diffs).
    tail: Vec<u8>,
    /// The message so far, when it must be read whole.
    keep: Option<Vec<u8>>,
    /// This connection reads the diff's keys for the agent.
    parser: bool,
}

impl Large {
    /// Bytes still to come.
    pub(super) fn left(&self) -> u64 {
        self.left
    }

    /// The head signature this connection claimed to parse, if any.
    pub(super) fn parsing(&self) -> Option<u64> {
        self.parser.then_some(self.head_sig)
    }
}

/// The frame header at the front of `bytes`: (fin, opcode bits, header
/// length, payload length), if it is all there and a server may send it.
fn header(bytes: &[u8]) -> Option<Result<(bool, u8, usize, u64), ()>> {
    let (&b0, &b1) = (bytes.first()?, bytes.get(1)?);
    if b0 & 0x70 != 0 || b1 & 0x80 != 0 {
        return Some(Err(())); // reserved bits, or masked: a server never sends either
    }
    let (hdr, len) = match b1 & 0x7F {
        126 => (
            4,
            u16::from_be_bytes([*bytes.get(2)?, *bytes.get(3)?]) as u64,
        ),
        127 => {
            let b: [u8; 8] = bytes.get(2..10)?.try_into().ok()?;
            (10, u64::from_be_bytes(b))
        }
        n => (2, n as u64),
    };
    Some(Ok((b0 & 0x80 != 0, b0 & 0x0F, hdr, len)))
}

impl Engine {
    /// At the front of `bytes`, an incomplete frame: if it can never fit
    /// the shared buffer and enough of it is here, starts reading it as it
    /// arrives and returns the bytes used (all of them); otherwise `None`
    /// (keep it as a partial frame). A frame over [`MAX_MESSAGE`] ends
    /// the session.
    pub(super) fn begin_large(&mut self, token: usize, bytes: &[u8]) -> Option<usize> {
        let (fin, op, hdr, len) = match header(bytes)? {
            Ok(h) => h,
            Err(()) => {
                self.drop_conn(token, Cause::Error(ErrKind::Other));
                return Some(bytes.len());
            }
        };
        if (hdr as u64).saturating_add(len) <= READ_BUF as u64 {
            return None;
        }
        if len > MAX_MESSAGE {
            tracing::debug!(len, "a message over {MAX_MESSAGE} bytes");
            self.drop_conn(token, Cause::Error(ErrKind::Other));
            return Some(bytes.len());
        }
        let body = &bytes[hdr..];
        if body.len() < HEAD_MIN {
            return None;
        }
        let opcode = match op {
            0 => Opcode::Continuation,
            1 => Opcode::Text,
            2 => Opcode::Binary,
            _ => {
                self.drop_conn(token, Cause::Error(ErrKind::Other));
                return Some(bytes.len());
            }
        };
        let vsn = self.conns[token].vsn();
        let kind = match (opcode, fin) {
            (Opcode::Text, true) => event_in_head(vsn, body).map_or(Kind::Other, Kind::of),
            _ => Kind::Other,
        };
        let head_sig = head_sig(body, len);
        let (keep, parser) = match kind {
            Kind::State => (false, false),
            // The first of this agent's connections to see the diff reads it.
            Kind::Diff => {
                let first = self.presence.heads.insert(head_sig);
                (first, first)
            }
            // Continuation frames are not messages here (as small ones).
            Kind::Other if opcode == Opcode::Continuation || !fin => (false, false),
            Kind::Other | Kind::Count => (true, false),
        };
        let large = Large {
            opcode,
            fin,
            len,
            left: len,
            kind,
            head_sig,
            tail: Vec::new(),
            keep: keep.then(|| Vec::with_capacity(len.min(16 << 20) as usize)),
            parser,
        };
        self.feed_large(token, large, body);
        Some(bytes.len())
    }

    /// The next bytes of the connection's large message (at most what it
    /// still lacks); keeps it on the connection until it is whole.
    pub(super) fn feed_large(&mut self, token: usize, mut l: Large, chunk: &[u8]) {
        debug_assert!(chunk.len() as u64 <= l.left);
        l.left -= chunk.len() as u64;
        if let Some(k) = l.keep.as_mut() {
            k.extend_from_slice(chunk);
        } else if l.kind == Kind::Diff {
            if chunk.len() >= SIG_HEAD {
                l.tail.clear();
                l.tail.extend_from_slice(&chunk[chunk.len() - SIG_HEAD..]);
            } else {
                l.tail.extend_from_slice(chunk);
                let extra = l.tail.len().saturating_sub(SIG_HEAD);
                l.tail.drain(..extra);
            }
        }
        if l.left > 0 {
            if let Some(c) = self.conns.get_mut(token) {
                c.rx = Some(Box::new(Rx::Large(l)));
            }
            return;
        }
        match l.keep {
            Some(whole) => {
                self.on_frame(token, l.opcode, l.fin, &whole);
            }
            None => {
                self.counters.msgs_in += 1;
                self.counters.bytes_in += l.len;
                let now = sys::realtime_ns();
                self.counters.presence.record(l.kind, l.len as usize, now);
                if l.kind == Kind::Diff {
                    self.diff_receipt(full_sig(l.head_sig, &l.tail), now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_large_frames() {
        let mut f = Vec::new();
        throng_protocol::frame::encode_header(&mut f, true, Opcode::Text, 300_000, None);
        assert_eq!(header(&f), Some(Ok((true, 1, 10, 300_000))));
        assert_eq!(header(&f[..5]), None, "incomplete");
        let mut g = Vec::new();
        throng_protocol::frame::encode_header(&mut g, false, Opcode::Binary, 1000, None);
        assert_eq!(header(&g), Some(Ok((false, 2, 4, 1000))));
        assert_eq!(header(&[0x81, 0x85]), Some(Err(())), "masked");
        assert_eq!(header(&[0xF1, 0x05]), Some(Err(())), "reserved bits");
    }
}
