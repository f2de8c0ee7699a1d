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
        let was = conn.kind;
        conn.kind = Kind::Closing { shut: false };
        conn.last_active = self.now;
        if let Some(e) = conn.extra.as_mut() {
            e.input = Vec::new();
            e.frag = None;
        }
        let mut joins = std::mem::take(&mut conn.joins);
        let connect = conn.connect.take();
        if let Kind::Ws { vsn, .. } = was {
            self.end_socket(node, scratch, key, vsn, connect.as_deref(), &mut joins);
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
            if !conn.dead {
                conn.dead = true;
                self.doomed.push((key, reason));
            }
        }
    }

    pub fn close_doomed(&mut self, node: &Node, scratch: &mut Scratch) {
        while let Some((key, reason)) = self.doomed.pop() {
            self.close(node, scratch, key, reason);
        }
    }

    /// Removes a connection: its channels end, its socket closes.
    pub fn close(&mut self, node: &Node, scratch: &mut Scratch, key: usize, reason: CloseReason) {
        let Some(mut conn) = self.slab.try_remove(key) else {
            return;
        };
        self.release(node, key);
        match reason {
            CloseReason::SlowReader => ShardStats::add(&self.stats.slow_reader_closes, 1),
            CloseReason::Idle => ShardStats::add(&self.stats.idle_timeout_closes, 1),
            CloseReason::Normal => {}
        }
        ShardStats::sub(&self.stats.connections, 1);
        ShardStats::add(&self.stats.closed, 1);
        if let Kind::Ws { vsn, .. } = conn.kind {
            ShardStats::sub(&self.stats.websockets, 1);
            let connect = conn.connect.take();
            self.end_socket(node, scratch, key, vsn, connect.as_deref(), &mut conn.joins);
        }
        // Dropping the stream closes the descriptor, which also leaves epoll.
    }
}
