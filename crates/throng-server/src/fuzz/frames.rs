//! Targets `frame_decoder` and `message_parser`: the WebSocket frame codec
//! and the Phoenix serializers on their own (`throng-protocol`).
//!
//! - `frame_decoder`: arbitrary bytes through `decode_frame` as a server
//!   and as a client: no panic; `frame_len_hint` agrees with the decoder;
//!   a prefix never decodes to frames the whole input does not.
//! - `message_parser`: arbitrary bytes through both serializers, text and
//!   binary, from either side: no panic; a decoded client message
//!   re-encodes and decodes to the same message.

use throng_protocol::frame::{decode_frame, frame_len_hint, parse_close, Opcode, Role};
use throng_protocol::serializer::{decode, encode_client, Sender};
use throng_protocol::Vsn;

/// The frames of `buf` until it runs out or fails; and whether it failed.
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

/// Feeds `data` to the frame decoder; panics if an invariant breaks.
pub fn frame_decoder(data: &[u8]) {
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
}

/// Feeds `data` to the serializers; panics if an invariant breaks.
pub fn message_parser(data: &[u8]) {
    for vsn in [Vsn::V1, Vsn::V2] {
        for op in [Opcode::Text, Opcode::Binary] {
            let _ = decode(vsn, op, data, Sender::Server);
            if let Ok(msg) = decode(vsn, op, data, Sender::Client) {
                let mut out = Vec::new();
                if let Ok(op2) = encode_client(vsn, &mut out, &msg) {
                    let back =
                        decode(vsn, op2, &out, Sender::Client).expect("re-encoded message decodes");
                    assert_eq!(back.topic, msg.topic);
                    assert_eq!(back.event, msg.event);
                    assert_eq!(back.msg_ref, msg.msg_ref);
                    assert_eq!(back.payload, msg.payload);
                }
            }
        }
    }
}
