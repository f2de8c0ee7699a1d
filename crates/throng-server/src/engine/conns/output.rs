//! Output: writing to connections, the bounded per-connection queue for what
//! the kernel refuses, and delivering a broadcast to a shard's subscribers.
//!
//! A broadcast's frame is written straight from the shared [`Broadcast`]:
//! no copy and no allocation per subscriber unless the kernel takes only
//! part of it, and then the queue holds an `Arc` and an offset, not bytes.

use std::io::{self, IoSlice, Write};
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Interest, Token};
use throng_protocol::frame::{encode_header, Opcode};
use throng_pubsub::Broadcast;

use throng_pubsub::presence::encode::{COUNT as PRESENCE_COUNT, DIFF as PRESENCE_DIFF};

use super::Conns;
use crate::budget;
use crate::engine::close::CloseReason;
use crate::engine::conn::{Chunk, Conn, Kind};
use crate::engine::outlet::{Outlet, SessionWork};
use crate::history::recovery::Hold;
use crate::metrics::ShardStats;
use crate::write::{write_some, write_some_vectored};

impl Conns {
    /// Appends a frame around `body` to the frames gathered for the
    /// connection being processed.
    pub fn frame_out(&mut self, op: Opcode, body: &[u8]) {
        encode_header(&mut self.reply, true, op, body.len(), None);
        self.reply.extend_from_slice(body);
        self.msgs_out += 1;
    }

    /// Writes the frames gathered for `key` in one syscall.
    pub fn flush_reply(&mut self, key: usize) {
        if !self.reply.is_empty() {
            let reply = std::mem::take(&mut self.reply);
            self.send(key, &reply);
            self.reply = reply;
            self.reply.clear();
        }
        if let Some(conn) = self.slab.get(key) {
            if let Kind::Closing { shut: false, .. } = conn.kind {
                self.try_shutdown(key);
            }
        }
    }

    /// Writes `bytes` now if nothing is queued, queueing what the kernel refuses.
    pub fn send(&mut self, key: usize, bytes: &[u8]) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        if conn.dead {
            return;
        }
        let mut written = 0;
        if !conn.queued() {
            match write_plain(&mut self.tls, key, &mut conn.sock, &[bytes]) {
                Ok(n) => written = n,
                Err(_) => {
                    self.doom(Outlet::Conn(key), CloseReason::Gone);
                    return;
                }
            }
            self.bytes_out += written as u64;
            self.watch_tls_backlog(key);
            if written == bytes.len() {
                return;
            }
        }
        self.enqueue(key, Chunk::owned(bytes[written..].to_vec()));
    }

    /// Writes one frame whose body is `head`, `shared`, `tail` (a presence
    /// state: `shared` is the same for every joiner of the interval), with
    /// one vectored write; what the kernel refuses is queued, `shared` as
    /// a reference, not a copy.
    pub fn send_shared(
        &mut self,
        key: usize,
        opcode: Opcode,
        head: &[u8],
        shared: &Arc<str>,
        tail: &[u8],
    ) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        if conn.dead {
            return;
        }
        let mut first = Vec::with_capacity(head.len() + 10);
        encode_header(
            &mut first,
            true,
            opcode,
            head.len() + shared.len() + tail.len(),
            None,
        );
        first.extend_from_slice(head);
        self.msgs_out += 1;
        let parts = [&first[..], shared.as_bytes(), tail];
        let mut written = 0;
        if !conn.queued() {
            match write_plain(&mut self.tls, key, &mut conn.sock, &parts) {
                Ok(n) => written = n,
                Err(_) => {
                    self.doom(Outlet::Conn(key), CloseReason::Gone);
                    return;
                }
            }
            self.bytes_out += written as u64;
            self.watch_tls_backlog(key);
        }
        for (i, part) in parts.iter().enumerate() {
            if written >= part.len() {
                written -= part.len();
                continue;
            }
            let chunk = match i {
                1 => Chunk::Text(shared.clone(), written),
                _ => Chunk::Owned(part[written..].to_vec(), 0),
            };
            written = 0;
            self.enqueue(key, chunk);
            if self.slab.get(key).is_none_or(|c| c.dead) {
                return;
            }
        }
    }

    pub(crate) fn enqueue(&mut self, key: usize, chunk: Chunk) {
        let max = self.settings.max_outbound;
        let conn = &mut self.slab[key];
        let len = chunk.rest().len();
        // What a closing connection is sent last (an error page, a close
        // frame) is small and ends it: no bound applies.
        let closing = matches!(conn.kind, Kind::Closing { .. });
        let extra = conn.extra();
        extra.out.push_back(chunk);
        extra.out_bytes += len;
        // A reader is slow when what waits *behind* the frame being written
        // passes the bound: one frame larger than the bound (a big message to
        // a socket with a small receive window) is not a slow reader.
        let front = extra.out.front().map_or(0, |c| c.rest().len());
        if !closing && extra.out_bytes - front > max {
            self.doom(Outlet::Conn(key), CloseReason::SlowReader);
            return;
        }
        // This reader is behind and the process holds more output than
        // its budget: it goes, not the readers that keep up. Behind: more
        // waits than the frame being written and this chunk. A reader that
        // reads each message as it comes holds those two at most when a
        // message is larger than its kernel buffers (16 KiB after `throng
        // tune --apply`): such a reader is not behind.
        let behind = extra.out_bytes.saturating_sub(front + len) > 0;
        if !closing && behind && budget::outbound_memory() > self.settings.max_outbound_total {
            self.doom(Outlet::Conn(key), CloseReason::OutboundBudget);
            return;
        }
        conn.watch_writable(&self.poll, key);
    }

    /// The kernel has room again: writes the queue, in batches of slices.
    pub fn on_writable(&mut self, key: usize) {
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        if conn.dead {
            return;
        }
        let Some(extra) = conn.extra.as_mut() else {
            return;
        };
        if let Some(tls) = &mut self.tls {
            match tls.flush(key, &mut conn.sock) {
                Ok(true) => {}
                Ok(false) => return,
                Err(_) => {
                    self.doom(Outlet::Conn(key), CloseReason::Gone);
                    return;
                }
            }
        }
        while !extra.out.is_empty() {
            let slices: Vec<IoSlice<'_>> = extra
                .out
                .iter()
                .take(64)
                .map(|c| IoSlice::new(c.rest()))
                .collect();
            let wrote = match &mut self.tls {
                None => conn.sock.write_vectored(&slices),
                Some(tls) => {
                    let parts: Vec<&[u8]> = slices.iter().map(|s| &s[..]).collect();
                    tls.write(key, &mut conn.sock, &parts)
                }
            };
            match wrote {
                Ok(0) => break,
                Ok(mut n) => {
                    self.bytes_out += n as u64;
                    extra.out_bytes -= n;
                    while n > 0 {
                        let front = extra
                            .out
                            .front_mut()
                            .expect("written bytes come from queued chunks");
                        let len = front.rest().len();
                        if n >= len {
                            n -= len;
                            extra.out.pop_front();
                        } else {
                            front.advance(n);
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.doom(Outlet::Conn(key), CloseReason::Gone);
                    return;
                }
            }
        }
        if self.tls.as_ref().is_some_and(|t| t.backlogged(key)) {
            // The last write's ciphertext waits for the next writable event.
            return;
        }
        extra.want_write = false;
        extra.out.shrink_to_fit();
        let _ = self
            .poll
            .reregister(&mut conn.sock, Token(key), Interest::READABLE);
        conn.trim();
        if let Kind::Closing { shut: false, .. } = conn.kind {
            self.try_shutdown(key);
        }
    }

    /// Delivers a broadcast to this shard's subscribers of its topic (a
    /// session's copy goes to its protocol after the event).
    pub fn deliver(&mut self, b: &Arc<Broadcast>) {
        self.deliver_where(b, |_, _| true);
    }

    /// [`Conns::deliver`], to the connections `keep(conn, topic index)`
    /// accepts only (a broadcast whose protocol chooses its recipients:
    /// `Protocol::delivers`); sessions get theirs.
    pub fn deliver_where(&mut self, b: &Arc<Broadcast>, keep: impl Fn(&Conn, u32) -> bool) {
        let Some(idx) = self.registry.find(&b.topic) else {
            return;
        };
        if b.offset != 0 && self.gap(idx, b) {
            return;
        }
        ShardStats::add(&self.stats.broadcasts, 1);
        let exclude = b
            .exclude
            .filter(|(shard, _)| *shard == self.id)
            .map(|(_, key)| key);
        let subs = std::mem::take(&mut self.registry.topics[idx as usize].subs);
        let sent_before = self.msgs_out;
        let mut sent = Sent::default();
        // Sockets recovering history: just replayed, or waiting for their read.
        let recovering = b.offset != 0 && self.recovery.active();
        for &key in &subs {
            let key = key as usize;
            if Some(key) == exclude {
                continue;
            }
            if b.member.is_some() && self.slab.get(key).is_some_and(|c| !keep(c, idx)) {
                continue;
            }
            if recovering {
                if self.recovery.skip(key, idx, b) {
                    continue;
                }
                match self.recovery.hold(key, idx, b) {
                    Hold::No => {}
                    Hold::Held => continue,
                    Hold::Overflow => {
                        self.doom(Outlet::of(key), CloseReason::SlowReader);
                        continue;
                    }
                }
            }
            self.send_to(key, b, &mut sent);
        }
        self.registry.topics[idx as usize].subs = subs;
        if sent.deflated > 0 {
            ShardStats::add(&self.stats.deflate_messages_out, sent.deflated);
            ShardStats::add(&self.stats.deflate_bytes_saved, sent.saved);
        }
        if recovering {
            // Past a replay's last message, live messages are new to it.
            self.recovery.passed(idx, b);
        }
        if b.event == PRESENCE_DIFF || b.event == PRESENCE_COUNT {
            ShardStats::add(&self.stats.presence_diffs_out, self.msgs_out - sent_before);
            ShardStats::add(&self.stats.presence_diff_bytes_out, sent.frame_bytes);
        }
    }

    /// A message of `topic`'s history did not reach this shard (its inbox
    /// was full): its subscribers here would skip it without knowing, so
    /// they are closed as slow readers before any later message reaches
    /// them; phoenix.js reconnects and rejoins with `since`, and recovers it.
    /// Whether history message `b` of topic `idx` is not the one after
    /// the last this shard got (an offset skipped, another epoch): then
    /// the topic's subscribers here are closed, as for a lost message
    /// ([`Conns::history_lost`]), and rejoin with `since`
    /// (`crate::history`).
    fn gap(&mut self, idx: u32, b: &Broadcast) -> bool {
        let t = &mut self.registry.topics[idx as usize];
        let (epoch, offset) = t.last;
        let gap = epoch != 0 && (b.epoch != epoch || b.offset > offset + 1);
        if epoch == 0 || b.epoch != epoch || b.offset > offset {
            t.last = (b.epoch, b.offset);
        }
        if gap {
            let topic = t.name.clone();
            self.history_lost(&topic);
        }
        gap
    }

    /// A replay of topic `idx` reached `(epoch, last)`: when the shard
    /// knows no position of the topic yet, this one, so a live message
    /// that skips past it is a gap ([`Conns::gap`]). Without it, a topic
    /// whose subscribers had all gone (`last` back to none) would take its
    /// next live message as a start, and a message published between the
    /// read and a subscription not yet delivering (a half-open connection
    /// to Redis not yet noticed) would be skipped without a word.
    ///
    /// A position the shard knows is never moved forward by a replay: it
    /// is what the topic's other subscribers here got live, and a replay
    /// that read further (a message this node missed while its Redis
    /// connection was down) would hide their gap: the next live message
    /// would pass as the one after, and they would miss the ones between
    /// without a word (found by the Redis partition fault test). Left
    /// behind, that next live message is a gap and closes them: they
    /// rejoin with `since` and recover.
    pub fn replay_reached(&mut self, idx: u32, epoch: u64, last: u64) {
        let t = &mut self.registry.topics[idx as usize];
        if t.last.0 == 0 {
            t.last = (epoch, last);
        }
    }

    pub fn history_lost(&mut self, topic: &str) {
        let Some(idx) = self.registry.find(topic) else {
            return;
        };
        let subs = self.registry.topics[idx as usize].subs.clone();
        for key in subs {
            self.doom(Outlet::of(key as usize), CloseReason::SlowReader);
        }
    }
}

/// One write of plaintext `parts` (one, or a few written as one vectored
/// write) to connection `key`: to its socket, or through its TLS session
/// (which may take less, at most `tls/session.rs`'s `WRITE_MAX`);
/// `WouldBlock` is zero bytes.
pub(crate) fn write_plain(
    tls: &mut Option<crate::tls::session::Tls>,
    key: usize,
    sock: &mut TcpStream,
    parts: &[&[u8]],
) -> io::Result<usize> {
    match tls {
        None => match parts {
            [one] => write_some(sock, one),
            _ => write_some_vectored(
                sock,
                &parts
                    .iter()
                    .map(|p| IoSlice::new(p))
                    .collect::<smallvec::SmallVec<[IoSlice<'_>; 4]>>(),
            ),
        },
        Some(tls) => match tls.write(key, sock, parts) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            other => other,
        },
    }
}

impl Conns {
    /// After a write through TLS: ciphertext the kernel refused waits in
    /// the session, and the socket is watched for room as for queued output.
    pub(crate) fn watch_tls_backlog(&mut self, key: usize) {
        if !self.tls.as_ref().is_some_and(|t| t.backlogged(key)) {
            return;
        }
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        conn.watch_writable(&self.poll, key);
    }
}

/// What one broadcast's deliveries added up to, for its counters.
#[derive(Default)]
pub(crate) struct Sent {
    /// Frame bytes handed to sockets (or queued for them).
    pub frame_bytes: u64,
    /// Compressed deliveries (permessage-deflate) and the bytes they saved.
    pub deflated: u64,
    pub saved: u64,
}

impl Conns {
    /// Delivers `b` to subscriber `key`: a session's copy goes to its
    /// protocol after the event; a WebSocket gets the compressed copy if it negotiated
    /// deflate with the full window (made once, by the first delivery that
    /// needs it), else the plain one, written now (through TLS when on) or
    /// queued behind what it has queued. The one path every broadcast
    /// delivery takes (`deliver`'s loop, a history replay's hand-over).
    #[inline]
    pub(crate) fn send_to(&mut self, key: usize, b: &Arc<Broadcast>, sent: &mut Sent) {
        if let Outlet::Session(idx) = Outlet::of(key) {
            // Its protocol buffers it, after this event.
            self.sessions.push(SessionWork::Deliver(idx, Arc::clone(b)));
            return;
        }
        let Some(conn) = self.slab.get_mut(key) else {
            return;
        };
        let Kind::Ws { wire, deflate, .. } = conn.kind else {
            return;
        };
        if conn.dead {
            return;
        }
        let (bytes, z) = if deflate == 15 {
            let Some((bytes, z)) = b.frame_deflated(wire) else {
                return;
            };
            if z {
                sent.deflated += 1;
                sent.saved += b.frame(wire).map_or(0, |p| p.len() - bytes.len()) as u64;
            }
            (bytes, z)
        } else {
            let Some(bytes) = b.frame(wire) else {
                return;
            };
            (bytes, false)
        };
        self.msgs_out += 1;
        sent.frame_bytes += bytes.len() as u64;
        if conn.queued() {
            return self.enqueue(key, Chunk::Shared(b.clone(), wire, z, 0));
        }
        match write_plain(&mut self.tls, key, &mut conn.sock, &[bytes]) {
            Ok(n) => {
                self.bytes_out += n as u64;
                if self.tls.is_some() {
                    self.watch_tls_backlog(key);
                }
                if n < bytes.len() {
                    self.enqueue(key, Chunk::Shared(b.clone(), wire, z, n));
                }
            }
            Err(_) => self.doom(Outlet::Conn(key), CloseReason::Gone),
        }
    }
}
