//! [`Protocol`]: what the engine asks of the wire protocols it serves, as
//! Bandit serves any WebSocket app through one small behaviour (`WebSock`:
//! init, handle_in, handle_info, terminate). The engine knows connections,
//! bytes, frames, topics and encoded broadcasts; a protocol knows what the
//! bytes mean. The engine calls it:
//! - to route an HTTP request it does not serve itself ([`Protocol::route`]:
//!   an upgrade to one of its sockets, or a request of its own, such as a
//!   long-poll or a REST call);
//! - when one of its sockets opens ([`Protocol::upgraded`]), sends a whole
//!   message ([`Protocol::message`]) or has ended ([`Protocol::closed`]);
//! - with the work it queued for the protocol's own sessions, the
//!   messages of the shard's inbox that are the protocol's, and once per
//!   loop turn and once a second.
//!
//! A protocol answers through the engine's port: [`Conns`]'s methods to
//! subscribe, unsubscribe, send, broadcast and close (`engine/mod.rs` lists
//! them), on the [`Cx`] it is lent. It keeps what it needs per shard in its
//! own [`Protocol::Shard`], which the shard owns and lends with each call.
//!
//! The shard is generic over its protocol (`lib.rs` builds it with every
//! protocol of `crate::protocol`), so each call is a direct call, and the
//! engine names no protocol.

use throng_protocol::{Opcode, Wire};

use throng_pubsub::Broadcast;

use super::conn::Conn;
use super::http::{Head, Route, Upgrade};
use super::outlet::{Closed, SessionWork};
use super::Conns;
use crate::config::Config;
use crate::node::{Node, ShardMsg};

/// What a protocol is lent for one call: the node, the shard's
/// connections (the engine's port) and the protocol's own shard state.
pub(crate) struct Cx<'a, S> {
    pub node: &'a Node,
    pub conns: &'a mut Conns,
    pub me: &'a mut S,
}

/// A wire protocol the engine serves.
pub(crate) trait Protocol: Send + Sync + Sized + 'static {
    /// What the protocol keeps per shard.
    type Shard: Send;
    /// What an upgrade to its socket carries to [`Protocol::upgraded`].
    type Open: Send;
    /// A request of its own (not an upgrade) it answers.
    type Request: Send;

    /// Its state for shard `id`.
    fn shard(&self, node: &Node, id: usize) -> Self::Shard;

    /// An HTTP request the engine does not serve itself: the protocol's
    /// (`Some`), or not (`None`: the engine's pages, or 404). With the
    /// head only: a route that needs a body says how much it used.
    fn route(
        &self,
        head: &Head<'_, '_>,
        config: &Config,
    ) -> Option<Route<Self::Open, Self::Request>>;

    /// An upgrade to one of its sockets on connection `key`: the protocol
    /// opens it ([`Conns::open_websocket`]), holds it (a backend decides),
    /// or refuses it.
    fn upgraded(&self, cx: &mut Cx<'_, Self::Shard>, key: usize, up: Upgrade<Self::Open>);

    /// A request of its own on connection `key`.
    fn request(&self, cx: &mut Cx<'_, Self::Shard>, key: usize, req: Self::Request);

    /// A whole message from the client of WebSocket `key`, which speaks
    /// `wire`.
    fn message(
        &self,
        cx: &mut Cx<'_, Self::Shard>,
        key: usize,
        wire: Wire,
        op: Opcode,
        data: &[u8],
    );

    /// A connection ended ([`Conns::close`]): its socket, if it had one,
    /// for the protocol to end (unsubscribe, presences, events), and
    /// whatever the protocol held for the connection.
    fn closed(&self, cx: &mut Cx<'_, Self::Shard>, closed: Closed);

    /// Whether connection `key` waits on the protocol (a request it holds
    /// until an answer comes: the engine reads nothing more from it
    /// meanwhile), and how many bytes it may have sent meanwhile before it
    /// is cut: `None` when it does not wait.
    fn holds(&self, me: &Self::Shard, key: usize) -> Option<usize> {
        let _ = (me, key);
        None
    }

    /// Whether connection `key` waits for an answer the protocol owes it
    /// (a long-poll parked for messages): not a slow client, so not held to
    /// the head deadline.
    fn answering(&self, me: &Self::Shard, key: usize) -> bool {
        let _ = (me, key);
        false
    }

    /// A broadcast for one of its sessions, or its doom, queued by the
    /// engine during the last event.
    fn session(&self, cx: &mut Cx<'_, Self::Shard>, work: SessionWork) {
        let _ = (cx, work);
    }

    /// A message of the shard's inbox that is the protocol's (an info, a
    /// hook's answer, a history read's answer, a forwarded request).
    fn inbox(&self, cx: &mut Cx<'_, Self::Shard>, msg: ShardMsg) {
        let _ = (cx, msg);
    }

    /// Whether broadcast `b`, whose recipients are the protocol's to
    /// choose (a Pusher presence member event: `b.member`), goes to
    /// connection `conn`, a subscriber of its topic (registry index
    /// `topic`).
    fn delivers(&self, conn: &Conn, topic: u32, b: &Broadcast) -> bool {
        let _ = (conn, topic, b);
        true
    }

    /// The end of a loop turn (answers gathered during it go out).
    fn turn_end(&self, cx: &mut Cx<'_, Self::Shard>) {
        let _ = cx;
    }

    /// Once a second (its sessions' windows and expiries, waits past their
    /// deadline).
    fn sweep(&self, cx: &mut Cx<'_, Self::Shard>) {
        let _ = cx;
    }

    /// Adds the sizes of the tables it keeps on a shard (`/metrics`: each
    /// must come back down when what it is for ends).
    fn sizes(&self, me: &Self::Shard, sizes: &mut crate::metrics::TableSizes) {
        let _ = (me, sizes);
    }

    /// Seconds without a byte from a socket speaking `wire` before the
    /// sweep hands it to [`Protocol::idle`]: `None` for `--idle-timeout`.
    fn idle_after(&self, wire: Wire) -> Option<u32> {
        let _ = wire;
        None
    }

    /// WebSocket `key`, speaking `wire`, sent nothing for `quiet` seconds
    /// (past [`Protocol::idle_after`]): true when the protocol dealt with
    /// it (asked it whether it is there, or closed it), false for the
    /// engine to close it as idle.
    fn idle(&self, cx: &mut Cx<'_, Self::Shard>, key: usize, wire: Wire, quiet: u32) -> bool {
        let _ = (cx, key, wire, quiet);
        false
    }

    /// Whether it has work left over for the next turn at once (the loop
    /// then does not wait for events).
    fn behind(&self, me: &Self::Shard) -> bool {
        let _ = me;
        false
    }
}
