//! permessage-deflate's inflating side on a shard: a whole compressed
//! message read from a connection is inflated within `--max-message-bytes`
//! into the shard's buffer, then handled as a plain one. The buffers and
//! the compressing side are `conns/deflate.rs`'s.

use std::borrow::Cow;

use throng_protocol::deflate::InflateError;
use throng_protocol::frame::{close_code, Opcode};
use throng_protocol::Wire;

use super::Shard;
use crate::engine::close::CloseReason;
use crate::engine::conns::deflate::KEEP;
use crate::engine::ws::{self, FrameAction};
use crate::engine::Protocol;
use crate::metrics::ShardStats;

impl<P: Protocol> Shard<P> {
    /// A whole compressed message from `key`: inflated within
    /// `--max-message-bytes` (checked while inflating: a message that
    /// inflates past it closes the socket with 1009 without being inflated
    /// further), then handled as a plain one.
    pub(super) fn inflate_message(
        &mut self,
        key: usize,
        wire: Wire,
        echo: bool,
        opcode: Opcode,
        data: &[u8],
    ) {
        let max = self.conns.settings.max_message;
        let mut out = std::mem::take(&mut self.conns.deflate.inflated);
        let inflater = self
            .conns
            .deflate
            .inflater
            .get_or_insert_with(Default::default);
        match inflater.inflate(data, max, &mut out) {
            Ok(()) => {
                ShardStats::add(&self.conns.stats.deflate_messages_in, 1);
                let action = ws::checked(opcode, Cow::Borrowed(&out));
                if let FrameAction::Message(..) | FrameAction::Fail(..) = action {
                    self.ws(key, wire, echo, action);
                }
            }
            Err(e) => {
                let code = match e {
                    InflateError::TooBig => {
                        ShardStats::add(&self.conns.stats.deflate_too_big, 1);
                        close_code::TOO_BIG
                    }
                    InflateError::Invalid => close_code::INVALID_PAYLOAD,
                };
                let reason = CloseReason::Protocol {
                    code,
                    text: match e {
                        InflateError::TooBig => "message too big once inflated",
                        InflateError::Invalid => "invalid compressed data",
                    },
                };
                self.conns.close(&self.node, key, reason);
            }
        }
        out.clear();
        if out.capacity() > KEEP {
            out = Vec::new();
        }
        self.conns.deflate.inflated = out;
    }
}
