//! Closing: the one way a connection ends ([`Conns::close`], with a
//! [`CloseReason`] whose row in `crate::engine::close` says the close
//! frame, the counter and what happens to queued output), the half-close
//! once the last bytes are out, and removing a connection (its socket
//! closes). Connections that must end while another is being processed are
//! marked `dead` and queued in `doomed` ([`Conns::doom`]), then closed
//! between events. A socket's end (its subscriptions, presences, events)
//! is its protocol's: the socket is queued in `closed` for it, handled once
//! the event is over (`Shard::settle`).

use throng_protocol::frame::{self, Opcode};

use super::Conns;
use crate::engine::close::{CloseReason, Flush};
use crate::engine::conn::Kind;
use crate::engine::outlet::Outlet;
use crate::engine::outlet::{Closed, SessionWork};
use crate::metrics::ShardStats;
use crate::node::Node;

impl Conns {
    /// Ends connection `key` for `reason`: the one way a connection ends.
    /// Counts it and treats its output as the reason's row says
    /// ([`CloseReason::row`]). While the connection's input is processed,
    /// the close frame goes after the replies gathered for it; a
    /// connection is removed from the slab only between events (an
    /// [`Flush::Abort`] or [`Flush::Now`] reason comes from the sweep or
    /// [`Conns::close_doomed`]).
    pub fn close(&mut self, node: &Node, key: usize, reason: CloseReason) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        let wire = match conn.kind {
            Kind::Ws { wire, .. } => Some(wire),
            _ => None,
        };
        let row = reason.row_for(wire);
        let ws = wire.is_some();
        if conn.dead {
            // Doomed during this event: it ends for that reason, next.
            return;
        }
        if matches!(conn.kind, Kind::Closing { .. }) && row.flush != Flush::Abort {
            // Closing already: its close is under way.
            return;
        }
        tracing::debug!(key, ?reason, "closing");
        reason.count(&self.stats);
        let code = reason.event_code();
        let queued = conn.queued();
        match row.flush {
            Flush::Abort => self.remove(node, key, code),
            Flush::Drop if !ws => self.remove(node, key, code),
            Flush::Now if !ws && !queued => self.remove(node, key, code),
            Flush::Now if !ws => {
                self.close_frame_after_output(key, ws, None, "", code, false);
            }
            Flush::Now if !queued => {
                if let Some(code) = row.code {
                    let at = self.reply.len();
                    frame::encode_close(&mut self.reply, code, row.text, None);
                    let bytes = [&self.reply[at..]];
                    let _ = super::output::write_plain(&mut self.tls, key, &mut conn.sock, &bytes);
                    self.reply.truncate(at);
                }
                self.remove(node, key, code);
            }
            Flush::Drop | Flush::Now => {
                if let Some(e) = conn.extra.as_mut() {
                    let keep = e.out.front().is_some_and(|c| c.started());
                    e.out.truncate(keep as usize);
                    e.out_bytes = e.out.front().map_or(0, |c| c.rest().len());
                }
                let (code_, text) = (row.code, row.text);
                self.close_frame_after_output(key, ws, code_, text, code, false);
            }
            Flush::After => {
                // The peer's close, echoed: the handshake is complete.
                let answered = ws && matches!(reason, CloseReason::PeerClosed(_));
                let (code_, text) = (row.code, row.text);
                self.close_frame_after_output(key, ws, code_, text, code, answered);
            }
        }
    }

    /// Closing, with the close frame (a WebSocket's, when the reason has
    /// one) after the frames gathered for the connection and everything
    /// queued before them; then the half-close once the queue drains. The
    /// frame goes into the gathered frames: no allocation.
    fn close_frame_after_output(
        &mut self,
        key: usize,
        ws: bool,
        code: Option<u16>,
        text: &str,
        event_code: u16,
        answered: bool,
    ) {
        if ws {
            match code {
                Some(code) => frame::encode_close(&mut self.reply, code, text, None),
                // The peer's close without a code is echoed without one.
                None => frame::encode_frame(&mut self.reply, Opcode::Close, &[], None),
            }
        }
        // Closing first: the frame is then queued past the output bounds.
        self.start_closing(key, event_code, answered);
        self.flush_reply(key);
    }

    /// Sends what is gathered, then half-closes once the queue drains. The
    /// channels end now; the socket lingers only to deliver the close.
    fn start_closing(&mut self, key: usize, code: u16, answered: bool) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        if matches!(conn.kind, Kind::Closing { .. }) {
            return;
        }
        let socket = conn.take_socket();
        conn.kind = Kind::Closing {
            shut: false,
            answered,
        };
        conn.last_active = self.now;
        if let Some(e) = conn.extra.as_mut() {
            e.input = Vec::new();
            e.frag = None;
        }
        if socket.is_some() {
            ShardStats::sub(&self.stats.websockets, 1);
            self.closed.push_back(Closed { key, socket, code });
        }
    }

    pub fn try_shutdown(&mut self, key: usize) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        if conn.queued() || !self.reply.is_empty() {
            return;
        }
        if let Kind::Closing {
            shut: false,
            answered,
        } = conn.kind
        {
            if let Some(tls) = &mut self.tls {
                if tls.backlogged(key) {
                    return;
                }
                tls.close_notify(key, &mut conn.sock);
            }
            let _ = conn.sock.shutdown(std::net::Shutdown::Write);
            conn.kind = Kind::Closing {
                shut: true,
                answered,
            };
            if answered {
                self.doom(Outlet::Conn(key), CloseReason::Gone);
            }
        }
    }

    /// Bytes that came on closing connection `key`: dropped, but for the
    /// peer's close frame, which completes the closing handshake (the
    /// connection then ends once shut down, `Kind::Closing`). Frames are
    /// read only as far as their headers say; an HTTP connection's bytes
    /// are never one (a frame's first byte has its top bit set).
    pub fn closing_input(&mut self, key: usize, data: &mut [u8]) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        let Kind::Closing {
            shut,
            answered: false,
        } = conn.kind
        else {
            return;
        };
        let mut pos = 0;
        while let Ok(Some(f)) =
            frame::decode_frame_with(&mut data[pos..], frame::Role::Server, u64::MAX, true)
        {
            pos += f.consumed;
            if f.opcode == Opcode::Close {
                conn.kind = Kind::Closing {
                    shut,
                    answered: true,
                };
                if shut {
                    self.doom(Outlet::Conn(key), CloseReason::Gone);
                }
                return;
            }
        }
    }

    /// Marks the socket of `outlet` for closing at the end of this event:
    /// for a socket that must end while another is being handled (a
    /// topic's subscriber may be a connection or a long-poll session).
    pub fn doom(&mut self, outlet: Outlet, reason: CloseReason<'static>) {
        let key = match outlet {
            Outlet::Conn(key) => key,
            Outlet::Session(idx) => return self.sessions.push(SessionWork::Doom(idx, reason)),
        };
        if let Some(conn) = self.slab.get_mut(key) {
            // A closing connection that backs up is dropped, not cut again.
            let reason = match conn.kind {
                Kind::Closing { .. } => CloseReason::Gone,
                _ => reason,
            };
            if !conn.dead {
                conn.dead = true;
                self.doomed.push((key, reason));
            }
        }
    }

    /// Closes the connections doomed during the last event.
    pub fn close_doomed(&mut self, node: &Node) {
        while let Some((key, reason)) = self.doomed.pop() {
            if let Some(conn) = self.slab.get_mut(key) {
                conn.dead = false;
            }
            self.close(node, key, reason);
        }
    }

    /// Removes a connection: its socket closes, and its protocol ends what
    /// it held (its socket's channels, with a `disconnect` event with
    /// `code`, if it still had one) after the event.
    fn remove(&mut self, node: &Node, key: usize, code: u16) {
        let Some(mut conn) = self.slab.try_remove(key) else {
            return;
        };
        self.release(node, key);
        if let Some(tls) = &mut self.tls {
            tls.close(key);
        }
        ShardStats::sub(&self.stats.connections, 1);
        ShardStats::add(&self.stats.closed, 1);
        let socket = conn.take_socket();
        if socket.is_some() {
            ShardStats::sub(&self.stats.websockets, 1);
        }
        self.closed.push_back(Closed { key, socket, code });
        // Dropping the stream closes the descriptor, which also leaves epoll.
    }
}
