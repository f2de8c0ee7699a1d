//! Every reader of outside input as one function of bytes, for the fuzzer
//! (`fuzz/`, built with the `fuzzing` feature) and for the corpus replay
//! test below (every build's tests). Each target lives in its own file
//! and says what it asserts beyond "no panic"; [`TARGETS`] lists them, and
//! `fuzz/Cargo.toml` has one binary of the same name for each (a test
//! checks both lists and the corpus folders agree).
//!
//! | target | what it reads | file |
//! |---|---|---|
//! | `frame_decoder` | WebSocket frames | `frames.rs` |
//! | `message_parser` | Phoenix messages, both serializers | `frames.rs` |
//! | `phoenix_socket` | a socket's whole input: frames, deflate, the Phoenix socket with channels | `socket.rs` |
//! | `http_request` | a request head, an upgrade, a long-poll request | `http.rs` |
//! | `longpoll` | a long-poll POST body, its answer, its forward | `longpoll.rs` |
//! | `api_body` | the server API's JSON bodies and queries | `api.rs` |
//! | `config_toml` | a `--config` file, as serve and check-config read it | `config.rs` |
//! | `hook_answer` | an app backend's answer to a hook | `hooks.rs` |
//! | `redis_messages` | what a node reads from Redis: envelopes, control, presence, forwards | `backplane.rs` |
//! | `inflate` | permessage-deflate: the shard's bounded inflater, the negotiation | `inflate.rs` |
//! | `pusher_frame` | the Pusher protocol's frames, API bodies, names, signatures | `pusher.rs` |
//!
//! Adding a target: a file
//! here with `pub fn name(data: &[u8])` that panics when an invariant
//! breaks; a row in [`TARGETS`]; a `fuzz/fuzz_targets/<name>.rs` calling it
//! and its `[[bin]]` in `fuzz/Cargo.toml`; a few seeds in
//! `fuzz/corpus/<name>/` (then `cargo fuzz cmin`); a row in
//! `fuzz/README.md`. CI then replays its corpus and fuzzes it
//! (`scripts/fuzz.sh`).

mod api;
mod backplane;
mod config;
mod frames;
mod hooks;
mod http;
mod inflate;
mod longpoll;
mod pusher;
mod socket;

pub use api::api_body;
pub use backplane::redis_messages;
pub use config::config_toml;
pub use frames::{frame_decoder, message_parser};
pub use hooks::hook_answer;
pub use http::http_request;
pub use inflate::inflate;
pub use longpoll::longpoll;
pub use pusher::pusher_frame;
pub use socket::phoenix_socket;

/// A fuzz target: its name (its binary's and corpus folder's) and its
/// function.
pub type Target = (&'static str, fn(&[u8]));

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    ("frame_decoder", frame_decoder),
    ("message_parser", message_parser),
    ("phoenix_socket", phoenix_socket),
    ("http_request", http_request),
    ("longpoll", longpoll),
    ("api_body", api_body),
    ("config_toml", config_toml),
    ("hook_answer", hook_answer),
    ("redis_messages", redis_messages),
    ("inflate", inflate),
    ("pusher_frame", pusher_frame),
];

#[cfg(test)]
mod tests;
