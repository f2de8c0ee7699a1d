//! Messages that arrive in pieces, read as they arrive rather than kept
//! whole when they need not be: a list-mode `presence_state` of more than
//! ~5,000 users or a diff of as many joins is longer than the shared read
//! buffer, and thousands of subscribers receive each diff at once, so a
//! buffer per connection for every message in progress would cost the
//! agent a diff's size per subscriber.
//!
//! A frame that arrives whole is read as before. One that does not, once
//! [`HEAD_MIN`] bytes of it are here (its event, and its signature's first
//! bytes), and is at least [`STREAM_MIN`] long:
//! - a `presence_state` is only counted: its bytes go by and are dropped;
//! - a `presence_diff` is counted and named by its signature (its first
//!   and last bytes and length, see `presence`); the first
//!   connection of this agent to receive a diff keeps it whole to read its
//!   keys once, the others let it go by;
//! - anything else waits whole as before (its start kept, copied back to
//!   the buffer before the next read) if it fits the shared buffer, else
//!   is kept whole in a [`Large`] and handled as a small one when complete.
//!
//! So a connection holds a buffer only while a message it must read is
//! incomplete, and otherwise a [`Large`] of a few hundred bytes while its
//! message goes by. Messages are at most [`MAX_MESSAGE`] bytes.

use throng_protocol::frame::Opcode;

use super::presence::{event_in_head, full_sig, head_sig, SIG_TAIL};
use super::socket::ErrKind;
use super::{Cause, Engine, READ_BUF};
use crate::presence::Kind;
use crate::sys;

/// The largest message a connection accepts (a list-mode state of ~5
/// million users); past it the session fails with `other`.
pub(super) const MAX_MESSAGE: u64 = 256 << 20;

/// Bytes of a message's body needed before it is classified.
pub(super) const HEAD_MIN: usize = 1024;

/// Messages shorter than this wait whole (their start is cheap to keep).
pub(super) const STREAM_MIN: u64 = 2048;

/// What a connection keeps of a message that has not fully arrived.
pub(super) enum Rx {
    /// The start of a frame (or of the handshake response) that fits the
    /// shared read buffer: copied back to its start on the next read.
    Partial(Vec<u8>),
    /// A message longer than the shared buffer, read as it arrives
    /// ([`Large`], below).
    Large(Large),
}

/// A message read as it arrives.
pub(crate) struct Large {
    opcode: Opcode,
    fin: bool,
    /// Its length, and the bytes still to come.
    len: u64,
    left: u64,
    kind: Kind,
    /// The signature of its start (diffs).
    head_sig: u64,
    /// Its last [`SIG_TAIL`] bytes so far (diffs), in place: a streamed
    /// diff costs the connection this struct and nothing else.
    tail: [u8; SIG_TAIL],
    tail_len: u8,
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

    /// Keeps the last [`SIG_TAIL`] bytes of what came before and `chunk`.
    fn push_tail(&mut self, chunk: &[u8]) {
        let have = self.tail_len as usize;
        if chunk.len() >= SIG_TAIL {
            self.tail.copy_from_slice(&chunk[chunk.len() - SIG_TAIL..]);
            self.tail_len = SIG_TAIL as u8;
        } else {
            let keep = (SIG_TAIL - chunk.len()).min(have);
            self.tail.copy_within(have - keep..have, 0);
            self.tail[keep..keep + chunk.len()].copy_from_slice(chunk);
            self.tail_len = (keep + chunk.len()) as u8;
        }
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
    /// At the front of `bytes`, an incomplete frame: if it is to be read
    /// as it arrives (see the module docs) and enough of it is here to
    /// tell, starts reading it so and returns the bytes used (all of them);
    /// otherwise `None` (keep its start). A frame over [`MAX_MESSAGE`]
    /// ends the session.
    pub(super) fn begin_large(&mut self, token: usize, bytes: &[u8]) -> Option<usize> {
        let (fin, op, hdr, len) = match header(bytes)? {
            Ok(h) => h,
            Err(()) => {
                self.drop_conn(token, Cause::Error(ErrKind::Other));
                return Some(bytes.len());
            }
        };
        if len > MAX_MESSAGE {
            tracing::debug!(len, "a message over {MAX_MESSAGE} bytes");
            self.drop_conn(token, Cause::Error(ErrKind::Other));
            return Some(bytes.len());
        }
        let fits = (hdr as u64).saturating_add(len) <= READ_BUF as u64;
        let body = &bytes[hdr..];
        if (fits && len < STREAM_MIN) || body.len() < HEAD_MIN {
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
            // It waits whole, as it always did.
            Kind::Other | Kind::Count if fits => return None,
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
            tail: [0; SIG_TAIL],
            tail_len: 0,
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
            l.push_tail(chunk);
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
                    let tail = &l.tail[..l.tail_len as usize];
                    self.diff_receipt(full_sig(l.head_sig, tail), now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed diff's tail is the message's last bytes, however the
    /// chunks fell.
    #[test]
    fn tails_follow_the_chunks() {
        let msg: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        for cut in [1usize, 7, 100, 127, 128, 129, 300] {
            let mut l = Large {
                opcode: Opcode::Text,
                fin: true,
                len: msg.len() as u64,
                left: msg.len() as u64,
                kind: Kind::Diff,
                head_sig: 0,
                tail: [0; SIG_TAIL],
                tail_len: 0,
                keep: None,
                parser: false,
            };
            for chunk in msg.chunks(cut) {
                l.push_tail(chunk);
            }
            assert_eq!(
                &l.tail[..l.tail_len as usize],
                &msg[msg.len() - SIG_TAIL..],
                "{cut}"
            );
        }
    }

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
