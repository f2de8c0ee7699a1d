//! permessage-deflate on a shard (RFC 7692; the codec is
//! `throng_protocol::deflate`): inflating a compressed message within
//! `--max-message-bytes`, and compressing what one connection is sent.
//!
//! Nothing here belongs to a connection: the inflater, its output buffer
//! and the compression buffer are the shard's, used by one message at a
//! time and reset before the next, so a socket that negotiated deflate
//! costs no more while idle than one that did not (its negotiated window
//! is one byte in `Kind::Ws`). A fragmented compressed message waits in
//! the connection's `Extra` as its compressed bytes, as a plain one does,
//! and is inflated once whole.

use throng_protocol::deflate::{self, Inflater};
use throng_protocol::frame::Opcode;

use super::Conns;
use crate::engine::conn::Kind;
use crate::metrics::ShardStats;

/// Buffers kept past a message only up to this capacity.
pub(crate) const KEEP: usize = 256 << 10;

/// A shard's deflate state: created on the first compressed message.
#[derive(Default)]
pub(crate) struct ShardDeflate {
    pub(crate) inflater: Option<Box<Inflater>>,
    /// The inflated message being handled.
    pub(crate) inflated: Vec<u8>,
    /// A message being compressed for one connection.
    compressed: Vec<u8>,
}

impl Conns {
    /// The negotiated server window of `key` (0: no deflate).
    pub fn deflate_of(&self, key: usize) -> u8 {
        match self.slab.get(key).map(|c| c.kind) {
            Some(Kind::Ws { deflate, .. }) => deflate,
            _ => 0,
        }
    }

    /// As `frame_out`, compressed when the connection negotiated deflate
    /// (`window` bits) and compression shrinks the message.
    pub fn frame_out_deflated(&mut self, window: u8, op: Opcode, body: &[u8]) {
        self.frame_out_compressed(window, op, body, false);
    }

    /// As [`Conns::frame_out_deflated`], or, with `always`, compressed
    /// whatever its size and ratio: the echo endpoint does so, as the
    /// Autobahn TestSuite's compression cases (12, 13) measure it, and
    /// kosoku, the suite's runner, hands those cases an uncompressed text
    /// message as a string where they hash bytes.
    pub fn frame_out_compressed(&mut self, window: u8, op: Opcode, body: &[u8], always: bool) {
        if window == 0 || (!always && body.len() < deflate::MIN_COMPRESS) {
            return self.frame_out(op, body);
        }
        let mut c = std::mem::take(&mut self.deflate.compressed);
        c.clear();
        let done = if always {
            deflate::compress_always(body, window, &mut c)
        } else {
            deflate::compress(body, window, &mut c)
        };
        if done {
            deflate::encode_compressed_header(&mut self.reply, op, c.len());
            self.reply.extend_from_slice(&c);
            self.msgs_out += 1;
            ShardStats::add(&self.stats.deflate_messages_out, 1);
            let saved = body.len().saturating_sub(c.len()) as u64;
            ShardStats::add(&self.stats.deflate_bytes_saved, saved);
        } else {
            self.frame_out(op, body);
        }
        if c.capacity() > KEEP {
            c = Vec::new();
        }
        self.deflate.compressed = c;
    }
}
