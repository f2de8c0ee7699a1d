//! Feeds arbitrary bytes to both Phoenix serializers, as text and binary,
//! from either side: never a panic, and whatever a client message decodes to
//! re-encodes and decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use throng_protocol::frame::Opcode;
use throng_protocol::serializer::{decode, encode_client, Sender};
use throng_protocol::Vsn;

fuzz_target!(|data: &[u8]| {
    for vsn in [Vsn::V1, Vsn::V2] {
        for op in [Opcode::Text, Opcode::Binary] {
            let _ = decode(vsn, op, data, Sender::Server);
            if let Ok(msg) = decode(vsn, op, data, Sender::Client) {
                let mut out = Vec::new();
                if let Ok(op2) = encode_client(vsn, &mut out, &msg) {
                    let back = decode(vsn, op2, &out, Sender::Client).expect("re-encoded message decodes");
                    assert_eq!(back.topic, msg.topic);
                    assert_eq!(back.event, msg.event);
                    assert_eq!(back.msg_ref, msg.msg_ref);
                    assert_eq!(back.payload, msg.payload);
                }
            }
        }
    }
});
