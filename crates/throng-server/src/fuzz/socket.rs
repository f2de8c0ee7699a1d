//! Target `phoenix_socket`: the Phoenix message layer as one function of
//! bytes. It runs the code a shard runs on a WebSocket's input, with the
//! socket replaced by a recording transport: frames (decoded with the
//! shard's bound on a message in progress), `ws::on_frame` (fragments,
//! control frames, UTF-8), the serializer, the ref bound, and the Phoenix
//! socket state machine with the chat app and a channel that pushes,
//! broadcasts and sends itself infos. Invariants it asserts on every input:
//! nothing panics; a socket holds at most its channel cap and its join
//! budget; a message in progress never exceeds the message limit; every
//! message the server sends decodes as a Phoenix message of the socket's
//! serializer.
//!
//! Input layout: byte 0 picks the serializer, the limits and the mode; in
//! raw mode the rest is the client's byte stream as is (masking and all),
//! fed in two reads split where byte 1 says; in framed mode it is a list of
//! frames, each `[fin|opcode] [len] [payload...]`, masked here, so the
//! fuzzer spends its time on messages instead of on mask bits.

use std::collections::HashMap;
use std::sync::Arc;

use throng_protocol::frame::{decode_frame, decode_frame_with, encode_frame, Opcode, Role};
use throng_protocol::serializer::{self, Sender};
use throng_protocol::{OwnedPayload, Payload, Vsn};
use throng_pubsub::{Broadcast, LocalPresence, Registry, Slot, Tracker};

use crate::channel::{Channel, Info, Reply, Socket, Who};
use crate::engine::pending::Extra;
use crate::engine::ws::{on_frame, FrameAction};
use crate::metrics::ShardStats;
use crate::protocol::phoenix::socket::{Cx, Join, Mux, Scratch, Tracked, Transport};

/// A transport that keeps the registry and checks what would be sent.
struct Recorder {
    registry: Registry,
    stats: ShardStats,
    vsn: Vsn,
    tracker: Arc<Tracker>,
    tracked: HashMap<u32, Tracked>,
}

impl Recorder {
    fn check_sent(&self, opcode: Opcode, body: &[u8]) {
        if let Err(e) = serializer::decode(self.vsn, opcode, body, Sender::Server) {
            panic!(
                "the server sent what its own serializer cannot read ({e}): {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
}

impl Transport for Recorder {
    fn subscribe(&mut self, topic: &str) -> Slot {
        self.registry.subscribe(topic, 1).0
    }
    fn unsubscribe(&mut self, slot: Slot) {
        self.registry.unsubscribe(slot);
    }
    fn topic_index(&self, topic: &str) -> Option<u32> {
        self.registry.find(topic)
    }
    fn topic_name(&self, index: u32) -> Option<Arc<str>> {
        self.registry.name(index).cloned()
    }
    fn send(&mut self, opcode: Opcode, body: &[u8]) {
        self.check_sent(opcode, body);
    }
    fn broadcast(&mut self, topic: Arc<str>, event: String, payload: OwnedPayload, _: bool) {
        let b = Broadcast::new(topic, event, payload, None);
        if let Some(frame) = b.frame(self.vsn) {
            let mut frame = frame.to_vec();
            let f = decode_frame(&mut frame, Role::Client, u64::MAX)
                .expect("a broadcast frame")
                .expect("a whole frame");
            self.check_sent(f.opcode, &frame[f.payload]);
        }
    }
    fn stats(&self) -> &ShardStats {
        &self.stats
    }
    fn tracker(&self) -> &Tracker {
        &self.tracker
    }
    fn tracked(&mut self, index: u32) -> &mut Tracked {
        self.tracked.entry(index).or_default()
    }
    fn take_tracked(&mut self, index: u32) -> Tracked {
        self.tracked.remove(&index).unwrap_or_default()
    }
    fn send_shared(&mut self, opcode: Opcode, head: &[u8], shared: &Arc<str>, tail: &[u8]) {
        let mut body = head.to_vec();
        body.extend_from_slice(shared.as_bytes());
        body.extend_from_slice(tail);
        self.check_sent(opcode, &body);
    }
    fn presence_started(&mut self) {}
}

/// A channel that does a bit of everything a channel may do.
struct Busy;

impl Channel for Busy {
    fn join(&self, topic: &str, payload: Payload<'_>, socket: &mut Socket<'_>) -> Reply {
        if topic.ends_with(":secret") {
            return Err(OwnedPayload::Json(r#"{"reason":"unauthorized"}"#.into()));
        }
        socket.assign(0u32);
        if let Payload::Json(p) = payload {
            if p.contains("after") {
                socket.send_info("after_join");
            }
        }
        Ok(OwnedPayload::empty())
    }

    fn handle_in(
        &self,
        event: &str,
        payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Option<Reply> {
        if let Some(n) = socket.assigns_mut::<u32>() {
            *n += 1;
        }
        let owned = OwnedPayload::from(payload);
        match event {
            "shout" => socket.broadcast("shout", owned),
            "whisper" => socket.broadcast_from("whisper", owned),
            "push" => socket.push("pushed", owned),
            "loop" => socket.send_info("loop"),
            "noreply" => return None,
            _ => return Some(Err(owned)),
        }
        Some(Ok(OwnedPayload::empty()))
    }

    fn handle_info(&self, msg: &Info, socket: &mut Socket<'_>) {
        if msg.downcast_ref::<&str>() == Some(&"loop") {
            socket.send_info("loop");
        }
        socket.push("info", OwnedPayload::empty());
    }
}

/// Feeds `data` to one socket's message layer; panics if an invariant breaks.
pub fn phoenix_socket(data: &[u8]) {
    let Some((&conf, rest)) = data.split_first() else {
        return;
    };
    let vsn = if conf & 1 == 0 { Vsn::V1 } else { Vsn::V2 };
    let max_channels = 1 + ((conf >> 1) & 3) as usize;
    let max_join_bytes = if conf & 8 == 0 { 300 } else { 1 << 16 };
    let max_message = [125, 300, 4096, 65536][((conf >> 4) & 3) as usize];
    let max_ref = 64;
    let stream = if conf & 0x40 == 0 {
        framed(rest)
    } else {
        rest.to_vec()
    };
    let split = rest.first().map_or(0, |&b| b as usize % (stream.len() + 1));

    let router = crate::protocol::phoenix::chat::router().channel("room:*", Busy);
    let policy = crate::rules::Policy::default();
    let cx = Cx {
        router: &router,
        policy: &policy,
        vsn,
        who: Who::default(),
        max_channels,
        max_join_bytes,
        presence: &[],
        max_presence_bytes: 1024,
        max_json_depth: 128,
    };
    let mut t = Recorder {
        registry: Registry::default(),
        stats: ShardStats::default(),
        vsn,
        tracker: Tracker::new(Arc::new(LocalPresence::new())),
        tracked: HashMap::new(),
    };
    let mut joins = crate::protocol::phoenix::socket::Joins::new();
    let mut scratch = Scratch::default();
    let mut extra: Option<Box<Extra>> = None;
    let mut inflater = throng_protocol::deflate::Inflater::default();
    let mut inflated = Vec::new();
    let mut input: Vec<u8> = Vec::new();
    for chunk in [&stream[..split], &stream[split..]] {
        input.extend_from_slice(chunk);
        let mut pos = 0;
        loop {
            // The shard's bound on a message in progress (engine/shard/input.rs).
            let frag = extra
                .as_ref()
                .and_then(|e| e.frag.as_ref())
                .map_or(0, |(_, f)| f.len());
            assert!(frag <= max_message, "a fragment of {frag} bytes is kept");
            let frame_max = max_message.saturating_sub(frag).max(125);
            // As a socket that negotiated permessage-deflate: RSV1 allowed.
            let f = match decode_frame_with(&mut input[pos..], Role::Server, frame_max as u64, true)
            {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => return,
            };
            let payload = pos + f.payload.start..pos + f.payload.end;
            pos += f.consumed;
            let action = on_frame(
                &mut extra,
                f.fin,
                f.opcode,
                f.compressed,
                &input[payload],
                max_message,
            );
            // A compressed message inflates within the bound or closes.
            let action = match action {
                FrameAction::Compressed(op, data) => {
                    match inflater.inflate(&data, max_message, &mut inflated) {
                        Ok(()) => {
                            assert!(inflated.len() <= max_message, "inflated past the bound");
                            crate::engine::ws::checked(
                                op,
                                std::borrow::Cow::Owned(inflated.clone()),
                            )
                        }
                        Err(_) => return, // closed with 1009 or 1007
                    }
                }
                action => action,
            };
            match action {
                FrameAction::Message(opcode, bytes) => {
                    let Ok(msg) = serializer::decode(vsn, opcode, &bytes, Sender::Client) else {
                        return; // closed with 1007
                    };
                    if crate::limits::check_refs(&msg, max_ref).is_err() {
                        return; // closed with 1008
                    }
                    let mut mux = Mux {
                        cx,
                        t: &mut t,
                        joins: &mut joins,
                        scratch: &mut scratch,
                    };
                    mux.handle_in(msg);
                    assert!(joins.len() <= max_channels, "{} joins", joins.len());
                    let held: usize = joins
                        .iter()
                        .map(|j| {
                            std::mem::size_of::<Join>()
                                + j.join_ref.as_ref().map_or(0, throng_protocol::RefBuf::len)
                                + t.topic_name(j.slot.topic).map_or(0, |n| n.len())
                        })
                        .sum();
                    assert!(held <= max_join_bytes, "joins hold {held} bytes");
                }
                FrameAction::Fail(..) | FrameAction::Close(_) => return,
                FrameAction::Ping(_) | FrameAction::None | FrameAction::Compressed(..) => {}
            }
        }
        input.drain(..pos);
    }
    Mux {
        cx,
        t: &mut t,
        joins: &mut joins,
        scratch: &mut scratch,
    }
    .close();
}

/// Masked client frames from `[fin|opcode] [len] [payload]` records.
fn framed(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let [head, len, rest @ ..] = data {
        let n = (*len as usize).min(rest.len());
        let opcode = match head & 0x0f {
            0 => Opcode::Continuation,
            1 => Opcode::Text,
            2 => Opcode::Binary,
            8 => Opcode::Close,
            9 => Opcode::Ping,
            10 => Opcode::Pong,
            _ => Opcode::Text,
        };
        let start = out.len();
        encode_frame(&mut out, opcode, &rest[..n], Some([7, 1, 9, 3]));
        if head & 0x80 != 0 {
            out[start] &= 0x7f; // not final
        }
        data = &rest[n..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_a_session_on_both_serializers() {
        for conf in [0x01u8, 0x00, 0x3f, 0x08] {
            let mut input = vec![conf];
            let v2 = [
                r#"["1","1","room:a","phx_join",{"after":1}]"#,
                r#"["1","2","room:a","shout",{"x":1}]"#,
                r#"["1","3","room:a","loop",{}]"#,
                r#"[null,"4","phoenix","heartbeat",{}]"#,
                r#"["5","5","rooms:lobby","phx_join",{}]"#,
                r#"["5","6","rooms:lobby","new:msg",{"user":"u","body":"b"}]"#,
            ];
            let v1 = [
                r#"{"topic":"room:a","event":"phx_join","payload":{},"ref":"1"}"#,
                r#"{"topic":"room:a","event":"push","payload":{},"ref":"2"}"#,
            ];
            let texts: &[&str] = if conf & 1 == 1 { &v2 } else { &v1 };
            for t in texts {
                input.push(0x01);
                input.push(t.len() as u8);
                input.extend_from_slice(t.as_bytes());
            }
            phoenix_socket(&input);
        }
        phoenix_socket(&[]);
        phoenix_socket(&[0x40, 0x81, 0x85]);
    }
}
