//! The Phoenix Channels protocol.

pub mod chat;
pub mod echo;
mod hooks;
pub(crate) mod longpoll;
pub mod relay;
mod shard;
pub(crate) mod socket;
