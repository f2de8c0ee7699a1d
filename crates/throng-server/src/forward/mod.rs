//! A long-poll request on its way to its session, and its answer on the way
//! back, as plain values: the session [`Token`](token::Token) a client carries (it names
//! the node, shard and session), the forwarded [`Request`] and [`Answer`]
//! and their layout between nodes (`wire.rs`), and the `{"status":N}` body
//! of an answer that needs no session.
//!
//! The sessions themselves are `crate::protocol::phoenix::longpoll`'s (it re-exports these);
//! these values are below the node, whose shard inboxes and backplane
//! messages carry them (`crate::node`, `crate::control`). So are the
//! Pusher HTTP API's (`pusher.rs`): a trigger on its way to the shard of
//! the socket it leaves out, and an answer back to the shard holding its
//! request.

pub(crate) mod pusher;
pub(crate) mod token;
pub(crate) mod wire;

pub(crate) use wire::{Answer, Request};

/// `{"status":N}`.
pub(crate) fn status_body(status: u16) -> Vec<u8> {
    format!("{{\"status\":{status}}}").into_bytes()
}
