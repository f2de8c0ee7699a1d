//! RFC 6455 frames: decoding in place from a caller-owned buffer, and encoding.
//!
//! We write our own codec instead of using a WebSocket crate because the
//! server's connection must not own a read or write buffer while idle: the
//! decoder works on whatever slice the event loop read into (a shared buffer,
//! or the few bytes of a partial frame the connection kept), unmasks in place
//! and returns ranges, never allocating.
//!
//! The decoder first checks, then parses: [`decode_frame`] returns
//! `Ok(None)` for "incomplete, read more" and `Err` only for input that can
//! never become valid, with the close code the peer must be sent.

use std::ops::Range;

/// A frame opcode (RFC 6455 §5.2). Reserved opcodes never get this far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    fn from_bits(bits: u8) -> Option<Opcode> {
        Some(match bits {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            _ => return None,
        })
    }

    /// The four-bit value on the wire.
    pub fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    /// Close, ping and pong: never fragmented, at most 125 bytes.
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// Close codes (RFC 6455 §7.4.1) that the server sends and the load generator reads.
pub mod close_code {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const INVALID_PAYLOAD: u16 = 1007;
    pub const POLICY_VIOLATION: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
    pub const INTERNAL_ERROR: u16 = 1011;
    pub const SERVICE_RESTART: u16 = 1012;
}

/// Which side's frames we are decoding: clients must mask, servers must not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// We are the server: incoming frames must be masked.
    Server,
    /// We are the client: incoming frames must not be masked.
    Client,
}

/// Why a frame can never be valid; each maps to a close code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("reserved bits set")]
    ReservedBits,
    #[error("reserved opcode {0:#x}")]
    ReservedOpcode(u8),
    #[error("fragmented control frame")]
    FragmentedControl,
    #[error("control frame longer than 125 bytes")]
    ControlTooLong,
    #[error("client frame not masked")]
    Unmasked,
    #[error("server frame masked")]
    Masked,
    #[error("payload length uses the most significant bit")]
    BadLength,
    #[error("non-minimal payload length encoding")]
    NonMinimalLength,
    #[error("message of {0} bytes exceeds the limit")]
    TooBig(u64),
    #[error("continuation frame without a message in progress")]
    UnexpectedContinuation,
    #[error("new data frame while a fragmented message is in progress")]
    ExpectedContinuation,
    #[error("invalid UTF-8 in a text message or close reason")]
    InvalidUtf8,
    #[error("invalid close frame payload")]
    InvalidClose,
}

impl FrameError {
    /// The close code to send the peer for this error.
    pub fn close_code(&self) -> u16 {
        match self {
            FrameError::TooBig(_) => close_code::TOO_BIG,
            FrameError::InvalidUtf8 => close_code::INVALID_PAYLOAD,
            _ => close_code::PROTOCOL_ERROR,
        }
    }
}

/// A decoded frame: its payload has been unmasked in place at `payload`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    pub fin: bool,
    pub opcode: Opcode,
    /// RSV1: the message is compressed (permessage-deflate, only where it
    /// was negotiated: see [`decode_frame_with`]).
    pub compressed: bool,
    /// Where the (unmasked) payload sits in the buffer passed to [`decode_frame`].
    pub payload: Range<usize>,
    /// How many bytes of the buffer this frame used.
    pub consumed: usize,
}

/// Decodes one frame from the front of `buf`, unmasking its payload in place.
///
/// Returns `Ok(None)` when `buf` holds only part of a frame. `max_payload`
/// bounds a single frame's payload; the caller bounds the whole message.
pub fn decode_frame(
    buf: &mut [u8],
    role: Role,
    max_payload: u64,
) -> Result<Option<RawFrame>, FrameError> {
    decode_frame_with(buf, role, max_payload, false)
}

/// As [`decode_frame`], with RSV1 allowed when `deflate` (permessage-deflate
/// negotiated, RFC 7692 §6): it marks the first frame of a compressed
/// message. RSV1 on a control frame is still an error; on a continuation
/// frame the caller refuses it (it knows whether a message is in progress).
pub fn decode_frame_with(
    buf: &mut [u8],
    role: Role,
    max_payload: u64,
    deflate: bool,
) -> Result<Option<RawFrame>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let b0 = buf[0];
    let b1 = buf[1];
    let reserved = if deflate { 0x30 } else { 0x70 };
    if b0 & reserved != 0 {
        return Err(FrameError::ReservedBits);
    }
    let compressed = b0 & 0x40 != 0;
    let fin = b0 & 0x80 != 0;
    let opcode = Opcode::from_bits(b0 & 0x0F).ok_or(FrameError::ReservedOpcode(b0 & 0x0F))?;
    let masked = b1 & 0x80 != 0;
    match (role, masked) {
        (Role::Server, false) => return Err(FrameError::Unmasked),
        (Role::Client, true) => return Err(FrameError::Masked),
        _ => {}
    }
    let len7 = b1 & 0x7F;
    if opcode.is_control() {
        if compressed {
            return Err(FrameError::ReservedBits);
        }
        if !fin {
            return Err(FrameError::FragmentedControl);
        }
        if len7 > 125 {
            return Err(FrameError::ControlTooLong);
        }
    }
    let (len, mut pos) = match len7 {
        126 => {
            if buf.len() < 4 {
                return Ok(None);
            }
            let len = u16::from_be_bytes([buf[2], buf[3]]) as u64;
            if len < 126 {
                return Err(FrameError::NonMinimalLength);
            }
            (len, 4)
        }
        127 => {
            if buf.len() < 10 {
                return Ok(None);
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[2..10]);
            let len = u64::from_be_bytes(b);
            if len >> 63 != 0 {
                return Err(FrameError::BadLength);
            }
            if len <= u16::MAX as u64 {
                return Err(FrameError::NonMinimalLength);
            }
            (len, 10)
        }
        n => (n as u64, 2),
    };
    if len > max_payload {
        return Err(FrameError::TooBig(len));
    }
    let mask = if masked {
        if buf.len() < pos + 4 {
            return Ok(None);
        }
        let m = [buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]];
        pos += 4;
        Some(m)
    } else {
        None
    };
    let len = len as usize;
    if buf.len() - pos < len {
        return Ok(None);
    }
    let payload = pos..pos + len;
    if let Some(mask) = mask {
        apply_mask(&mut buf[payload.clone()], mask);
    }
    Ok(Some(RawFrame {
        fin,
        opcode,
        compressed,
        payload,
        consumed: pos + len,
    }))
}

/// How many bytes the frame at the front of `buf` needs in all, if its header
/// is complete. Lets a reader keep exactly one partial frame and no more.
pub fn frame_len_hint(buf: &[u8]) -> Option<usize> {
    if buf.len() < 2 {
        return None;
    }
    let masked = buf[1] & 0x80 != 0;
    let mask_len = if masked { 4 } else { 0 };
    match buf[1] & 0x7F {
        126 if buf.len() >= 4 => Some(4 + mask_len + u16::from_be_bytes([buf[2], buf[3]]) as usize),
        127 if buf.len() >= 10 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[2..10]);
            usize::try_from(u64::from_be_bytes(b))
                .ok()
                .and_then(|n| n.checked_add(10 + mask_len))
        }
        126 | 127 => None,
        n => Some(2 + mask_len + n as usize),
    }
}

/// XORs `data` with the 4-byte mask (RFC 6455 §5.3), eight bytes at a time.
pub fn apply_mask(data: &mut [u8], mask: [u8; 4]) {
    let mask64 = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        let v = u64::from_ne_bytes(b) ^ mask64;
        chunk.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= mask[i & 3];
    }
}

/// The largest header [`encode_header`] writes.
pub const MAX_HEADER_LEN: usize = 14;

/// Appends a frame header for a payload of `len` bytes.
pub fn encode_header(
    out: &mut Vec<u8>,
    fin: bool,
    opcode: Opcode,
    len: usize,
    mask: Option<[u8; 4]>,
) {
    let b0 = if fin { 0x80 } else { 0 } | opcode.bits();
    let mbit = if mask.is_some() { 0x80 } else { 0 };
    out.push(b0);
    if len < 126 {
        out.push(mbit | len as u8);
    } else if len <= u16::MAX as usize {
        out.push(mbit | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(mbit | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    if let Some(m) = mask {
        out.extend_from_slice(&m);
    }
}

/// Appends a whole frame. With `mask` (client side) the payload is masked.
pub fn encode_frame(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8], mask: Option<[u8; 4]>) {
    encode_header(out, true, opcode, payload.len(), mask);
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(m) = mask {
        apply_mask(&mut out[start..], m);
    }
}

/// Appends a close frame with `code` and a short reason.
pub fn encode_close(out: &mut Vec<u8>, code: u16, reason: &str, mask: Option<[u8; 4]>) {
    let mut body = [0u8; 125];
    let reason = &reason.as_bytes()[..reason.len().min(123)];
    body[..2].copy_from_slice(&code.to_be_bytes());
    body[2..2 + reason.len()].copy_from_slice(reason);
    encode_frame(out, Opcode::Close, &body[..2 + reason.len()], mask);
}

/// Checks a received close payload (RFC 6455 §5.5.1, §7.4): empty, or a valid
/// code followed by UTF-8. Returns the code, if any.
pub fn parse_close(payload: &[u8]) -> Result<Option<u16>, FrameError> {
    match payload.len() {
        0 => Ok(None),
        1 => Err(FrameError::InvalidClose),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            let valid = matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999);
            if !valid {
                return Err(FrameError::InvalidClose);
            }
            if std::str::from_utf8(&payload[2..]).is_err() {
                return Err(FrameError::InvalidUtf8);
            }
            Ok(Some(code))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn masked(opcode: Opcode, payload: &[u8], fin: bool) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(&mut out, fin, opcode, payload.len(), Some([1, 2, 3, 4]));
        let s = out.len();
        out.extend_from_slice(payload);
        apply_mask(&mut out[s..], [1, 2, 3, 4]);
        out
    }

    #[test]
    fn decodes_masked_text() {
        let mut buf = masked(Opcode::Text, b"hello", true);
        let f = decode_frame(&mut buf, Role::Server, 1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(f.opcode, Opcode::Text);
        assert!(f.fin);
        assert_eq!(&buf[f.payload.clone()], b"hello");
        assert_eq!(f.consumed, buf.len());
    }

    #[test]
    fn incomplete_at_every_prefix() {
        let full = masked(Opcode::Binary, &[7u8; 300], true);
        for n in 0..full.len() {
            let mut b = full[..n].to_vec();
            assert_eq!(
                decode_frame(&mut b, Role::Server, 1 << 20),
                Ok(None),
                "prefix {n}"
            );
        }
    }

    #[test]
    fn rejects_malformed() {
        let mut unmasked = Vec::new();
        encode_frame(&mut unmasked, Opcode::Text, b"x", None);
        assert_eq!(
            decode_frame(&mut unmasked, Role::Server, 100),
            Err(FrameError::Unmasked)
        );
        let mut rsv = masked(Opcode::Text, b"x", true);
        rsv[0] |= 0x40;
        assert_eq!(
            decode_frame(&mut rsv, Role::Server, 100),
            Err(FrameError::ReservedBits)
        );
        let mut rsv1 = masked(Opcode::Text, b"x", true);
        rsv1[0] |= 0x40;
        let f = decode_frame_with(&mut rsv1.clone(), Role::Server, 100, true);
        assert!(f.unwrap().unwrap().compressed);
        rsv1[0] |= 0x20;
        assert_eq!(
            decode_frame_with(&mut rsv1, Role::Server, 100, true),
            Err(FrameError::ReservedBits)
        );
        let mut ping = masked(Opcode::Ping, b"x", true);
        ping[0] |= 0x40;
        assert_eq!(
            decode_frame_with(&mut ping, Role::Server, 100, true),
            Err(FrameError::ReservedBits)
        );
        let mut op = masked(Opcode::Text, b"x", true);
        op[0] = 0x83;
        assert_eq!(
            decode_frame(&mut op, Role::Server, 100),
            Err(FrameError::ReservedOpcode(3))
        );
        let mut ping = masked(Opcode::Ping, b"x", false);
        assert_eq!(
            decode_frame(&mut ping, Role::Server, 100),
            Err(FrameError::FragmentedControl)
        );
        let mut big = masked(Opcode::Text, &[0; 200], true);
        let e = decode_frame(&mut big, Role::Server, 100).unwrap_err();
        assert_eq!(e.close_code(), close_code::TOO_BIG);
        let mut long_ping = vec![0x89, 0xFE, 0, 126, 0, 0, 0, 0];
        assert_eq!(
            decode_frame(&mut long_ping, Role::Server, 1000),
            Err(FrameError::ControlTooLong)
        );
    }

    #[test]
    fn close_payloads() {
        assert_eq!(parse_close(&[]), Ok(None));
        assert_eq!(parse_close(&[3]), Err(FrameError::InvalidClose));
        assert_eq!(parse_close(&1000u16.to_be_bytes()), Ok(Some(1000)));
        assert_eq!(
            parse_close(&1005u16.to_be_bytes()),
            Err(FrameError::InvalidClose)
        );
        assert_eq!(
            parse_close(&999u16.to_be_bytes()),
            Err(FrameError::InvalidClose)
        );
        assert_eq!(
            parse_close(&[0x03, 0xE8, 0xFF]),
            Err(FrameError::InvalidUtf8)
        );
        assert_eq!(parse_close(&4000u16.to_be_bytes()), Ok(Some(4000)));
    }

    proptest! {
        #[test]
        fn round_trip(payload in proptest::collection::vec(any::<u8>(), 0..70_000), mask in any::<[u8; 4]>(), op in 0usize..3) {
            let opcode = [Opcode::Text, Opcode::Binary, Opcode::Continuation][op];
            let mut out = Vec::new();
            encode_frame(&mut out, opcode, &payload, Some(mask));
            prop_assert_eq!(frame_len_hint(&out), Some(out.len()));
            let f = decode_frame(&mut out, Role::Server, 1 << 20).unwrap().unwrap();
            prop_assert_eq!(f.opcode, opcode);
            prop_assert_eq!(&out[f.payload.clone()], &payload[..]);
            prop_assert_eq!(f.consumed, out.len());
        }

        #[test]
        fn never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_frame(&mut bytes.clone(), Role::Server, 1 << 16);
            let _ = decode_frame(&mut bytes, Role::Client, 1 << 16);
        }

        #[test]
        fn unmasked_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..1000)) {
            let mut out = Vec::new();
            encode_frame(&mut out, Opcode::Binary, &payload, None);
            let f = decode_frame(&mut out, Role::Client, 1 << 20).unwrap().unwrap();
            prop_assert_eq!(&out[f.payload.clone()], &payload[..]);
        }
    }
}
