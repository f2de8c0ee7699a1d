//! The Phoenix message layer, not only frames: arbitrary bytes through the
//! frame decoder (with the shard's bound on a message in progress),
//! `ws::on_frame`, the serializer, the ref bound and the Phoenix socket state
//! machine with real channels (`throng_server::fuzz::phoenix_socket`, which
//! asserts its invariants: channel cap, join budget, message bound, every
//! message sent readable by the socket's own serializer).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    throng_server::fuzz::phoenix_socket(data);
});
