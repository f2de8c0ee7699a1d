//! Phoenix on one shard: what the protocol keeps there ([`State`]: its
//! long-poll sessions, its sockets' hook waits and presences, the
//! scratch buffers of its socket calls), and [`Phx`], one call's view of
//! the shard, through which a complete message reaches a socket's state
//! machine ([`crate::protocol::phoenix::socket`]) and its answers reach the
//! client through [`ShardTransport`](super::transport::ShardTransport).
//!
//! A socket is named by its [`Outlet`]: a WebSocket connection of the
//! engine, or a long-poll session of this protocol; the few things that
//! differ by carrier (where a reply goes, how a socket that must end is
//! ended) are matched on it here and in `transport.rs`, and nowhere else
//! outside `longpoll/`.

use throng_protocol::frame::{close_code, Opcode};
use throng_protocol::serializer::{self, Sender};
use throng_protocol::{Vsn, Wire};

use super::socket::{Cx as SocketCx, Mux};
use super::transport::{socket_of, ShardTransport};
use super::Phx;
use crate::channel::{ConnectInfo, Info, Who};
use crate::engine::close::CloseReason;
use crate::engine::conn::{Kind, Mark};
use crate::engine::conns::output::Sent;
use crate::engine::outlet::{Closed, Outlet};
use crate::engine::socket::{Joins, SocketState};
use crate::engine::users::Id;
use crate::history::recovery::Pending;
use crate::hooks::EventType;
use crate::node::Node;

impl Phx<'_> {
    /// A complete WebSocket message on the Phoenix socket of `key`.
    pub fn message(&mut self, key: usize, vsn: Vsn, opcode: Opcode, data: &[u8]) {
        let msg = match serializer::decode(vsn, opcode, data, Sender::Client) {
            Ok(m) => m,
            Err(e) => {
                let text = e.to_string();
                let reason = CloseReason::Protocol {
                    code: close_code::INVALID_PAYLOAD,
                    text: &text,
                };
                self.conns.close(self.node, key, reason);
                return;
            }
        };
        let max_ref = self.node.config.limits.max_ref_bytes;
        if let Err(text) = crate::limits::check_refs(&msg, max_ref) {
            self.conns
                .close(self.node, key, CloseReason::RefTooLong(text));
            return;
        }
        let fail = self.with_socket(Outlet::Conn(key), vsn, |mux| mux.handle_in(msg));
        if let Some(reason) = fail {
            self.conns.close(self.node, key, reason);
        }
    }

    /// An info for the channels joined on `topic` on this shard.
    pub fn info(&mut self, topic: &str, info: &Info) {
        let Some(idx) = self.conns.registry.find(topic) else {
            return;
        };
        let subs = self.conns.registry.topics[idx as usize].subs.clone();
        for key in subs {
            let outlet = Outlet::of(key as usize);
            let Some(vsn) = self.vsn_of(outlet) else {
                continue;
            };
            let fail = self.with_socket(outlet, vsn, |mux| mux.handle_info(idx, info));
            self.after_socket(outlet, fail);
        }
    }

    /// A connection of the engine ended: its Phoenix socket, if it had
    /// one, ends; a request or upgrade it held is forgotten.
    pub fn closed(&mut self, closed: Closed) {
        let Closed { key, socket, code } = closed;
        if !self.parts.lp.waiting.is_empty() {
            self.lp_conn_closed(key);
        }
        if let Some((wire, socket)) = socket {
            let vsn = wire.vsn().unwrap_or(Vsn::V2);
            self.end_socket(Outlet::Conn(key), vsn, socket, code);
        }
        // After the socket's end, whose events name it.
        self.hook_forget(key);
    }

    /// Ends the Phoenix socket of `outlet` (a connection that closed, or a
    /// long-poll session that ends): every channel terminates (their
    /// presences leave), the `disconnect` event goes out with `code`, and
    /// the hooks forget this socket. Its user is the engine's to forget.
    pub(crate) fn end_socket(
        &mut self,
        outlet: Outlet,
        vsn: Vsn,
        mut socket: SocketState,
        code: u16,
    ) {
        let key = outlet.key();
        let joins = &mut socket.joins;
        let (_, id) = self.on_socket(outlet, vsn, (joins, socket.connect.as_deref()), |mux| {
            mux.close()
        });
        self.socket_event(
            key,
            EventType::Disconnect,
            id.as_ref().map(Id::as_str),
            |e| e.code = Some(code),
        );
        self.hook_forget(key);
    }

    /// After an event on the socket of `outlet`: the close it asked for,
    /// and, on a WebSocket, its gathered replies out (a session's are in
    /// its buffer already).
    pub(crate) fn after_socket(&mut self, outlet: Outlet, fail: Option<CloseReason<'static>>) {
        match outlet {
            Outlet::Conn(key) => {
                if let Some(reason) = fail {
                    self.conns.close(self.node, key, reason);
                }
                self.conns.flush_reply(key);
            }
            Outlet::Session(_) => {
                if let Some(reason) = fail {
                    self.conns.doom(outlet, reason);
                }
            }
        }
    }

    /// Lends the socket state of `outlet` to `f`, and takes it back.
    /// Returns the close the socket asked for, if any (done once the state
    /// is back).
    pub(crate) fn with_socket(
        &mut self,
        outlet: Outlet,
        vsn: Vsn,
        f: impl FnOnce(&mut Mux<'_, ShardTransport<'_>>),
    ) -> Option<CloseReason<'static>> {
        let socket = self.socket_mut(outlet)?;
        let (mut joins, connect) = (std::mem::take(&mut socket.joins), socket.connect.take());
        let (fail, _) = self.on_socket(outlet, vsn, (&mut joins, connect.as_deref()), f);
        // Connections and sessions leave their slab only between events,
        // so it is there.
        if let Some(s) = self.socket_mut(outlet) {
            s.joins = joins;
            s.connect = connect;
        }
        fail
    }

    /// Runs `f` on the Phoenix socket of `outlet` made of `socket` (its
    /// channels and what it connected with) and of its user, whose id the
    /// users table holds under the outlet's key; returns the close it
    /// asked for and that id.
    fn on_socket(
        &mut self,
        outlet: Outlet,
        vsn: Vsn,
        socket: (&mut Joins, Option<&ConnectInfo>),
        f: impl FnOnce(&mut Mux<'_, ShardTransport<'_>>),
    ) -> (Option<CloseReason<'static>>, Option<Id>) {
        let (joins, connect) = socket;
        // Copied, not borrowed: the table lives in what the call mutates.
        let id = self.conns.users.id(outlet.key() as u32);
        let node = self.node;
        let mut t = ShardTransport {
            conns: &mut *self.conns,
            parts: &mut *self.parts,
            node,
            outlet,
            fail: None,
        };
        let who = Who {
            user: id.as_ref().map(Id::as_str),
            connect,
        };
        f(&mut Mux {
            cx: socket_cx(node, vsn, who),
            t: &mut t,
            joins,
            scratch: &mut *self.scratch,
        });
        (t.fail, id)
    }

    /// The answer to a history read of a join with `since`
    /// (`crate::history::recovery`): the join's reply and replay, then the
    /// live messages held aside that the replay did not have.
    pub fn replay_answer(&mut self, mut a: crate::history::ReplayAnswer) {
        let Some(idx) = self.conns.registry.find(&a.topic) else {
            return;
        };
        let Some(p) = self.conns.recovery.answered(&mut a, idx) else {
            return; // left, closed or joined again meanwhile
        };
        let outlet = Outlet::of(a.key);
        let Some(vsn) = self.vsn_of(outlet) else {
            return;
        };
        let Pending { held, live, .. } = p;
        let found = a.replay;
        if found.unavailable {
            // Refused, joined again by the client: what was held goes.
            let topic = a.topic;
            let fail = self.with_socket(outlet, vsn, |mux| mux.since_refused(&topic, held));
            self.after_socket(outlet, fail);
            return;
        }
        let (epoch, last, recovered) = (found.epoch, found.last, found.recovered);
        let topic = a.topic;
        let fail = self.with_socket(outlet, vsn, |mux| mux.since_answered(&topic, held, found));
        let failed = fail.is_some();
        self.after_socket(outlet, fail);
        if failed {
            return;
        }
        if recovered && epoch != 0 {
            self.conns.replay_reached(idx, epoch, last);
        }
        let mut newest = 0;
        for b in &live {
            if recovered && b.epoch == epoch && b.offset <= last {
                continue; // in the replay
            }
            if recovered && b.epoch == epoch && b.offset > last.max(newest) + 1 {
                // A message between the replay and the live ones never
                // came: closed, the client rejoins with `since` and reads it.
                self.conns.doom(outlet, CloseReason::SlowReader);
                return;
            }
            newest = b.offset;
            self.conns.send_to(a.key, b, &mut Sent::default());
        }
        if recovered && last > newest {
            // Live copies up to `last` may still come: skipped.
            self.conns.recovery.replayed(a.key, idx, last);
        }
    }

    /// The socket state of `outlet`, whatever its carrier.
    pub(crate) fn socket_mut(&mut self, outlet: Outlet) -> Option<&mut SocketState> {
        socket_of(self.conns, self.parts, outlet)
    }

    /// The serializer of `outlet` while its socket is live (a connection
    /// upgraded and not closing, a session not ending).
    pub(crate) fn vsn_of(&self, outlet: Outlet) -> Option<Vsn> {
        match outlet {
            Outlet::Conn(key) => match self.conns.slab.get(key).filter(|c| !c.dead)?.kind {
                Kind::Ws {
                    wire: Wire::Phoenix(vsn),
                    mark,
                    ..
                } if mark != Mark::Echo => Some(vsn),
                _ => None,
            },
            Outlet::Session(idx) => {
                let s = self.parts.lp.sessions.get(idx)?;
                (!s.dead).then_some(s.vsn)
            }
        }
    }
}

fn socket_cx<'a>(node: &'a Node, vsn: Vsn, who: Who<'a>) -> SocketCx<'a> {
    SocketCx {
        router: &node.router,
        policy: &node.policy,
        vsn,
        who,
        max_channels: node.config.max_channels_per_socket,
        max_join_bytes: node.config.limits.join_bytes(node.config.max_message_bytes),
        presence: &node.config.presence,
        max_presence_bytes: node.config.max_presence_bytes,
        max_json_depth: node.config.limits.max_json_depth,
    }
}
