//! Admission at accept (`--max-connections`, `--max-connections-per-ip`,
//! counted by the node's [`Admission`](crate::limits::Admission)) and the
//! HTTP head deadline (`--handshake-timeout`), both for connections that
//! have not become WebSockets yet: what a client must get through before it
//! costs the server more than a slab entry.
//!
//! Once through, a protocol that accepts its upgrade makes it a socket
//! ([`Conns::open_websocket`]).
//!
//! A refused connection gets a 503 and is closed at once; it never enters
//! the slab. When addresses are counted, each admitted connection's address
//! is kept in a side table indexed like the slab (`Conns::peer_ips`), only
//! then, because a reset socket can no longer tell its peer's address.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::sync::Arc;

use mio::net::TcpStream;
use throng_protocol::Wire;

use super::Conns;
use crate::channel::ConnectInfo;
use crate::engine::conn::{Kind, Mark};
use crate::limits::Refusal;
use crate::metrics::ShardStats;
use crate::node::Node;
use crate::refusals::Reason;

/// The answer to a request whose head took too long.
const TIMEOUT_RESPONSE: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

impl Conns {
    /// Counts a new connection from `ip` that will be slab entry `key`, or
    /// refuses it with a 503 and closes it (returns false).
    pub(crate) fn admit(
        &mut self,
        node: &Node,
        sock: &mut TcpStream,
        ip: IpAddr,
        key: usize,
    ) -> bool {
        match node.admission.admit(ip) {
            Ok(()) => {
                if node.admission.per_ip() {
                    if self.peer_ips.len() <= key {
                        self.peer_ips.resize(key + 1, None);
                    }
                    self.peer_ips[key] = Some(ip);
                }
                true
            }
            Err(refusal) => {
                self.refuse(node, sock, refusal);
                false
            }
        }
    }

    /// Answers a connection refused at accept with its 503, and lets it
    /// go: counted, logged (rate-limited), never in the slab.
    pub(crate) fn refuse(&mut self, node: &Node, sock: &mut TcpStream, refusal: Refusal) {
        let counter = match refusal {
            Refusal::Total | Refusal::Sessions => &self.stats.refused_total_cap,
            Refusal::PerIp => &self.stats.refused_per_ip,
            Refusal::Memory => &self.stats.refused_memory,
            Refusal::Files => &self.stats.refused_files,
        };
        ShardStats::add(counter, 1);
        let text = String::from_utf8_lossy(refusal.response());
        let body = text.rsplit("\r\n").next().unwrap_or_default();
        node.refusals
            .note(Reason::Capacity, "connection refused (503)", &body);
        // One write to a fresh socket fits its buffer. Reading what the
        // client already sent keeps the close a FIN, not a reset that could
        // destroy the 503 before the client reads it.
        let _ = sock.write(refusal.response());
        let _ = sock.shutdown(std::net::Shutdown::Write);
        let mut sink = [0u8; 4096];
        let _ = sock.read(&mut sink);
    }

    /// Un-counts connection `key`, being removed.
    pub(crate) fn release(&mut self, node: &Node, key: usize) {
        let ip = self.peer_ips.get_mut(key).and_then(Option::take);
        node.admission.release(ip);
    }

    /// The sweep's verdict on an HTTP connection quiet for `quiet` seconds
    /// (since accept or its last complete request: reads do not reset it):
    /// true when past the head deadline. Answers 408 if a head had begun.
    pub(crate) fn handshake_expired(&mut self, key: usize, quiet: u32, deadline: u32) -> bool {
        if quiet < deadline {
            return false;
        }
        let Some(conn) = self.slab.get_mut(key) else {
            return false;
        };
        debug_assert_eq!(conn.kind, Kind::Http);
        let started = conn.extra.as_ref().is_some_and(|e| !e.input.is_empty());
        if started && !conn.queued() {
            let r = [TIMEOUT_RESPONSE];
            let _ = super::output::write_plain(&mut self.tls, key, &mut conn.sock, &r);
        }
        // Counted by the close (`CloseReason::HandshakeTimeout`).
        true
    }

    /// The protocol accepted the upgrade of connection `key`: its `101`
    /// goes out, and from now on it is a socket speaking `wire` (with
    /// permessage-deflate's window bits `deflate`, 0 without), which
    /// connected with `connect`. False if the connection is gone.
    pub(crate) fn open_websocket(
        &mut self,
        key: usize,
        response: &[u8],
        wire: Wire,
        deflate: u8,
        connect: Option<ConnectInfo>,
    ) -> bool {
        let open = self.open_websocket_gathered(key, response, wire, deflate, connect);
        self.flush_reply(key);
        open && self.slab.get(key).is_some_and(|c| !c.dead)
    }

    /// As [`Conns::open_websocket`], but the `101` is gathered with the
    /// frames for `key` and written with them by the caller's
    /// [`Conns::flush_reply`]: a protocol that greets its socket (Pusher's
    /// `pusher:connection_established`) does so in the same write, one
    /// syscall per connect instead of two.
    pub(crate) fn open_websocket_gathered(
        &mut self,
        key: usize,
        response: &[u8],
        wire: Wire,
        deflate: u8,
        connect: Option<ConnectInfo>,
    ) -> bool {
        let now = self.now;
        let Some(conn) = self.slab.get_mut(key).filter(|c| !c.dead) else {
            return false;
        };
        conn.last_active = now;
        conn.kind = Kind::Ws {
            wire,
            deflate,
            mark: Mark::None,
        };
        conn.socket.connect = connect.map(Arc::new);
        // The 101 before any frame gathered for it.
        self.reply.splice(0..0, response.iter().copied());
        if deflate != 0 {
            ShardStats::add(&self.stats.deflate_sockets, 1);
        }
        ShardStats::add(&self.stats.websockets, 1);
        true
    }
}
