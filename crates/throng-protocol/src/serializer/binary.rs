//! V2's binary frames: the layouts of a push, a reply and a broadcast
//! (a kind byte, one length byte per named part, the parts, then the
//! payload), decoded by sender and written for the encoders in `mod.rs`.

use std::borrow::Cow;

use super::{DecodeError, EncodeError, Sender};
use crate::frame::Opcode;
use crate::message::{Message, Payload, Ref, Vsn};

pub(super) const PUSH: u8 = 0;
pub(super) const REPLY: u8 = 1;
pub(super) const BROADCAST: u8 = 2;

fn take<'a>(data: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if data.len() < n {
        return Err(DecodeError::Binary);
    }
    let (head, tail) = data.split_at(n);
    *data = tail;
    Ok(head)
}

fn utf8(b: &[u8]) -> Result<Cow<'_, str>, DecodeError> {
    std::str::from_utf8(b)
        .map(Cow::Borrowed)
        .map_err(|_| DecodeError::Binary)
}

/// A ref of a binary layout: text (an empty one is none).
fn opt(b: &[u8]) -> Result<Option<Ref<'_>>, DecodeError> {
    Ok(if b.is_empty() {
        None
    } else {
        Some(Ref::string(utf8(b)?))
    })
}

pub(super) fn decode_binary(mut data: &[u8], from: Sender) -> Result<Message<'_>, DecodeError> {
    let kind = take(&mut data, 1)?[0];
    match (from, kind) {
        (Sender::Client, PUSH) => {
            let h = take(&mut data, 4)?;
            let (jr, r, t, e) = (h[0] as usize, h[1] as usize, h[2] as usize, h[3] as usize);
            Ok(Message {
                join_ref: opt(take(&mut data, jr)?)?,
                msg_ref: opt(take(&mut data, r)?)?,
                topic: utf8(take(&mut data, t)?)?,
                event: utf8(take(&mut data, e)?)?,
                payload: Payload::Binary(data),
            })
        }
        (Sender::Server, PUSH) => {
            let h = take(&mut data, 3)?;
            let (jr, t, e) = (h[0] as usize, h[1] as usize, h[2] as usize);
            Ok(Message {
                join_ref: opt(take(&mut data, jr)?)?,
                msg_ref: None,
                topic: utf8(take(&mut data, t)?)?,
                event: utf8(take(&mut data, e)?)?,
                payload: Payload::Binary(data),
            })
        }
        (Sender::Server, REPLY) => {
            let h = take(&mut data, 4)?;
            let (jr, r, t, s) = (h[0] as usize, h[1] as usize, h[2] as usize, h[3] as usize);
            let join_ref = opt(take(&mut data, jr)?)?;
            let msg_ref = opt(take(&mut data, r)?)?;
            let topic = utf8(take(&mut data, t)?)?;
            // The status travels as the event of a decoded reply; phoenix.js does the same.
            let status = utf8(take(&mut data, s)?)?;
            Ok(Message {
                join_ref,
                msg_ref,
                topic,
                event: status,
                payload: Payload::Binary(data),
            })
        }
        (Sender::Server, BROADCAST) => {
            let h = take(&mut data, 2)?;
            let (t, e) = (h[0] as usize, h[1] as usize);
            Ok(Message {
                join_ref: None,
                msg_ref: None,
                topic: utf8(take(&mut data, t)?)?,
                event: utf8(take(&mut data, e)?)?,
                payload: Payload::Binary(data),
            })
        }
        _ => Err(DecodeError::Binary),
    }
}

fn short(s: &str, what: &'static str) -> Result<u8, EncodeError> {
    u8::try_from(s.len()).map_err(|_| EncodeError::TooLong(what))
}

/// Writes a v2 binary frame body: the `kind` byte, one length byte per
/// named part, the parts, then `data`. Nothing is written on error.
pub(super) fn binary(
    vsn: Vsn,
    out: &mut Vec<u8>,
    kind: u8,
    parts: &[(&str, &'static str)],
    data: &[u8],
) -> Result<Opcode, EncodeError> {
    if vsn == Vsn::V1 {
        return Err(EncodeError::BinaryOnV1);
    }
    let mut head = [kind, 0, 0, 0, 0];
    for (i, (part, what)) in parts.iter().enumerate() {
        head[i + 1] = short(part, what)?;
    }
    out.extend_from_slice(&head[..parts.len() + 1]);
    for (part, _) in parts {
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(data);
    Ok(Opcode::Binary)
}

#[cfg(test)]
mod tests {
    use super::super::*;

    #[test]
    fn binary_layouts() {
        let mut out = Vec::new();
        encode_broadcast(Vsn::V2, &mut out, "ab", "c", Payload::Binary(&[1, 2])).unwrap();
        assert_eq!(out, [2, 2, 1, b'a', b'b', b'c', 1, 2]);
        let m = decode(Vsn::V2, Opcode::Binary, &out, Sender::Server).unwrap();
        assert_eq!(
            (m.topic.as_ref(), m.event.as_ref(), m.payload),
            ("ab", "c", Payload::Binary(&[1, 2]))
        );
        let mut out = Vec::new();
        encode_reply(
            Vsn::V2,
            &mut out,
            Some("1"),
            Some("22"),
            "t",
            "ok",
            Payload::Binary(&[9]),
        )
        .unwrap();
        assert_eq!(out, [1, 1, 2, 1, 2, b'1', b'2', b'2', b't', b'o', b'k', 9]);
        let mut out = Vec::new();
        encode_message(
            Vsn::V2,
            &mut out,
            Some("1"),
            None,
            "t",
            "e",
            Payload::Binary(&[]),
        )
        .unwrap();
        assert_eq!(out, [0, 1, 1, 1, b'1', b't', b'e']);
        assert!(
            encode_broadcast(Vsn::V1, &mut Vec::new(), "t", "e", Payload::Binary(&[])).is_err()
        );
    }
}
