//! The node's outbound memory budget (`--max-outbound-total-bytes`): what
//! the process holds for output its clients have not taken yet, summed over
//! every connection, bounded as a whole as each connection's queue is by
//! `--max-outbound-bytes`.
//!
//! It counts real memory, not bytes owed: a broadcast queued for 19,000
//! slow subscribers is one allocation (every queue holds an `Arc` of it),
//! so it counts once, through `throng_pubsub::live_bytes` (every broadcast
//! alive in the process: queued, or in flight between shards). Output of a
//! connection alone (replies, pushes, pages the kernel refused) counts its
//! bytes, here, from the moment it is queued until its chunk is dropped.
//!
//! When the total is over the budget, a connection that needs to queue
//! more (one whose reader is behind: a reader that keeps up never queues)
//! is cut: its queue is dropped and it gets close code 1013 (Try Again
//! Later), counted in `throng_outbound_budget_closes_total`. Readers that
//! keep up are never affected.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Bytes of `Chunk::Owned` output queued in this process.
static OWNED: AtomicUsize = AtomicUsize::new(0);

/// The process's outbound memory: queued output of its own and live broadcasts.
pub(crate) fn outbound_memory() -> usize {
    OWNED.load(Relaxed) + throng_pubsub::live_bytes()
}

/// A connection's own output was queued.
pub(crate) fn owned_queued(bytes: usize) {
    OWNED.fetch_add(bytes, Relaxed);
}

/// A connection's own output left the queue (written, or dropped).
pub(crate) fn owned_released(bytes: usize) {
    OWNED.fetch_sub(bytes, Relaxed);
}
