//! Feeds arbitrary bytes to the frame decoder as a server and as a client,
//! whole and split at every point a reader might see: it must never panic,
//! and a split input must decode to the same frames as the whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use throng_protocol::frame::{decode_frame, frame_len_hint, parse_close, Opcode, Role};

fn frames(mut buf: Vec<u8>, role: Role) -> (Vec<(bool, Opcode, Vec<u8>)>, bool) {
    let mut out = Vec::new();
    loop {
        match decode_frame(&mut buf, role, 1 << 16) {
            Ok(Some(f)) => {
                if f.opcode == Opcode::Close {
                    let _ = parse_close(&buf[f.payload.clone()]);
                }
                if let Some(hint) = frame_len_hint(&buf) {
                    assert_eq!(hint, f.consumed);
                }
                out.push((f.fin, f.opcode, buf[f.payload.clone()].to_vec()));
                buf.drain(..f.consumed);
            }
            Ok(None) => return (out, false),
            Err(_) => return (out, true),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    for role in [Role::Server, Role::Client] {
        let whole = frames(data.to_vec(), role);
        // Decoding a prefix never yields a frame the whole input does not.
        let cut = data.len() / 2;
        let (prefix, _) = frames(data[..cut].to_vec(), role);
        assert!(prefix.len() <= whole.0.len());
        for (a, b) in prefix.iter().zip(whole.0.iter()) {
            assert_eq!(a, b);
        }
    }
});
