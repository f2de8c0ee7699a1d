//! [`Broadcast`]: one message for every subscriber of a topic, encoded once
//! per serializer into complete WebSocket frames.
//!
//! As Phoenix's fastlane (`Phoenix.Channel.Server.dispatch/3` encodes a
//! broadcast once per serializer and writes it straight to each transport),
//! the bytes are made once when the broadcast is created and then shared,
//! behind an `Arc`, by every shard and every subscriber: delivering it to a
//! socket is a `write` of bytes that already exist, with no allocation.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use throng_protocol::frame::{encode_header, Opcode};
use throng_protocol::serializer::{encode_broadcast, encode_message};
use throng_protocol::{Family, OwnedPayload, Payload, Vsn, Wire};

/// A subscriber that must not receive a broadcast (`broadcast_from`): the
/// shard and the connection key there.
pub type Exclude = (usize, usize);

/// What a Pusher presence channel's `member_added` or `member_removed`
/// says, for delivery to leave out the subscribers who know it already
/// (its server's protocol decides, per subscriber): the member's own
/// sockets (their member list has it), and those whose member list was
/// read at or after the presence flush that made it (`generation`, the
/// node's count of flushes: a subscriber that read a newer state while
/// this broadcast was on its way to its shard has the change in its list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberTag {
    /// The member (the user id).
    pub key: Arc<str>,
    /// The flush that made it ([`crate::Tracker`]'s generation).
    pub generation: u64,
}

/// Bytes held by every [`Broadcast`] alive in this process (frames and
/// payload): in flight between shards, and kept by the output queues of
/// connections that have not taken it yet. Part of the server's outbound
/// memory budget; one atomic add and one subtract per broadcast, none per
/// subscriber.
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes held by the broadcasts alive in this process.
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(Relaxed)
}

/// A broadcast, with its frames already encoded for each serializer.
#[derive(Debug)]
pub struct Broadcast {
    pub topic: Arc<str>,
    pub event: String,
    pub payload: OwnedPayload,
    /// Complete WebSocket frames, indexed by [`Wire::index`]; `None` where the
    /// wire cannot carry the payload (binary on Phoenix v1), or where the
    /// topic's subscribers do not speak it.
    frames: [Option<Box<[u8]>>; Wire::COUNT],
    /// Where each frame's message body starts (after the frame header): a
    /// transport that is not WebSocket (long-poll) sends the body alone.
    body_at: [u8; Wire::COUNT],
    /// The same frames compressed (permessage-deflate, RFC 7692), made once
    /// by the first shard that delivers to a socket that negotiated it and
    /// then shared as the plain ones are; `None` inside where the message
    /// goes plain (short, or not smaller compressed).
    deflated: [OnceLock<Option<Box<[u8]>>>; Wire::COUNT],
    /// A connection that must not receive it (`broadcast_from`).
    pub exclude: Option<Exclude>,
    /// What it counts in [`live_bytes`], fixed at creation.
    held: usize,
    /// Its offset in the topic's history (`crate::history`), carried in
    /// its frames as the message's `ref`; 0 on a topic without history.
    pub offset: u64,
    /// The epoch of that position (0 without one).
    pub epoch: u64,
    /// A Pusher presence member event's member and flush: see [`MemberTag`].
    pub member: Option<Box<MemberTag>>,
}

impl Broadcast {
    /// Encodes `event`/`payload` once per serializer.
    pub fn new(
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        exclude: Option<Exclude>,
    ) -> Broadcast {
        Broadcast::positioned(topic, event, payload, exclude, None)
    }

    /// Encodes `event`/`payload` once per serializer, with the position
    /// `(ref, offset)` in the topic's history as the message's ref (a JSON
    /// message's `ref`; the v2 binary broadcast layout has no ref, so a
    /// binary payload goes without it).
    pub fn positioned(
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        exclude: Option<Exclude>,
        position: Option<(&str, u64)>,
    ) -> Broadcast {
        let mut frames: [Option<Box<[u8]>>; Wire::COUNT] = Default::default();
        let mut body_at = [0u8; Wire::COUNT];
        let mut body = Vec::with_capacity(128);
        let msg_ref = position.map(|(r, _)| r);
        // A Pusher channel's payload is its whole frame, encoded once by the
        // protocol that made it (`crate`'s callers: the server's Pusher
        // protocol), and the same bytes on every node.
        let phoenix = match Family::of_topic(&topic) {
            Family::Phoenix => &Vsn::ALL[..],
            Family::Pusher => {
                if let OwnedPayload::Json(text) = &payload {
                    let frame = frame_of(Opcode::Text, text.as_bytes());
                    body_at[Wire::Pusher.index()] = (frame.len() - text.len()) as u8;
                    frames[Wire::Pusher.index()] = Some(frame);
                }
                &[][..]
            }
        };
        for &vsn in phoenix {
            body.clear();
            let encoded = match (msg_ref, payload.as_payload()) {
                (Some(r), p @ Payload::Json(_)) => {
                    encode_message(vsn, &mut body, None, Some(r), &topic, &event, p)
                }
                (_, p) => encode_broadcast(vsn, &mut body, &topic, &event, p),
            };
            if let Ok(opcode) = encoded {
                let frame = frame_of(opcode, &body);
                body_at[vsn.index()] = (frame.len() - body.len()) as u8;
                frames[vsn.index()] = Some(frame);
            }
        }
        let held = frames.iter().flatten().map(|f| f.len()).sum::<usize>()
            + match &payload {
                OwnedPayload::Json(s) => s.len(),
                OwnedPayload::Binary(b) => b.len(),
            };
        LIVE_BYTES.fetch_add(held, Relaxed);
        Broadcast {
            topic,
            event,
            payload,
            frames,
            body_at,
            deflated: Default::default(),
            exclude,
            held,
            offset: position.map_or(0, |(_, o)| o),
            epoch: position
                .and_then(|(r, _)| crate::position::Position::parse(r))
                .map_or(0, |p| p.epoch),
            member: None,
        }
    }

    /// This broadcast as a Pusher presence member event (see [`MemberTag`]).
    pub fn with_member(mut self, tag: MemberTag) -> Broadcast {
        self.member = Some(Box::new(tag));
        self
    }

    /// The bytes this broadcast holds (frames and payload), as counted in
    /// [`live_bytes`].
    pub fn held(&self) -> usize {
        self.held
    }

    /// The frame a socket speaking `wire` gets, if that wire can carry it.
    #[inline]
    pub fn frame(&self, wire: impl Into<Wire>) -> Option<&[u8]> {
        self.frames[wire.into().index()].as_deref()
    }

    /// The frame a socket speaking `vsn` that negotiated permessage-deflate
    /// (with a full 15-bit window) gets, and whether it is the compressed
    /// one: compressed once, on the first call, for every such socket.
    #[inline]
    pub fn frame_deflated(&self, wire: impl Into<Wire>) -> Option<(&[u8], bool)> {
        let wire = wire.into();
        let plain = self.frame(wire)?;
        let compressed = self.deflated[wire.index()].get_or_init(|| {
            let at = self.body_at[wire.index()] as usize;
            let mut body = Vec::new();
            if !throng_protocol::deflate::compress(&plain[at..], 15, &mut body) {
                return None;
            }
            let opcode = if plain[0] & 0x0f == 0x2 {
                Opcode::Binary
            } else {
                Opcode::Text
            };
            let mut f = Vec::with_capacity(body.len() + 10);
            throng_protocol::deflate::encode_compressed_header(&mut f, opcode, body.len());
            f.extend_from_slice(&body);
            LIVE_BYTES.fetch_add(f.len(), Relaxed);
            Some(f.into_boxed_slice())
        });
        Some(match compressed {
            Some(c) => (c, true),
            None => (plain, false),
        })
    }

    /// The frame for `vsn`, compressed or plain as [`Broadcast::frame_deflated`]
    /// chose (for output queues, which hold which one they started).
    #[inline]
    pub fn frame_as(&self, wire: impl Into<Wire>, compressed: bool) -> Option<&[u8]> {
        let wire = wire.into();
        if compressed {
            self.deflated[wire.index()].get()?.as_deref()
        } else {
            self.frame(wire)
        }
    }

    /// The message body alone (the frame without its header), for transports
    /// that frame messages their own way.
    pub fn body(&self, wire: impl Into<Wire>) -> Option<&[u8]> {
        let wire = wire.into();
        let at = self.body_at[wire.index()] as usize;
        self.frame(wire).map(|f| &f[at..])
    }

    /// Whether the message for `vsn` is binary (a v2 binary broadcast), not
    /// JSON text.
    pub fn is_binary(&self, wire: impl Into<Wire>) -> bool {
        self.frame(wire).is_some_and(|f| f[0] & 0x0f == 0x2)
    }

    /// Bytes of the largest frame: what one delivery may queue.
    pub fn frame_len(&self) -> usize {
        self.frames
            .iter()
            .flatten()
            .map(|f| f.len())
            .max()
            .unwrap_or(0)
    }
}

impl Drop for Broadcast {
    fn drop(&mut self) {
        let deflated: usize = self
            .deflated
            .iter()
            .filter_map(|d| d.get()?.as_ref().map(|f| f.len()))
            .sum();
        LIVE_BYTES.fetch_sub(self.held + deflated, Relaxed);
    }
}

/// A whole unmasked server frame around `body`.
pub fn frame_of(opcode: Opcode, body: &[u8]) -> Box<[u8]> {
    let mut f = Vec::with_capacity(body.len() + 10);
    encode_header(&mut f, true, opcode, body.len(), None);
    f.extend_from_slice(body);
    f.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_once_per_serializer() {
        let b = Broadcast::new("t".into(), "e".into(), OwnedPayload::empty(), None);
        assert_eq!(
            &b.frame(Vsn::V2).unwrap()[2..],
            br#"[null,null,"t","e",{}]"#
        );
        assert_eq!(b.body(Vsn::V2).unwrap(), br#"[null,null,"t","e",{}]"#);
        assert_eq!(b.frame(Vsn::V1).unwrap()[0], 0x81);
        assert_eq!(
            b.body(Vsn::V1).unwrap(),
            br#"{"event":"e","payload":{},"ref":null,"topic":"t"}"#
        );
        let bin = Broadcast::new("t".into(), "e".into(), OwnedPayload::Binary(vec![1]), None);
        assert!(bin.frame(Vsn::V1).is_none());
        assert!(bin.body(Vsn::V1).is_none());
        assert_eq!(bin.frame(Vsn::V2).unwrap()[0], 0x82);
        assert!(bin.is_binary(Vsn::V2) && !b.is_binary(Vsn::V2) && !b.is_binary(Vsn::V1));
    }

    #[test]
    fn compresses_once_and_only_what_shrinks() {
        let json = format!("{{\"body\":\"{}\"}}", "hello ".repeat(200));
        let b = Broadcast::new("t".into(), "e".into(), OwnedPayload::Json(json), None);
        let (f, compressed) = b.frame_deflated(Vsn::V2).unwrap();
        assert!(compressed && f[0] == 0xc1 && f.len() < 200, "{}", f.len());
        let again = b.frame_deflated(Vsn::V2).unwrap().0;
        assert!(std::ptr::eq(f, again), "compressed once");
        assert_eq!(b.frame_as(Vsn::V2, true), Some(f));
        let body = throng_protocol::deflate::inflate_once(&f[2..], 1 << 20).unwrap();
        assert_eq!(body, b.body(Vsn::V2).unwrap());
        let small = Broadcast::new("t".into(), "e".into(), OwnedPayload::empty(), None);
        assert_eq!(
            small.frame_deflated(Vsn::V2),
            Some((small.frame(Vsn::V2).unwrap(), false))
        );
    }

    #[test]
    fn a_position_is_the_ref_of_the_one_encoding() {
        let json = OwnedPayload::Json("{}".into());
        let b = Broadcast::positioned("t".into(), "e".into(), json, None, Some(("ab.7", 7)));
        assert_eq!(b.offset, 7);
        assert_eq!(b.body(Vsn::V2).unwrap(), br#"[null,"ab.7","t","e",{}]"#);
        assert_eq!(
            b.body(Vsn::V1).unwrap(),
            br#"{"event":"e","payload":{},"ref":"ab.7","topic":"t"}"#
        );
        let bin = OwnedPayload::Binary(vec![1]);
        let b = Broadcast::positioned("t".into(), "e".into(), bin, None, Some(("ab.8", 8)));
        assert!(b.is_binary(Vsn::V2) && b.offset == 8);
    }

    #[test]
    fn a_pusher_channel_gets_its_frame_as_made() {
        let frame = r#"{"event":"e","channel":"c","data":"{}"}"#;
        let b = Broadcast::new(
            "pusher/1/c".into(),
            "e".into(),
            OwnedPayload::Json(frame.into()),
            None,
        );
        assert_eq!(b.body(Wire::Pusher).unwrap(), frame.as_bytes());
        assert!(b.frame(Vsn::V1).is_none() && b.frame(Vsn::V2).is_none());
        let phx = Broadcast::new("t".into(), "e".into(), OwnedPayload::empty(), None);
        assert!(phx.frame(Wire::Pusher).is_none());
    }

    #[test]
    fn live_bytes_count_what_broadcasts_hold() {
        // Other tests make broadcasts at the same time: compare with this one's own size.
        let b = Broadcast::new(
            "t".into(),
            "e".into(),
            OwnedPayload::Json("x".repeat(1 << 20)),
            None,
        );
        assert!(b.held() > 3 << 20, "payload and two frames: {}", b.held());
        assert!(live_bytes() >= b.held());
    }

    #[test]
    fn long_bodies_skip_the_long_header() {
        let big = format!("{{\"b\":\"{}\"}}", "x".repeat(70_000));
        let b = Broadcast::new(
            "t".into(),
            "e".into(),
            OwnedPayload::Json(big.clone()),
            None,
        );
        let body = b.body(Vsn::V2).unwrap();
        assert!(body.starts_with(b"[null,null,"));
        assert_eq!(b.frame(Vsn::V2).unwrap().len() - body.len(), 10);
        assert_eq!(b.frame_len(), b.frame(Vsn::V1).unwrap().len());
    }
}
