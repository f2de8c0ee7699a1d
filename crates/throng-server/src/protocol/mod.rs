//! The wire protocols the engine serves, one folder each: `phoenix/`
//! (Phoenix Channels, with its long-poll transport). A protocol is what
//! implements [`Protocol`](crate::engine::Protocol) over the engine; a new
//! one is a folder here and one more member of [`Protocols`].

pub(crate) mod phoenix;

/// Every protocol the server speaks, as the engine is built with it.
pub(crate) type Protocols = phoenix::Phoenix;
