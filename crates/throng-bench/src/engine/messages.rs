//! The Phoenix messages on a connection: sends rendered from the program's
//! templates (joins and pushes tracked by their ref, stamped broadcasts,
//! heartbeats), replies timed against the tracked ref, broadcasts timed by
//! their stamp, presence messages handed to `presence`.

use serde::Deserialize;
use throng_protocol::frame::Opcode;
use throng_protocol::{serializer, Payload, Vsn};

use super::conn::{State, F_AWAIT_JOIN, F_PRESENCE_JOIN};
use super::presence::F_COUNT_SEEN;
use super::Engine;
use crate::presence::Kind;
use crate::scenario::{find_stamp, Op, SendKind, Vars};
use crate::slots::Slots;
use crate::sys;

/// The kind byte of a v2 binary reply (push 0, reply 1, broadcast 2).
const BINARY_REPLY: u8 = 1;

#[derive(Deserialize)]
struct ReplyStatus<'a> {
    #[serde(borrow)]
    status: std::borrow::Cow<'a, str>,
}

impl Engine {
    /// One message from the server: a reply, an error, or a push (timed if
    /// it carries a broadcast stamp).
    pub(super) fn on_message(&mut self, token: usize, opcode: Opcode, data: &[u8]) {
        if self.pusher.is_some() {
            return self.on_pusher_message(token, data);
        }
        let vsn = self.conns[token].vsn();
        let Ok(msg) = serializer::decode(vsn, opcode, data, serializer::Sender::Server) else {
            self.counters.errors.other += 1;
            return;
        };
        // A reply, and whether it says `ok`. A v2 binary reply (kind byte
        // 1 in Phoenix's `V2.JSONSerializer`) decodes with its status where
        // other messages carry their event, so it is told by its kind.
        let reply_ok = if opcode == Opcode::Binary && vsn == Vsn::V2 {
            (data.first() == Some(&BINARY_REPLY)).then(|| msg.event == "ok")
        } else if msg.event == "phx_reply" {
            Some(match msg.payload {
                Payload::Json(p) => serde_json::from_str::<ReplyStatus>(p)
                    .map(|s| s.status == "ok")
                    .unwrap_or(false),
                Payload::Binary(_) => false,
            })
        } else {
            None
        };
        if let Some(ok) = reply_ok {
            let r = msg.msg_ref.as_deref().and_then(|r| r.parse::<u32>().ok());
            self.on_reply(token, r, ok);
            return;
        }
        match &*msg.event {
            "phx_error" => self.counters.errors.error_reply += 1,
            "phx_close" => {}
            e @ ("presence_state" | "presence_diff" | "presence_count") => {
                if let Payload::Json(p) = msg.payload {
                    self.on_presence(token, Kind::of(e.as_bytes()), data, p);
                }
            }
            _ => {
                if let Payload::Json(p) = msg.payload {
                    if let Some((key, sent_ns)) = find_stamp(p.as_bytes()) {
                        self.on_broadcast(key, sent_ns);
                    }
                }
            }
        }
    }

    /// A reply to `msg_ref`: timed and counted if it is the one the
    /// connection tracks (a join's, or a waited push's).
    pub(super) fn on_reply(&mut self, token: usize, msg_ref: Option<u32>, ok: bool) {
        let c = &mut self.conns[token];
        if c.await_ref == 0 || msg_ref != Some(c.await_ref) {
            return;
        }
        let us = self
            .epoch
            .elapsed()
            .as_micros()
            .saturating_sub(c.mark_us as u128)
            .max(1) as u64;
        if c.flags & F_AWAIT_JOIN != 0 {
            self.hists.join.saturating_record(us);
            if ok && c.flags & F_PRESENCE_JOIN != 0 {
                let sent_ns = self.epoch_rt_ns + c.mark_us * 1000;
                self.presence.joins.push((c.user, sent_ns));
            }
            if ok {
                self.counters.joined += 1;
                Slots::bump(&mut self.slots.joins, self.arrivals.started_at);
                if let Some(t0) = self.arrivals.started_at {
                    self.counters.last_join_secs = t0.elapsed().as_secs_f64();
                }
            }
        } else {
            self.hists.reply.saturating_record(us);
        }
        if !ok {
            self.counters.errors.error_reply += 1;
        }
        c.await_ref = 0;
        c.flags &= !(F_AWAIT_JOIN | F_PRESENCE_JOIN);
        if c.state == State::Awaiting {
            c.state = State::Running;
        }
    }

    /// Renders and sends one `Send` op: tracks its ref when asked (a join
    /// or a waited push), records a stamped broadcast as sent.
    pub(super) fn send_op(&mut self, token: usize, op: &Op) {
        let &Op::Send {
            ref tpl,
            opcode,
            kind,
            track,
            fixed_ref,
            stamp,
            presence,
            ref auth,
            ..
        } = op
        else {
            return;
        };
        // A Pusher private channel's subscription: signed for this socket.
        let auth = match (auth, self.pusher.as_mut()) {
            (Some(channel), Some(p)) => p.auth(token, channel),
            _ => String::new(),
        };
        let now_us = self.now_us();
        let c = &mut self.conns[token];
        c.next_ref = c.next_ref.wrapping_add(1).max(1);
        let r = fixed_ref.unwrap_or(c.next_ref);
        if kind == SendKind::Join {
            c.join_ref = r;
            // A new join: its presence_count comes first (see `presence`).
            c.flags &= !F_COUNT_SEEN;
        }
        let now_ns = if stamp { sys::realtime_ns() } else { 0 };
        self.tbuf.clear();
        tpl.render(
            &mut self.tbuf,
            &Vars {
                user_id: c.user as u64,
                msg_ref: r,
                join_ref: c.join_ref,
                now_ns,
                auth: &auth,
            },
        );
        if track {
            c.await_ref = r;
            c.mark_us = now_us;
            c.flags &= !(F_AWAIT_JOIN | F_PRESENCE_JOIN);
            if kind == SendKind::Join {
                c.flags |= F_AWAIT_JOIN;
                if presence {
                    c.flags |= F_PRESENCE_JOIN;
                }
            }
        }
        if stamp {
            self.counters.bcast_sent += 1;
            let key = ((c.user as u64) << 32) | r as u64;
            self.bcasts.entry(key).or_default().sent_ns = now_ns;
            // Pusher relays a client event to every subscriber but its sender.
            if self.pusher.is_some() && kind == SendKind::Push {
                self.counters.bcast_unechoed += 1;
            }
        }
        if kind == SendKind::Trigger {
            if let Some(p) = &self.pusher {
                self.counters.msgs_out += 1;
                p.trigger(&self.tbuf);
            }
            return;
        }
        self.send_frame(token, opcode);
    }

    /// Sends a heartbeat on topic `phoenix`.
    pub(super) fn send_heartbeat(&mut self, token: usize) {
        let c = &mut self.conns[token];
        c.next_ref = c.next_ref.wrapping_add(1).max(1);
        let v = Vars {
            user_id: c.user as u64,
            msg_ref: c.next_ref,
            join_ref: c.join_ref,
            now_ns: 0,
            auth: "",
        };
        let i = c.vsn().index();
        self.tbuf.clear();
        match &self.pusher {
            Some(p) => p.ping.render(&mut self.tbuf, &v),
            None => self.hb_tpl[i].render(&mut self.tbuf, &v),
        }
        if c.state.is_floor() {
            // The floor's: no message of the run.
            self.counters.floor_hb_sent += 1;
            self.write_frame(token, Opcode::Text);
        } else {
            self.counters.hb_sent += 1;
            self.send_frame(token, Opcode::Text);
        }
    }
}
