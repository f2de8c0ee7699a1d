//! The graceful drain (SIGTERM, or the supervisor stopping or replacing a
//! worker): [`Node::drain`](crate::Node::drain) marks the node draining and
//! wakes every shard; each shard then
//! 1. accepts what is already queued on its listener and closes the
//!    listener, so the kernel sends new connections to the other processes
//!    on the port (`SO_REUSEPORT`);
//! 2. closes its WebSockets in batches spread evenly over the drain window
//!    ([`Node::drain_window`](crate::Node::drain_window): one second per
//!    thousand sockets open on the node, at most `--drain-seconds`, so a
//!    few sockets close at once; a step every [`STEP`], each closing its
//!    share of what is still open for the time left), each with close code 1012 (Service Restart) after
//!    whatever was queued for it, so phoenix.js reconnects (elsewhere) a
//!    few at a time instead of all at once, and every client keeps getting
//!    broadcasts until its own turn;
//! 3. at the end of the window closes what is left (HTTP connections
//!    included), waits up to the close linger for the clients' FINs, and
//!    ends its thread; a shard with nothing left ends at once. The process
//!    exits when every shard has ended.
//!
//! Connections the kernel queued on a listener after its last accept and
//! before it closed are reset by the kernel: the one race a
//! `SO_REUSEPORT` handover has without a BPF steering program.

use std::time::{Duration, Instant};

use super::Shard;
use crate::engine::close::CloseReason;
use crate::engine::conn::Kind;
use crate::engine::Protocol;
use crate::engine::CLOSE_LINGER;

/// How often a draining shard closes a batch.
pub(super) const STEP: Duration = Duration::from_millis(100);

/// A shard's drain in progress.
pub(crate) struct Draining {
    started: Instant,
    last_step: Instant,
    /// Closes owed but not made yet (a fraction of a socket per step when
    /// few are open), so a handful of sockets spread over the window too.
    owed: f64,
}

impl<P: Protocol> Shard<P> {
    /// Called every loop turn. Starts or continues the drain once the node
    /// drains; true when this shard is done and its loop should end.
    pub(super) fn drain_turn(&mut self) -> bool {
        let Some(started) = self.node.drain_started() else {
            return false;
        };
        let now = Instant::now();
        let d = match &mut self.draining {
            Some(d) => d,
            None => {
                self.stop_accepting();
                self.draining.insert(Draining {
                    started,
                    last_step: started,
                    owed: 0.0,
                })
            }
        };
        if now.duration_since(d.last_step) < STEP {
            return false;
        }
        let step = now.duration_since(d.last_step);
        d.last_step = now;
        let window = self.node.drain_window();
        let elapsed = now.duration_since(d.started);
        let open = self
            .conns
            .stats
            .websockets
            .load(std::sync::atomic::Ordering::Relaxed) as usize;
        let batch = match window.checked_sub(elapsed) {
            Some(left) if !left.is_zero() => {
                // This step's share of what is open, for the time left.
                d.owed += (open as f64) * step.as_secs_f64() / left.as_secs_f64();
                let n = d.owed.floor();
                d.owed -= n;
                n as usize
            }
            _ => usize::MAX,
        };
        self.close_batch(batch, elapsed >= window);
        // Done once nothing is left (at once for an idle shard), or when
        // the last closes have had their linger.
        let linger = Duration::from_secs(CLOSE_LINGER as u64 + 2);
        self.conns.slab.is_empty() || elapsed >= window + linger
    }

    /// Takes what the kernel queued on the listener, then closes it.
    fn stop_accepting(&mut self) {
        if self.listener.is_none() {
            return;
        }
        self.accept();
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        self.accept_retry = false;
    }

    /// Closes up to `n` WebSockets with 1012 (and, at the end, every
    /// connection that is not closing yet).
    fn close_batch(&mut self, n: usize, end: bool) {
        let mut ws = Vec::new();
        let mut http = Vec::new();
        for (key, conn) in self.conns.slab.iter() {
            if conn.dead {
                continue;
            }
            match conn.kind {
                Kind::Ws { .. } if ws.len() < n => ws.push(key),
                Kind::Http if end => http.push(key),
                _ => {}
            }
        }
        let node = &*self.node;
        for key in ws {
            self.conns.close(node, key, CloseReason::Drain);
        }
        for key in http {
            self.conns.close(node, key, CloseReason::Shutdown);
        }
    }
}
