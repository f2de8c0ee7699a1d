//! `throng_server::fuzz::inflate`: what it reads and asserts is in its module
//! docs (`crates/throng-server/src/fuzz/`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    throng_server::fuzz::inflate(data);
});
