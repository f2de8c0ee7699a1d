//! A soak session's channels, whatever carries them (a WebSocket or a
//! long-poll session): the topics it joined with their join_refs, the refs
//! waiting for a reply, the messages to send next, and what a session does
//! ([`Action`]). Each message received goes through [`Channels::message`]:
//! a reply is matched to what it answers and counted, a broadcast is
//! counted, and on the slot's history topic its ref is kept as the `since`
//! of the slot's next join there.

use serde::Deserialize;

use super::shared::{exp, Shared};
use super::{Topics, API_EVENT, HOOK_EVENT, PUSH_EVENT};

/// What a session does next (besides heartbeats).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Push to the room (the relay broadcasts it).
    PushRoom,
    /// Push to the hooked topic (the backend answers with a broadcast);
    /// to the room when the session has no hooked topic.
    PushHooked,
    /// Leave the room and join another.
    ChangeRoom,
    /// Leave the presence topic, or join one.
    TogglePresence,
}

impl Action {
    pub(super) fn draw(rng: &mut fastrand::Rng) -> Action {
        match rng.u32(0..20) {
            0..=6 => Action::PushRoom,
            7..=10 => Action::PushHooked,
            11..=15 => Action::ChangeRoom,
            _ => Action::TogglePresence,
        }
    }
}

/// The topics a session of slot `g` joins first: a room; by chance a
/// presence topic and a hooked topic; its history topic on every other slot.
pub(super) fn first_topics(t: &Topics, g: u64, rng: &mut fastrand::Rng) -> Vec<String> {
    let mut v = vec![Topics::room(rng.u32(0..t.rooms))];
    if rng.bool() {
        v.push(Topics::presence(rng.u32(0..t.presence)));
    }
    if rng.u32(0..3) == 0 {
        v.push(Topics::hooked(rng.u32(0..t.hooked)));
    }
    if let Some(h) = history_topic(t, g) {
        v.push(h);
    }
    v
}

/// Slot `g`'s history topic, if it keeps one.
pub(super) fn history_topic(t: &Topics, g: u64) -> Option<String> {
    g.is_multiple_of(2)
        .then(|| Topics::history(((g / 2) % u64::from(t.history)) as u32))
}

/// What a sent message waits for.
#[derive(Debug)]
enum Sent {
    Join { topic: String, with_since: bool },
    Leave,
    Push,
    Heartbeat,
}

/// The parts of a Phoenix v2 message a session reads.
#[derive(Deserialize)]
struct Message<'a>(
    serde::de::IgnoredAny,
    #[serde(borrow)] Option<&'a str>,
    &'a str,
    &'a str,
    Body,
);

/// A payload: a reply's status and `recovered`; nothing of other messages.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    status: Option<String>,
    response: Option<Response>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Response {
    recovered: Option<bool>,
    /// An error reply's reason.
    reason: Option<String>,
}

impl Body {
    /// The reply as words: `ok`, or its status and reason.
    fn said(&self) -> String {
        let status = self.status.as_deref().unwrap_or("no status");
        match self.response.as_ref().and_then(|r| r.reason.as_deref()) {
            Some(reason) => format!("{status} ({reason})"),
            None => status.to_string(),
        }
    }
}

/// A session's channels.
pub(super) struct Channels<'a> {
    pub sh: &'a Shared,
    g: u64,
    next_ref: u64,
    /// Topics joined (or joining), with their join_ref and whether their
    /// join was answered `ok` (pushes go only to those, as phoenix.js
    /// holds them until then).
    joined: Vec<(String, String, bool)>,
    /// Refs sent, waiting for their reply.
    waiting: Vec<(String, Sent)>,
    /// The slot's history topic, and the last ref it saw there.
    history: Option<String>,
    since: &'a mut Option<String>,
    /// Messages to send, each a Phoenix v2 JSON array.
    pub outbox: Vec<String>,
}

impl<'a> Channels<'a> {
    /// Slot `g`'s channels, keeping `since` for its next session.
    pub fn new(sh: &'a Shared, g: u64, since: &'a mut Option<String>) -> Channels<'a> {
        Channels {
            sh,
            g,
            next_ref: 0,
            joined: Vec::new(),
            waiting: Vec::new(),
            history: history_topic(&sh.orders.topics, g),
            since,
            outbox: Vec::new(),
        }
    }

    fn next_ref(&mut self) -> String {
        self.next_ref += 1;
        self.next_ref.to_string()
    }

    /// Queues a message (topics, refs and events here need no escaping).
    fn queue(&mut self, join_ref: Option<&str>, r: &str, topic: &str, event: &str, payload: &str) {
        let jr = join_ref.map_or("null".to_string(), |j| format!("\"{j}\""));
        self.outbox
            .push(format!("[{jr},\"{r}\",\"{topic}\",\"{event}\",{payload}]"));
    }

    /// The first joins of a session.
    pub fn join_first(&mut self, rng: &mut fastrand::Rng) {
        for topic in first_topics(&self.sh.orders.topics, self.g, rng) {
            self.join(topic);
        }
    }

    fn join(&mut self, topic: String) {
        let jr = self.next_ref();
        let with_since = self.history.as_deref() == Some(topic.as_str()) && self.since.is_some();
        let payload = match (&*self.since, with_since) {
            (Some(s), true) => format!("{{\"since\":\"{s}\"}}"),
            _ => "{}".to_string(),
        };
        self.queue(Some(&jr), &jr, &topic, "phx_join", &payload);
        let sent = Sent::Join {
            topic: topic.clone(),
            with_since,
        };
        self.waiting.push((jr.clone(), sent));
        self.joined.push((topic, jr, false));
    }

    /// Leaves the joined topic that starts with `prefix`, if any.
    fn leave(&mut self, prefix: &str) -> bool {
        let Some(i) = self.joined.iter().position(|(t, ..)| t.starts_with(prefix)) else {
            return false;
        };
        let (topic, jr, _) = self.joined.swap_remove(i);
        let r = self.next_ref();
        self.queue(Some(&jr), &r, &topic, "phx_leave", "{}");
        self.waiting.push((r, Sent::Leave));
        true
    }

    /// Pushes `event` to the joined topic that starts with `prefix`, if any.
    fn push(&mut self, prefix: &str, event: &str) -> bool {
        let Some((topic, jr, _)) = self
            .joined
            .iter()
            .find(|(t, _, ok)| *ok && t.starts_with(prefix))
            .cloned()
        else {
            return false;
        };
        let r = self.next_ref();
        let payload = format!("{{\"body\":\"hello from u{}\",\"n\":{r}}}", self.g);
        self.queue(Some(&jr), &r, &topic, event, &payload);
        self.waiting.push((r, Sent::Push));
        self.sh.count(|s| s.pushes += 1);
        true
    }

    pub fn heartbeat(&mut self) {
        let r = self.next_ref();
        self.queue(None, &r, "phoenix", "heartbeat", "{}");
        self.waiting.push((r, Sent::Heartbeat));
    }

    /// Does what a draw of [`Action`] says.
    pub fn act(&mut self, rng: &mut fastrand::Rng) {
        let t = self.sh.orders.topics;
        match Action::draw(rng) {
            Action::PushRoom => {
                self.push("soak:room:", PUSH_EVENT);
            }
            Action::PushHooked => {
                if !self.push("soak:hook:", HOOK_EVENT) {
                    self.push("soak:room:", PUSH_EVENT);
                }
            }
            Action::ChangeRoom => {
                self.leave("soak:room:");
                self.join(Topics::room(rng.u32(0..t.rooms)));
            }
            Action::TogglePresence => {
                if !self.leave("soak:pres:") {
                    self.join(Topics::presence(rng.u32(0..t.presence)));
                }
            }
        }
    }

    /// The next action's delay.
    pub fn next_action(&self, rng: &mut fastrand::Rng) -> std::time::Duration {
        std::time::Duration::from_secs_f64(exp(rng, self.sh.orders.action_secs))
    }

    /// Handles one message: a reply to what it answers, a broadcast counted
    /// (and its ref kept, on the history topic).
    pub fn message(&mut self, text: &[u8]) {
        let Ok(Message(_, r, topic, event, body)) = serde_json::from_slice::<Message>(text) else {
            self.sh.error(format!(
                "a message I cannot read: {}",
                String::from_utf8_lossy(&text[..text.len().min(200)])
            ));
            return;
        };
        match event {
            "phx_reply" => {
                let Some(i) = r.and_then(|r| self.waiting.iter().position(|(w, _)| w == r)) else {
                    return;
                };
                let (r, sent) = self.waiting.swap_remove(i);
                if let Sent::Join { .. } = sent {
                    self.joined(&r, body.status.as_deref() == Some("ok"));
                }
                self.reply(sent, &body, topic);
            }
            "phx_close" => {}
            "phx_error" => self.sh.error(format!("phx_error on {topic}")),
            _ => {
                self.sh.count(|s| s.received += 1);
                if event == API_EVENT && self.history.as_deref() == Some(topic) {
                    if let Some(r) = r {
                        *self.since = Some(r.to_string());
                    }
                }
            }
        }
    }

    /// The join of join_ref `jr` was answered: `ok`, or refused (then it
    /// is not joined).
    fn joined(&mut self, jr: &str, ok: bool) {
        if let Some(i) = self.joined.iter().position(|(_, j, _)| j == jr) {
            if ok {
                self.joined[i].2 = true;
            } else {
                self.joined.swap_remove(i);
            }
        }
    }

    /// Counts a reply to `sent`.
    fn reply(&self, sent: Sent, body: &Body, topic: &str) {
        let sh = self.sh;
        let ok = body.status.as_deref() == Some("ok");
        match sent {
            Sent::Join { with_since, .. } if ok => sh.count(|s| {
                s.joins += 1;
                if with_since {
                    match body.response.as_ref().and_then(|r| r.recovered) {
                        Some(true) => s.recovered += 1,
                        _ => s.not_recovered += 1,
                    }
                }
            }),
            Sent::Join { topic: t, .. } => {
                sh.count(|s| s.join_errors += 1);
                sh.error(format!("a join of {t} was answered {}", body.said()));
            }
            Sent::Leave if ok => sh.count(|s| s.leaves += 1),
            Sent::Push if ok => sh.count(|s| s.push_ok += 1),
            Sent::Push => {
                sh.count(|s| s.push_errors += 1);
                sh.error(format!("a push on {topic} was answered {}", body.said()));
            }
            Sent::Heartbeat if ok => sh.count(|s| s.heartbeats += 1),
            Sent::Leave | Sent::Heartbeat => {
                sh.error(format!("a leave or heartbeat was answered {}", body.said()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_other_slot_keeps_a_history_topic() {
        let t = Topics::for_population(5000);
        assert_eq!(history_topic(&t, 0).as_deref(), Some("soak:hist:0"));
        assert_eq!(history_topic(&t, 1), None);
        assert_eq!(history_topic(&t, 22).as_deref(), Some("soak:hist:1"));
        let mut rng = fastrand::Rng::with_seed(1);
        let first = first_topics(&t, 4, &mut rng);
        assert!(first[0].starts_with("soak:room:"));
        assert_eq!(first.last().map(String::as_str), Some("soak:hist:2"));
    }

    #[test]
    fn actions_cover_every_kind() {
        let mut rng = fastrand::Rng::with_seed(3);
        let drawn: Vec<Action> = (0..200).map(|_| Action::draw(&mut rng)).collect();
        for a in [
            Action::PushRoom,
            Action::PushHooked,
            Action::ChangeRoom,
            Action::TogglePresence,
        ] {
            assert!(drawn.contains(&a), "{a:?}");
        }
    }

    #[test]
    fn reads_replies_and_broadcasts() {
        let m: Message = serde_json::from_slice(
            br#"["3","3","soak:hist:1","phx_reply",{"status":"ok","response":{"recovered":true}}]"#,
        )
        .unwrap();
        assert_eq!((m.1, m.3), (Some("3"), "phx_reply"));
        assert_eq!(m.4.response.and_then(|r| r.recovered), Some(true));
        let m: Message =
            serde_json::from_slice(br#"[null,"00ab.7","soak:hist:1","api:msg",{"n":7}]"#).unwrap();
        assert_eq!(
            (m.1, m.2, m.4.status),
            (Some("00ab.7"), "soak:hist:1", None)
        );
    }
}
