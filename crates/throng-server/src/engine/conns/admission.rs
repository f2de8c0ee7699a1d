//! Admission at accept (`--max-connections`, `--max-connections-per-ip`,
//! counted by the node's [`Admission`](crate::limits::Admission)) and the
//! HTTP head deadline (`--handshake-timeout`), both for connections that
//! have not become WebSockets yet: what a client must get through before it
//! costs the server more than a slab entry.
//!
//! A refused connection gets a 503 and is closed at once; it never enters
//! the slab. When addresses are counted, each admitted connection's address
//! is kept in a side table indexed like the slab (`Conns::peer_ips`), only
//! then, because a reset socket can no longer tell its peer's address.

use std::io::{Read, Write};
use std::net::IpAddr;

use mio::net::TcpStream;

use super::Conns;
use crate::engine::conn::Kind;
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
                let counter = match refusal {
                    Refusal::Total | Refusal::Sessions => &self.stats.refused_total_cap,
                    Refusal::PerIp => &self.stats.refused_per_ip,
                };
                ShardStats::add(counter, 1);
                let text = String::from_utf8_lossy(refusal.response());
                let body = text.rsplit("\r\n").next().unwrap_or_default();
                node.refusals
                    .note(Reason::Capacity, "connection refused (503)", &body);
                // One write to a fresh socket fits its buffer. Reading what
                // the client already sent keeps the close a FIN, not a reset
                // that could destroy the 503 before the client reads it.
                let _ = sock.write(refusal.response());
                let _ = sock.shutdown(std::net::Shutdown::Write);
                let mut sink = [0u8; 4096];
                let _ = sock.read(&mut sink);
                false
            }
        }
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
}
