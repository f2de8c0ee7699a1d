//! Target `longpoll`: a long-poll POST body as a session reads it, and what
//! goes back and forth for it: the lines (`post_lines`), each line as a
//! message (`post_message`: JSON text or base64), decoded and checked as
//! the session's socket takes it (`decode_post`: the serializer, the ref
//! bound), the answer's body (`poll_body`) and what a returned answer gives
//! back (`returned_messages`), and the request and answer as they are
//! forwarded to another node (`forward::wire`). The request head itself is
//! `http_request`'s; the socket behind a message is `phoenix_socket`'s.
//!
//! Input: byte 0 picks the serializer, ndjson or one message, the ref
//! bound; bytes 1..=8 make the session's token; the rest is the body.
//!
//! Asserts, beside no panic:
//! - every line is a non-empty slice of the body, without its line end;
//! - a message the session takes has refs within the bound, and a message
//!   refused for its refs is only that (it decodes);
//! - the messages of a poll's answer come back from `returned_messages`
//!   exactly, bytes and kind (text or binary), under the same token;
//! - a forwarded POST and its answer decode to themselves.

use throng_protocol::frame::Opcode;
use throng_protocol::Vsn;

use crate::engine::close::CloseReason;
use crate::forward::wire::{Answer, Ask, Forward, ReplyTo, Request};
use crate::protocol::phoenix::longpoll::{
    decode_post, poll_body, post_lines, post_message, returned_messages, Item, Secret, Token,
};

/// Feeds `data` as a POST body; panics if an invariant breaks.
pub fn longpoll(data: &[u8]) {
    if data.len() < 9 {
        return;
    }
    let (head, body) = data.split_at(9);
    let conf = head[0];
    let vsn = if conf & 1 == 0 { Vsn::V1 } else { Vsn::V2 };
    let ndjson = conf & 2 != 0;
    let max_ref = [0, 1, 8, 64][((conf >> 2) & 3) as usize];
    let seed = u64::from_be_bytes(head[1..9].try_into().expect("8 bytes"));
    let token = Token {
        node: seed,
        shard: (seed >> 48) as u16,
        key: seed as u32,
        secret: Secret(seed.to_le_bytes().repeat(2).try_into().expect("16 bytes")),
    };
    assert_eq!(Token::parse(&token.to_string()), Some(token));

    let mut items = Vec::new();
    for line in post_lines(body, ndjson) {
        assert!(!line.is_empty() || !ndjson, "an empty line is a message");
        assert!(!ndjson || !line.contains(&b'\n'), "a line holds a line end");
        let Some(decoded) = post_message(line) else {
            continue;
        };
        match decode_post(&decoded, vsn, max_ref) {
            Ok(msg) => {
                for r in [&msg.join_ref, &msg.msg_ref].into_iter().flatten() {
                    assert!(r.len() <= max_ref, "a ref of {} bytes taken", r.len());
                }
                items.push(Item::Owned(decoded.1.clone(), decoded.0 == Opcode::Binary));
            }
            Err(CloseReason::RefTooLong(_)) => {
                let (op, bytes) = &decoded;
                let whole = throng_protocol::serializer::decode(
                    vsn,
                    *op,
                    bytes,
                    throng_protocol::serializer::Sender::Client,
                );
                assert!(whole.is_ok(), "refused for its refs, yet no message");
            }
            Err(_) => {}
        }
    }
    check_answer(&token, vsn, &items);
    check_forward(token, body, ndjson, seed);
}

/// A poll's answer gives its messages back exactly (an answer that found
/// no connection returns them to the session).
fn check_answer(token: &Token, vsn: Vsn, items: &[Item]) {
    let answer = poll_body(200, token, vsn, items);
    let v: serde_json::Value = serde_json::from_slice(&answer).expect("an answer is JSON");
    assert_eq!(v["status"], 200);
    match returned_messages(&answer) {
        None => assert!(items.is_empty(), "{} messages lost", items.len()),
        Some((t, back)) => {
            assert_eq!(&t, token);
            assert_eq!(back.len(), items.len());
            for (a, b) in back.iter().zip(items) {
                match (a, b) {
                    (Item::Owned(x, xb), Item::Owned(y, yb)) => assert_eq!((x, xb), (y, yb)),
                    _ => panic!("a shared item"),
                }
            }
        }
    }
}

/// A forwarded POST, and its answer, decode to themselves.
fn check_forward(token: Token, body: &[u8], ndjson: bool, seed: u64) {
    let reply = ReplyTo {
        node: seed.rotate_left(7),
        shard: seed as u16,
        conn: (seed >> 16) as u32,
        req: (seed >> 32) as u32,
    };
    let asks = [
        Ask::Post {
            body: body.to_vec(),
            ndjson,
        },
        Ask::Return {
            body: body.to_vec(),
        },
        Ask::Poll,
        Ask::Cancel,
    ];
    for ask in asks {
        let f = Forward::Request(Request { token, ask, reply });
        assert_eq!(Forward::decode(&f.encode()).as_ref(), Some(&f));
    }
    let a = Forward::Answer(Answer {
        reply,
        body: body.to_vec(),
    });
    assert_eq!(Forward::decode(&a.encode()).as_ref(), Some(&a));
}
