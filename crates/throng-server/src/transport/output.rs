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

use super::conn::{Chunk, Kind};
use super::outlet::Outlet;
use super::Conns;
use crate::close::CloseReason;
use crate::metrics::ShardStats;

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
            if let Kind::Closing { shut: false } = conn.kind {
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
            match write_some(&mut conn.sock, bytes) {
                Ok(n) => written = n,
                Err(_) => {
                    self.doom(Outlet::Ws(key), CloseReason::Gone);
                    return;
                }
            }
            self.bytes_out += written as u64;
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
            let slices = parts.map(IoSlice::new);
            loop {
                match conn.sock.write_vectored(&slices) {
                    Ok(n) => written = n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        self.doom(Outlet::Ws(key), CloseReason::Gone);
                        return;
                    }
                }
                break;
            }
            self.bytes_out += written as u64;
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

    fn enqueue(&mut self, key: usize, chunk: Chunk) {
        let max = self.max_outbound;
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
            self.doom(Outlet::Ws(key), CloseReason::SlowReader);
            return;
        }
        // This reader is behind and the process holds more output than
        // its budget: it goes, not the readers that keep up. Behind: more
        // waits than the frame being written and this chunk. A reader that
        // reads each message as it comes holds those two at most when a
        // message is larger than its kernel buffers (16 KiB after `throng
        // tune --apply`): such a reader is not behind.
        let behind = extra.out_bytes.saturating_sub(front + len) > 0;
        if !closing && behind && super::budget::outbound_memory() > self.max_outbound_total {
            self.doom(Outlet::Ws(key), CloseReason::OutboundBudget);
            return;
        }
        if !extra.want_write {
            extra.want_write = true;
            let _ = self.poll.reregister(
                &mut conn.sock,
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            );
        }
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
        while !extra.out.is_empty() {
            let slices: Vec<IoSlice<'_>> = extra
                .out
                .iter()
                .take(64)
                .map(|c| IoSlice::new(c.rest()))
                .collect();
            match conn.sock.write_vectored(&slices) {
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
                    self.doom(Outlet::Ws(key), CloseReason::Gone);
                    return;
                }
            }
        }
        extra.want_write = false;
        extra.out.shrink_to_fit();
        let _ = self
            .poll
            .reregister(&mut conn.sock, Token(key), Interest::READABLE);
        conn.trim();
        if let Kind::Closing { shut: false } = conn.kind {
            self.try_shutdown(key);
        }
    }

    /// Delivers a broadcast to this shard's subscribers of its topic (a
    /// long-poll session's copy waits in its buffer).
    pub fn deliver(&mut self, b: &Arc<Broadcast>) {
        let Some(idx) = self.registry.find(&b.topic) else {
            return;
        };
        ShardStats::add(&self.stats.broadcasts, 1);
        let exclude = b
            .exclude
            .filter(|(shard, _)| *shard == self.id)
            .map(|(_, key)| key);
        let subs = std::mem::take(&mut self.registry.topics[idx as usize].subs);
        let sent_before = self.msgs_out;
        let mut frame_bytes = 0u64;
        // Sockets that just got this message in a history replay.
        let replayed = b.offset != 0 && !self.replayed.is_empty();
        for &key in &subs {
            let key = key as usize;
            if Some(key) == exclude {
                continue;
            }
            if replayed
                && self
                    .replayed
                    .get(&(key, idx))
                    .is_some_and(|&w| b.offset <= w)
            {
                continue;
            }
            if let Outlet::LongPoll(idx) = Outlet::of(key) {
                self.lp_deliver(idx, b);
                continue;
            }
            let Some(conn) = self.slab.get_mut(key) else {
                continue;
            };
            let Kind::Ws { vsn, .. } = conn.kind else {
                continue;
            };
            if conn.dead {
                continue;
            }
            let Some(bytes) = b.frame(vsn) else {
                continue;
            };
            self.msgs_out += 1;
            frame_bytes += bytes.len() as u64;
            if conn.queued() {
                self.enqueue(key, Chunk::Shared(b.clone(), vsn, 0));
                continue;
            }
            match write_some(&mut conn.sock, bytes) {
                Ok(n) => {
                    self.bytes_out += n as u64;
                    if n < bytes.len() {
                        self.enqueue(key, Chunk::Shared(b.clone(), vsn, n));
                    }
                }
                Err(_) => self.doom(Outlet::Ws(key), CloseReason::Gone),
            }
        }
        self.registry.topics[idx as usize].subs = subs;
        if replayed {
            // Past a replay's last message, live messages are new to it.
            let offset = b.offset;
            self.replayed.retain(|&(_, t), w| t != idx || *w > offset);
        }
        if b.event == PRESENCE_DIFF || b.event == PRESENCE_COUNT {
            ShardStats::add(&self.stats.presence_diffs_out, self.msgs_out - sent_before);
            ShardStats::add(&self.stats.presence_diff_bytes_out, frame_bytes);
        }
    }

    /// A message of `topic`'s history did not reach this shard (its inbox
    /// was full): its subscribers here would skip it without knowing, so
    /// they are closed as slow readers before any later message reaches
    /// them; phoenix.js reconnects and rejoins with `since`, and recovers it.
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

/// One `write`, mapping `WouldBlock` to zero bytes.
pub(crate) fn write_some(sock: &mut TcpStream, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match sock.write(bytes) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}
