//! # throng-protocol
//!
//! Everything throng puts on the wire, with no I/O: the server and the load
//! generator both build on it.
//!
//! - [`frame`]: RFC 6455 frames, decoded in place from a caller's buffer
//!   (`Ok(None)` = incomplete, `Err` = never valid, with its close code).
//! - [`deflate`]: permessage-deflate (RFC 7692): negotiation, one
//!   message compressed or inflated at a time, no state kept between them.
//! - [`handshake`]: the HTTP upgrade, server and client side.
//! - [`message`]: Phoenix Channels wire types ([`Message`], [`Payload`],
//!   [`Ref`], [`Vsn`]).
//! - [`serializer`]: Phoenix's V1 and V2 JSON serializers (and V2's binary
//!   frames), byte-compatible with `phoenix.js` and Phoenix itself.
//! - [`pusher`]: the Pusher Channels protocol's wire layer: client and
//!   server frames, channel names, socket ids, the channel, user, HTTP API
//!   and webhook signatures, and the HTTP API's bodies, byte-compatible
//!   with `pusher-js` and the Pusher server SDKs.
//! - [`wire`]: [`Wire`], the encoding a socket speaks (a Phoenix serializer,
//!   or Pusher), which picks the bytes of a broadcast it is sent.
//!
//! Design: decoding borrows from the input (no allocation for the common
//! case); encoding appends to a caller's `Vec<u8>` so a broadcast can be
//! encoded once per serializer and the bytes shared by every subscriber.

#![forbid(unsafe_code)]

pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod message;
pub mod pusher;
pub mod serializer;
pub mod wire;

pub use frame::{close_code, FrameError, Opcode, Role};
pub use message::{event, Message, OwnedPayload, Payload, Ref, RefBuf, Vsn};
pub use serializer::{DecodeError, EncodeError};
pub use wire::{Family, Wire, PUSHER_TOPIC_PREFIX};
