//! The floor: what the same fan-out costs this machine with no server
//! logic at all, measured in the same run as the broadcasts, so that a
//! broadcast's time to its last receiver reads as a ratio to it.
//!
//! A broadcast on loopback costs the kernel's TCP path per receiver, twice
//! (the server's send and the agent's receive run on the same cores), and
//! on two cores that price alone can exceed the server's own work many
//! times over. The floor measures that price: before the ramp-up, each
//! agent opens one plain TCP socket per user it will run (same source
//! addresses, same count) to minimal **floor writers** instead of the
//! server, and each writer, on the controller's word, writes the very frame
//! a broadcast would carry (the same serializer, topic, event and payload
//! size, stamped) to each of its sockets, one `write` each, from as many
//! threads as the server has shards per process; the agents decode and time
//! it exactly as they time a broadcast. One writer process per server
//! process (with `--workers`, as many writers as workers), no Phoenix
//! protocol, no registry, no queue: what remains is the kernel and the
//! readers. The sockets are reset afterwards, before any user arrives.
//!
//! The broadcasts run over the users' heartbeats (phoenix.js's, 30 s apart,
//! tens of thousands a second at 1M), so the floor does too: the agents
//! heartbeat on the floor's sockets on the users' schedule, and the writing
//! threads answer each with one fixed reply frame (`writer/thread.rs`), the
//! least any server must do for one. `--heartbeat 0` measures both without.
//!
//! Over Pusher (`--protocol pusher`) the frame is the event frame every
//! subscriber receives (the same channel, event name and data, stamped),
//! and the heartbeat's answer `pusher:pong`.
//!
//! This module holds what the three sides share: the frame a floor writer
//! writes ([`FloorFrame`]) and its orders ([`FloorOrder`]). The writer
//! process (`throng agent --floor-writer`, started by the controller like an
//! agent and linked the same way) is in `writer/`; the agents' side is in
//! `engine/floor.rs`, the controller's in `controller/floor.rs`.

use serde::{Deserialize, Serialize};
use throng_protocol::frame::{encode_frame, Opcode};
use throng_protocol::{serializer, Payload, Vsn};

use crate::error::BenchError;
use crate::pusher::{self, Trigger};
use crate::scenario::{vsn_name, Scenario, Step, Template, Vars};

/// The frame a broadcast of the run carries, to be written by the floor writers.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FloorFrame {
    #[serde(with = "vsn_name")]
    pub vsn: Vsn,
    pub topic: String,
    pub event: String,
    /// The payload template (with `%%stamp%%`).
    pub payload: String,
    /// Over Pusher (`--protocol pusher`): how the broadcast is sent, which
    /// names its event; the frame is then Pusher's event frame, and the
    /// heartbeat's answer `pusher:pong`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pusher: Option<Trigger>,
}

impl FloorFrame {
    /// The frame of the scenario's first publish (the built-in scenario's
    /// `new:msg` on `rooms:lobby` when it has none).
    pub fn of(sc: &Scenario) -> FloorFrame {
        fn first(steps: &[Step]) -> Option<(&str, &str, &str)> {
            steps.iter().find_map(|s| match s {
                Step::Publish {
                    topic,
                    event,
                    payload,
                    ..
                } => Some((topic.as_str(), event.as_str(), payload.as_str())),
                Step::Loop { steps, .. } => first(steps),
                _ => None,
            })
        }
        let (topic, event, payload) = sc.roles.iter().find_map(|r| first(&r.session)).unwrap_or((
            "rooms:lobby",
            "new:msg",
            r#"{"user":"%%user_id%%","body":"%%stamp%%"}"#,
        ));
        FloorFrame {
            vsn: sc.serializer,
            topic: topic.into(),
            event: event.into(),
            payload: payload.into(),
            pusher: sc.pusher.as_ref().map(|p| p.trigger),
        }
    }

    /// Round `round`'s frame, stamped `stamp_ns` (writer 0, ref `round`),
    /// as the server would frame the broadcast.
    pub fn render(&self, round: u32, stamp_ns: u64) -> Result<Vec<u8>, BenchError> {
        let tpl = Template::parse(&self.payload)?;
        let mut payload = Vec::new();
        tpl.render(
            &mut payload,
            &Vars {
                user_id: 0,
                msg_ref: round,
                join_ref: 0,
                now_ns: stamp_ns,
                auth: "",
            },
        );
        let payload = String::from_utf8(payload)
            .map_err(|_| BenchError::Scenario("a publish payload is not UTF-8".into()))?;
        let mut msg = Vec::new();
        if let Some(trigger) = self.pusher {
            pusher::event_frame(&mut msg, trigger, &self.event, &self.topic, &payload);
            let mut frame = Vec::with_capacity(msg.len() + 10);
            encode_frame(&mut frame, Opcode::Text, &msg, None);
            return Ok(frame);
        }
        let opcode = serializer::encode_broadcast(
            self.vsn,
            &mut msg,
            &self.topic,
            &self.event,
            Payload::Json(&payload),
        )
        .map_err(|e| BenchError::Scenario(format!("the floor's frame: {e}")))?;
        let mut frame = Vec::with_capacity(msg.len() + 10);
        encode_frame(&mut frame, opcode, &msg, None);
        Ok(frame)
    }

    /// The frame answering a heartbeat, as the server frames it (one ref
    /// for all: the agents do not match the floor's replies).
    pub fn heartbeat_reply(&self) -> Result<Vec<u8>, BenchError> {
        let mut msg = Vec::new();
        if self.pusher.is_some() {
            throng_protocol::pusher::server::pong(&mut msg);
            let mut frame = Vec::with_capacity(msg.len() + 2);
            encode_frame(&mut frame, Opcode::Text, &msg, None);
            return Ok(frame);
        }
        let opcode = serializer::encode_reply(
            self.vsn,
            &mut msg,
            None,
            Some("1"),
            "phoenix",
            "ok",
            Payload::Json("{}"),
        )
        .map_err(|e| BenchError::Scenario(format!("the floor's heartbeat reply: {e}")))?;
        let mut frame = Vec::with_capacity(msg.len() + 10);
        encode_frame(&mut frame, opcode, &msg, None);
        Ok(frame)
    }
}

/// A floor writer's orders.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FloorOrder {
    /// Sockets to accept.
    pub expect: u64,
    /// Threads writing (the server's shards per process).
    pub threads: u32,
    pub frame: FloorFrame,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{chat, find_stamp, Phase};

    #[test]
    fn the_floor_frame_is_the_broadcast_frame() {
        let sc = chat(Phase::at_rate(10, 100.0), 1, 3, 0.1, Vsn::V2);
        let f = FloorFrame::of(&sc);
        assert_eq!(
            (f.topic.as_str(), f.event.as_str()),
            ("rooms:lobby", "new:msg")
        );
        let frame = f.render(2, 1_700_000_000_000_000_000).unwrap();
        // A server text frame (FIN, opcode 1, unmasked) with a v2 broadcast.
        assert_eq!(frame[0], 0x81);
        let body = std::str::from_utf8(&frame[2..]).unwrap();
        assert!(
            body.starts_with(r#"[null,null,"rooms:lobby","new:msg",{"#),
            "{body}"
        );
        assert_eq!(frame[1] as usize, body.len());
        let (key, sent) = find_stamp(body.as_bytes()).unwrap();
        assert_eq!((key, sent), (2, 1_700_000_000_000_000_000));
        // v1, and a scenario without a publish: the built-in frame.
        let mut v1 = chat(Phase::at_rate(10, 100.0), 0, 0, 0.1, Vsn::V1);
        v1.roles.truncate(1);
        let f = FloorFrame::of(&v1);
        assert_eq!(f.vsn, Vsn::V1);
        let frame = f.render(1, 5).unwrap();
        assert!(std::str::from_utf8(&frame[2..])
            .unwrap()
            .contains(r#""topic":"rooms:lobby""#));
    }
}
