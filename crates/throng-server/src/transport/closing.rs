//! Closing: failing a connection with a close frame, the half-close once
//! the last bytes are out, and removing a connection (its channels end,
//! its socket closes). Connections that must end while another is being
//! processed are marked `dead` and queued in `doomed`, then removed between
//! events.

use throng_protocol::frame;

use super::conn::Kind;
use super::{CloseReason, Conns};
use crate::metrics::ShardStats;
use crate::node::Node;
use crate::socket::Scratch;

/// RFC 6455's registry: the server is overloaded, the client may retry.
const TRY_AGAIN_LATER: u16 = 1013;

impl Conns {
    /// Fails the connection: a close frame with `code`, then closing.
    pub fn fail(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        key: usize,
        code: u16,
        reason: &str,
    ) {
        ShardStats::add(&self.stats.protocol_errors, 1);
        self.close_with(node, scratch, key, code, reason);
    }

    /// A close frame with `code`, then closing (counted by the caller).
    pub fn close_with(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        key: usize,
        code: u16,
        reason: &str,
    ) {
        tracing::debug!(key, code, "closing: {reason}");
        frame::encode_close(&mut self.reply, code, reason, None);
        self.start_closing(node, scratch, key);
    }

    /// Sends what is gathered, then half-closes once the queue drains. The
    /// channels end now; the socket lingers only to deliver the close.
    pub fn start_closing(&mut self, node: &Node, scratch: &mut Scratch, key: usize) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        if matches!(conn.kind, Kind::Closing { .. }) {
            return;
        }
        let socket = conn.take_socket();
        conn.kind = Kind::Closing { shut: false };
        conn.last_active = self.now;
        if let Some(e) = conn.extra.as_mut() {
            e.input = Vec::new();
            e.frag = None;
        }
        if let Some(socket) = socket {
            self.end_socket(node, scratch, key, socket);
            ShardStats::sub(&self.stats.websockets, 1);
        }
    }

    pub fn try_shutdown(&mut self, key: usize) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        if conn.queued() || !self.reply.is_empty() {
            return;
        }
        if let Kind::Closing { shut: false } = conn.kind {
            let _ = conn.sock.shutdown(std::net::Shutdown::Write);
            conn.kind = Kind::Closing { shut: true };
        }
    }

    /// Marks `key` for removal at the end of this turn.
    pub fn doom(&mut self, key: usize, reason: CloseReason) {
        if let Some(conn) = self.slab.get_mut(key) {
            // A closing connection that backs up is dropped, not cut again.
            let reason = match conn.kind {
                Kind::Closing { .. } => CloseReason::Normal,
                _ => reason,
            };
            if !conn.dead {
                conn.dead = true;
                self.doomed.push((key, reason));
            }
        }
    }

    pub fn close_doomed(&mut self, node: &Node, scratch: &mut Scratch) {
        while let Some((key, reason)) = self.doomed.pop() {
            let ws = self
                .slab
                .get(key)
                .is_some_and(|c| matches!(c.kind, Kind::Ws { .. }));
            if reason == CloseReason::SlowReader && ws {
                // A slow reader is told why, after the frame it is reading.
                ShardStats::add(&self.stats.slow_reader_closes, 1);
                self.cut(
                    node,
                    scratch,
                    key,
                    frame::close_code::POLICY_VIOLATION,
                    "slow reader",
                );
                continue;
            }
            if reason == CloseReason::OutboundBudget {
                ShardStats::add(&self.stats.outbound_budget_closes, 1);
                if ws {
                    self.cut(
                        node,
                        scratch,
                        key,
                        TRY_AGAIN_LATER,
                        "server outbound memory full",
                    );
                    continue;
                }
            }
            self.close(node, scratch, key, reason);
        }
        while let Some((idx, end)) = self.lp.doomed.pop() {
            self.lp_end(node, scratch, idx, end);
        }
    }

    /// Ends a WebSocket with a close frame (`code`, `reason`) sent after
    /// everything already queued for it; then it lingers as any closing
    /// connection does (the peer's FIN, at most `CLOSE_LINGER` seconds).
    /// For use between events (the drain, the sweep, cut readers), when no
    /// frames are being gathered for the connection; while its input is
    /// processed, [`Conns::close_with`] keeps the order of gathered replies.
    pub fn close_after_output(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        key: usize,
        code: u16,
        reason: &str,
    ) {
        let mut bye = Vec::with_capacity(32);
        frame::encode_close(&mut bye, code, reason, None);
        // Closing first: the frame is then queued past the output bounds.
        self.start_closing(node, scratch, key);
        self.send(key, &bye);
        self.try_shutdown(key);
    }

    /// Ends a WebSocket whose output is backed up: its queue is dropped
    /// (but for the rest of a frame already partly written, so the stream
    /// stays well framed), then [`Conns::close_after_output`]. Frees the
    /// queue now instead of after the reader catches up.
    pub fn cut(&mut self, node: &Node, scratch: &mut Scratch, key: usize, code: u16, reason: &str) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        conn.dead = false;
        if let Some(e) = conn.extra.as_mut() {
            let keep = e.out.front().is_some_and(|c| c.started());
            e.out.truncate(keep as usize);
            e.out_bytes = e.out.front().map_or(0, |c| c.rest().len());
        }
        self.close_after_output(node, scratch, key, code, reason);
    }

    /// Removes a connection: its channels end, its socket closes.
    pub fn close(&mut self, node: &Node, scratch: &mut Scratch, key: usize, reason: CloseReason) {
        let Some(mut conn) = self.slab.try_remove(key) else {
            return;
        };
        self.release(node, key);
        match reason {
            // A WebSocket's is counted when it is cut (`close_doomed`).
            CloseReason::SlowReader if !matches!(conn.kind, Kind::Ws { .. }) => {
                ShardStats::add(&self.stats.slow_reader_closes, 1)
            }
            CloseReason::SlowReader | CloseReason::OutboundBudget => {}
            CloseReason::Idle => ShardStats::add(&self.stats.idle_timeout_closes, 1),
            CloseReason::Normal => {}
        }
        ShardStats::sub(&self.stats.connections, 1);
        ShardStats::add(&self.stats.closed, 1);
        if !self.lp.waiting.is_empty() {
            self.lp_conn_closed(node, key);
        }
        self.hook_forget(node, key);
        if let Some(socket) = conn.take_socket() {
            ShardStats::sub(&self.stats.websockets, 1);
            self.end_socket(node, scratch, key, socket);
        }
        // Dropping the stream closes the descriptor, which also leaves epoll.
    }
}
