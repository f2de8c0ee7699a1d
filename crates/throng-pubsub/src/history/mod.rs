//! Topic history: the last messages of a topic, each with its position,
//! so that a client that lost its connection rejoins "since" the last
//! message it saw and gets what it missed (recovery), or learns that it
//! cannot (`recovered: false`) and re-fetches.
//!
//! As centrifuge's brokers (`broker_memory.go`, `broker_redis.go`) keep a
//! stream per channel with an offset and an epoch, a topic's history is a
//! [`Position`] per message: an offset that grows by one per message and
//! an epoch that changes whenever the history was lost (a new process, a
//! topic kept past its ttl), so two positions compare only within one
//! epoch and a client never skips messages silently.
//!
//! The position travels as the message's `ref` ([`Position::to_ref`]),
//! `<epoch as 16 hex digits>.<offset>`: phoenix.js makes its refs as
//! decimal integers, so a position can never be taken for the ref of a
//! reply the client waits for, and phoenix.js hands a broadcast's ref to
//! `channel.on(event, (payload, ref) => ...)` as is.
//!
//! [`MemoryHistory`] keeps each topic's history as a ring in this process,
//! bounded by the topic rule's size and ttl and a process-wide byte budget.
//! [`RedisHistory`] keeps it in Redis Streams for a cluster (`redis.rs`,
//! its keys and scripts in `scripts.rs`). Both are a [`HistoryStore`] and
//! pass one [`conformance`] suite (`tests/history_stores.rs`).

pub mod conformance;
mod memory;
pub mod redis;
mod scripts;

use std::sync::Arc;

pub use crate::position::Position;
use std::time::Duration;

use throng_protocol::OwnedPayload;

pub use memory::{HistoryStats, MemoryHistory};
pub use redis::RedisHistory;

/// The one metric both stores keep (only one is in use).
pub static PUBLISHED: crate::metrics::Metric = crate::metrics::Metric::counter(
    "throng_history_published_total",
    "Broadcasts given a position in their topic's history.",
);

/// What every history store does, with its answers given to callbacks (a
/// store in memory answers at once, one in Redis on its thread): what the
/// [`conformance`] suite checks. The server calls each store's own
/// methods, which add what only it needs (the lock a memory read runs
/// under; the subscriber a Redis publish excludes).
pub trait HistoryStore: Send + Sync {
    /// Gives the next message of `topic` its position and keeps it (at
    /// most `size` messages, forgotten `ttl` after the last).
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        topic: &Arc<str>,
        size: usize,
        ttl: Duration,
        event: &str,
        payload: OwnedPayload,
        done: Box<dyn FnOnce(Result<Position, String>) + Send>,
    );
    /// The messages after `since`, at most `limit`, for a rule keeping
    /// `size` (as [`MemoryHistory::read`]).
    fn fetch(
        &self,
        topic: &str,
        since: Option<&str>,
        limit: usize,
        size: usize,
        then: Box<dyn FnOnce(Replay) + Send>,
    );
}

/// One message kept in a topic's history.
#[derive(Debug)]
pub struct Entry {
    pub offset: u64,
    pub event: Box<str>,
    pub payload: OwnedPayload,
}

impl Entry {
    /// What it counts against the byte budget: its text and its place in
    /// the ring.
    pub fn bytes(&self) -> usize {
        let payload = match &self.payload {
            OwnedPayload::Json(s) => s.len(),
            OwnedPayload::Binary(b) => b.len(),
        };
        ENTRY_OVERHEAD + self.event.len() + payload
    }
}

/// Bytes an entry costs beyond its event and payload (the `Arc`, the
/// entry, the ring's slot), as counted against the byte budget.
pub const ENTRY_OVERHEAD: usize = 80;

/// What a read of a topic's history found.
#[derive(Debug, Default)]
pub struct Replay {
    /// Every message after the position asked for is here (or, with a
    /// limit, the first of them): none was lost.
    pub recovered: bool,
    /// The epoch of the topic's history now (0: the topic has none).
    pub epoch: u64,
    /// The messages after the position, oldest first.
    pub messages: Vec<Arc<Entry>>,
    /// The offset of the topic's newest message (0: none): a subscriber
    /// that got `messages` must skip the live messages up to it.
    pub last: u64,
    /// The store could not be read now (Redis away, or not answering in
    /// time): nothing is known of what was lost, so the join that asked
    /// is refused and tried again rather than told `recovered: false`.
    pub unavailable: bool,
}

impl Replay {
    /// The answer of a read the store could not make now.
    pub fn unavailable() -> Replay {
        Replay {
            unavailable: true,
            ..Replay::default()
        }
    }

    /// The ref of `entry`, in this read's epoch.
    pub fn ref_of(&self, entry: &Entry) -> String {
        Position {
            epoch: self.epoch,
            offset: entry.offset,
        }
        .to_ref()
    }
}
