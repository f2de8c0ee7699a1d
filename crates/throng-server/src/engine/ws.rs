//! WebSocket messages from frames (RFC 6455 §5): fragmentation, control
//! frames and the checks a message must pass before the Phoenix socket
//! sees it, decided without I/O. The frame codec itself is in
//! `throng_protocol::frame`.
//!
//! A connection keeps a fragmented message's bytes so far in its
//! [`Extra`] box, allocated only while one is in progress.

use std::borrow::Cow;

use throng_protocol::frame::{close_code, parse_close, Opcode};

use crate::engine::pending::Extra;

/// What one frame means for the connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameAction<'a> {
    /// A complete message (text already checked to be UTF-8).
    Message(Opcode, Cow<'a, [u8]>),
    /// A complete compressed message (permessage-deflate): to inflate
    /// within the message bound, then check as a message ([`checked`]).
    Compressed(Opcode, Cow<'a, [u8]>),
    /// Answer with a pong carrying these bytes.
    Ping(&'a [u8]),
    /// The peer closes; answer with this code (none: an empty close) and close.
    Close(Option<u16>),
    /// Close the connection with this code and reason.
    Fail(u16, &'static str),
    /// Nothing to do (a pong, a fragment kept for later).
    None,
}

/// Handles one frame. `extra` holds the message in progress, if any;
/// `max` bounds a message's total size (compressed, here; inflated, by
/// the caller). `compressed`: the frame's RSV1, which the decoder allows
/// only where permessage-deflate was negotiated; it marks a message's
/// first frame (RFC 7692 §6.1), never a continuation.
pub(crate) fn on_frame<'a>(
    extra: &mut Option<Box<Extra>>,
    fin: bool,
    opcode: Opcode,
    compressed: bool,
    payload: &'a [u8],
    max: usize,
) -> FrameAction<'a> {
    let in_progress = extra.as_ref().is_some_and(|e| e.frag.is_some());
    if compressed && opcode == Opcode::Continuation {
        return FrameAction::Fail(
            close_code::PROTOCOL_ERROR,
            "RSV1 set on a continuation frame",
        );
    }
    match opcode {
        Opcode::Ping => FrameAction::Ping(payload),
        Opcode::Pong => FrameAction::None,
        Opcode::Close => match parse_close(payload) {
            Ok(code) => FrameAction::Close(code),
            Err(e) => FrameAction::Fail(e.close_code(), "invalid close frame"),
        },
        Opcode::Continuation => {
            let Some((op, mut buf)) = extra.as_mut().and_then(|e| e.frag.take()) else {
                return FrameAction::Fail(
                    close_code::PROTOCOL_ERROR,
                    "continuation frame without a message in progress",
                );
            };
            if buf.len() + payload.len() > max {
                return FrameAction::Fail(close_code::TOO_BIG, "message too big");
            }
            buf.extend_from_slice(payload);
            if fin {
                let deflated = extra
                    .as_mut()
                    .is_some_and(|e| std::mem::take(&mut e.frag_deflated));
                if deflated {
                    FrameAction::Compressed(op, Cow::Owned(buf))
                } else {
                    checked(op, Cow::Owned(buf))
                }
            } else {
                extra.get_or_insert_with(Default::default).frag = Some((op, buf));
                FrameAction::None
            }
        }
        Opcode::Text | Opcode::Binary => {
            if in_progress {
                return FrameAction::Fail(
                    close_code::PROTOCOL_ERROR,
                    "new message before the fragmented one ended",
                );
            }
            if fin && compressed {
                FrameAction::Compressed(opcode, Cow::Borrowed(payload))
            } else if fin {
                checked(opcode, Cow::Borrowed(payload))
            } else {
                let e = extra.get_or_insert_with(Default::default);
                e.frag = Some((opcode, payload.to_vec()));
                e.frag_deflated = compressed;
                FrameAction::None
            }
        }
    }
}

/// A complete message, once text is known to be UTF-8.
pub(crate) fn checked(opcode: Opcode, data: Cow<'_, [u8]>) -> FrameAction<'_> {
    if opcode == Opcode::Text && std::str::from_utf8(&data).is_err() {
        return FrameAction::Fail(
            close_code::INVALID_PAYLOAD,
            "invalid UTF-8 in a text message",
        );
    }
    FrameAction::Message(opcode, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_fragmented_messages() {
        let mut extra = None;
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Text, false, b"hi", 100),
            FrameAction::Message(Opcode::Text, Cow::Borrowed(&b"hi"[..]))
        );
        assert!(extra.is_none(), "a whole message allocates nothing");
        assert_eq!(
            on_frame(&mut extra, false, Opcode::Binary, false, b"ab", 100),
            FrameAction::None
        );
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Ping, false, b"p", 100),
            FrameAction::Ping(b"p")
        );
        assert_eq!(
            on_frame(&mut extra, false, Opcode::Continuation, false, b"cd", 100),
            FrameAction::None
        );
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Continuation, false, b"e", 100),
            FrameAction::Message(Opcode::Binary, Cow::Owned(b"abcde".to_vec()))
        );
        assert!(extra.as_ref().unwrap().frag.is_none());
    }

    #[test]
    fn compressed_messages_whole_and_fragmented() {
        let mut extra = None;
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Text, true, b"zz", 100),
            FrameAction::Compressed(Opcode::Text, Cow::Borrowed(&b"zz"[..]))
        );
        on_frame(&mut extra, false, Opcode::Binary, true, b"ab", 100);
        assert!(matches!(
            on_frame(&mut extra, true, Opcode::Continuation, true, b"c", 100),
            FrameAction::Fail(1002, _)
        ));
        let mut extra = None;
        on_frame(&mut extra, false, Opcode::Binary, true, b"ab", 100);
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Continuation, false, b"c", 100),
            FrameAction::Compressed(Opcode::Binary, Cow::Owned(b"abc".to_vec()))
        );
        // The next fragmented message is plain again.
        on_frame(&mut extra, false, Opcode::Text, false, b"a", 100);
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Continuation, false, b"b", 100),
            FrameAction::Message(Opcode::Text, Cow::Owned(b"ab".to_vec()))
        );
    }

    #[test]
    fn protocol_errors() {
        let mut extra = None;
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Continuation, false, b"x", 100),
            FrameAction::Fail(1002, "continuation frame without a message in progress")
        );
        on_frame(&mut extra, false, Opcode::Text, false, b"a", 100);
        assert!(matches!(
            on_frame(&mut extra, true, Opcode::Text, false, b"b", 100),
            FrameAction::Fail(1002, _)
        ));
        let mut extra = None;
        on_frame(&mut extra, false, Opcode::Text, false, &[b'a'; 60], 100);
        assert_eq!(
            on_frame(
                &mut extra,
                true,
                Opcode::Continuation,
                false,
                &[b'a'; 60],
                100
            ),
            FrameAction::Fail(1009, "message too big")
        );
        let mut extra = None;
        assert!(matches!(
            on_frame(&mut extra, true, Opcode::Text, false, &[0xff], 100),
            FrameAction::Fail(1007, _)
        ));
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Close, false, &[3, 232], 100),
            FrameAction::Close(Some(1000))
        );
        assert_eq!(
            on_frame(&mut extra, true, Opcode::Close, false, &[], 100),
            FrameAction::Close(None)
        );
        assert!(matches!(
            on_frame(&mut extra, true, Opcode::Close, false, &[0, 1], 100),
            FrameAction::Fail(1002, _)
        ));
    }
}
