//! The long-poll transport at `/socket/longpoll`, as Phoenix's
//! `Phoenix.Transports.LongPoll` (`lib/phoenix/transports/long_poll.ex` and
//! `long_poll/server.ex`) and phoenix.js 1.8's `longpoll.js`/`ajax.js`
//! speak it. Every answer is HTTP 200 with the status in a JSON body:
//!
//! | request | answer |
//! |---|---|
//! | `GET` without a token | a new session: `{"status":410,"token":T,"messages":[]}`; `{"status":403}` when `vsn` is unsupported |
//! | `GET ?token=T` | `{"status":200,"token":T,"messages":[..]}` as soon as messages wait; `{"status":204,"token":T,"messages":[]}` after `--longpoll-window` with none |
//! | `POST ?token=T`, `application/x-ndjson` (one message per line) or one JSON message | `{"status":200}` once dispatched |
//! | a token whose session is gone (expired, ended, its node restarted) | `{"status":410}`: phoenix.js then reconnects and rejoins its channels |
//! | a `token` that is not a session token | the app's own param: a GET starts a session, a POST is 410 (as Phoenix) |
//! | a POST of more than `--max-longpoll-batch` messages | `{"status":413}`, none dispatched |
//!
//! Messages in `messages` are the serializer's encoded text, as Phoenix's
//! long-poll sends them (binary v2 messages as base64, as phoenix.js sends
//! its binary pushes; phoenix.js 1.8 cannot read binary messages over
//! long-poll at all).
//!
//! ## A session is a connection without a socket
//! A [`Session`] lives on the shard that created it, in its own slab, and
//! runs the same Phoenix socket (`crate::protocol::phoenix::socket::Mux`) as a WebSocket,
//! holding the same `SocketState`: it is subscribed in the shard's
//! registry as an `Outlet::Session` (`engine/outlet.rs`; delivery tells
//! it from a WebSocket with one bit test), and what the
//! socket sends it (replies, pushes, broadcasts: the shared
//! [`Broadcast`] itself, not a copy) waits in its buffer until a poll takes
//! it. A poll that finds nothing is parked and answered at the end of the
//! loop turn in which something arrives, or with 204 by the shard's
//! once-a-second sweep when the window has passed; the same sweep ends a
//! session that went 1.5x the window without a poll (Phoenix's
//! `shutdown_if_inactive`). No session has a timer of its own.
//!
//! ## Requests that reach another shard or node
//! Each shard accepts on its own `SO_REUSEPORT` listener, and with
//! `serve --workers N` each worker is a node, so consecutive requests of one
//! session land anywhere. The [`Token`] names the session's node, shard and
//! key; a request that arrives elsewhere is forwarded as a
//! [`wire::Request`] (shard inbox, or a backplane direct message to the
//! node) and its answer comes back the same way to the connection that
//! holds the HTTP request (Phoenix forwards to the session's process over
//! PubSub the same way). A forwarded request that gets no answer in
//! `window + 5 s` (its node is gone) is answered 410.
//!
//! ## Doing better than Phoenix
//! - A GET with a token whose session is gone answers 410 without starting
//!   a session nobody will use (Phoenix starts one; phoenix.js never reads
//!   its token and reconnects).
//! - A session's buffered messages are bounded (`--max-outbound-bytes`, as a
//!   WebSocket's queue); past it the session ends, counted, and the client's
//!   next poll gets 410 and rejoins, instead of growing without limit.
//! - A second poll answers the one it replaces at once (204), instead of
//!   leaving it waiting out its window.
//! - A poll whose connection closes is taken back from its session, so
//!   messages arriving meanwhile wait for the next poll instead of being
//!   handed to no one: on the same shard at once; on another shard or node
//!   (with `serve --workers`) by an [`Ask::Cancel`] to the session. An
//!   answer that still finds its connection gone (it crossed the cancel)
//!   goes back to the session ([`Ask::Return`]), whose next poll gets its
//!   messages. Phoenix loses them.

pub(crate) mod http;
mod shard;

pub(crate) use crate::forward::{token, wire};

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use slab::Slab;
use throng_protocol::Vsn;
use throng_pubsub::Broadcast;

use crate::channel::ConnectInfo;
use crate::engine::close::CloseReason;
use crate::engine::socket::SocketState;
pub(crate) use crate::forward::status_body;
pub(crate) use token::{Secret, Token};
pub(crate) use wire::{Answer, Ask, ReplyTo, Request};

/// How long past the window a forwarded request waits for its answer.
pub(crate) const FORWARD_GRACE_MS: u64 = 5_000;

/// A message waiting for a poll.
pub(crate) enum Item {
    /// A broadcast, shared with every other subscriber.
    Shared(Arc<Broadcast>),
    /// A reply or push of this session alone; `true` if binary.
    Owned(Vec<u8>, bool),
}

impl Item {
    /// The bytes of an owned message (a shared broadcast's are counted
    /// where it is buffered, by serializer).
    pub fn owned_len(&self) -> usize {
        match self {
            Item::Shared(_) => 0,
            Item::Owned(v, _) => v.len(),
        }
    }

    /// The message as `vsn` encodes it, and whether it is binary.
    fn body(&self, vsn: Vsn) -> (&[u8], bool) {
        match self {
            Item::Shared(b) => (b.body(vsn).unwrap_or(&[]), b.is_binary(vsn)),
            Item::Owned(v, binary) => (v, *binary),
        }
    }
}

/// A poll waiting for messages.
pub(crate) struct Parked {
    pub reply: ReplyTo,
    /// When it arrived (ms since the shard started).
    pub since: u64,
}

/// A long-poll session: a Phoenix socket whose messages wait for polls.
pub(crate) struct Session {
    pub vsn: Vsn,
    pub secret: Secret,
    /// The Phoenix socket it carries (as a `Conn` does): channels, connect
    /// info, user, push budget.
    pub socket: SocketState,
    /// Messages waiting for a poll, oldest first.
    pub buffer: Vec<Item>,
    /// Their bytes, bounded by `--max-outbound-bytes`.
    pub buffered: usize,
    pub parked: Option<Parked>,
    /// When a poll last arrived or was answered (ms since the shard started).
    pub last_poll: u64,
    /// In [`State::ready`].
    pub ready: bool,
    /// Marked for ending at the end of this loop turn.
    pub dead: bool,
    /// The control budget (as `Conn::control_tat`).
    pub control_tat: u32,
    /// The address it was admitted from, when addresses are counted
    /// (`--max-connections-per-ip`), to give back when it ends.
    pub ip: Option<std::net::IpAddr>,
    /// Counted by the node's admission (given back when it ends).
    pub admitted: bool,
}

impl Session {
    pub fn new(vsn: Vsn, secret: Secret, connect: Option<ConnectInfo>, now: u64) -> Session {
        Session {
            vsn,
            secret,
            socket: SocketState {
                connect: connect.map(Arc::new),
                ..SocketState::new()
            },
            buffer: Vec::new(),
            buffered: 0,
            parked: None,
            last_poll: now,
            ready: false,
            dead: false,
            control_tat: 0,
            ip: None,
            admitted: false,
        }
    }

    /// The JSON body that hands every waiting message to a poll, emptying
    /// the buffer; returns it and how many messages it holds.
    pub fn take_messages(&mut self, token: &Token) -> (Vec<u8>, usize) {
        let items = std::mem::take(&mut self.buffer);
        self.buffered = 0;
        (poll_body(200, token, self.vsn, &items), items.len())
    }
}

/// A long-poll request waiting for its answer on the shard that holds its
/// HTTP connection.
pub(crate) struct Waiting {
    pub req: u32,
    /// When to give up and answer 410 (ms since the shard started).
    pub deadline: u64,
    pub keep_alive: bool,
    /// The session's key when it is on this shard: a poll whose connection
    /// closes is taken back, so its messages wait for the next poll.
    pub local: Option<usize>,
    /// The session's token when it is on another shard or node: a poll
    /// whose connection closes is taken back there ([`Ask::Cancel`]).
    pub remote: Option<Token>,
}

/// A poll's answer as [`poll_body`] wrote it: what a returned answer holds.
#[derive(serde::Deserialize)]
struct PollBody {
    token: Option<String>,
    #[serde(default)]
    messages: Vec<String>,
}

/// The session token and messages of an answer's body, if it hands over
/// any messages (a 204, 410 or POST answer does not).
pub(crate) fn returned_messages(body: &[u8]) -> Option<(Token, Vec<Item>)> {
    let b: PollBody = serde_json::from_slice(body).ok()?;
    if b.messages.is_empty() {
        return None;
    }
    let token = Token::parse(b.token.as_deref()?)?;
    let items = b
        .messages
        .iter()
        .filter_map(|m| post_message(m.as_bytes()))
        .map(|(op, bytes)| Item::Owned(bytes, op == throng_protocol::frame::Opcode::Binary))
        .collect();
    Some((token, items))
}

/// One shard's long-poll state: the sessions it owns, and the requests its
/// connections wait on (for sessions here or elsewhere).
pub(crate) struct State {
    pub sessions: Slab<Session>,
    /// Connection key -> the request it waits on.
    pub waiting: HashMap<usize, Waiting>,
    /// Sessions with a parked poll and new messages: answered at the end of
    /// the loop turn, so a burst goes out in one answer.
    pub ready: Vec<usize>,
    /// Sessions to end once the call that doomed them is over.
    pub doomed: Vec<(usize, CloseReason<'static>)>,
    next_req: u32,
    /// `--max-outbound-bytes`: a session buffering more ends.
    pub max_buffered: usize,
    /// `--max-message-bytes`: a request's body at most.
    pub max_request_body: usize,
    /// The backplane's id of this node.
    pub node_id: u64,
    /// `--longpoll-window`, ms.
    pub window_ms: u64,
    /// Milliseconds since the shard started, at this call.
    pub now_ms: u64,
    /// New sessions by address (`--longpoll-session-rate`): each
    /// address's budget as one timestamp (`auth::rate`); addresses whose
    /// budget is full again are dropped by the sweep.
    pub starts: HashMap<std::net::IpAddr, u32>,
    /// Expired sessions the last sweep left for the next turn: a sweep ends
    /// at most [`EXPIRE_PER_TURN`] so that it never holds the shard.
    pub behind: bool,
}

/// Sessions one turn of the sweep ends at most. Ending 6.4 million at once
/// (a flood of session starts, all expiring together) held a shard for
/// 674 ms; each end unsubscribes the session's joins.
pub(crate) const EXPIRE_PER_TURN: usize = 1024;

impl State {
    pub fn new(
        node_id: u64,
        window_ms: u64,
        max_buffered: usize,
        max_request_body: usize,
    ) -> State {
        State {
            sessions: Slab::new(),
            waiting: HashMap::new(),
            ready: Vec::new(),
            doomed: Vec::new(),
            next_req: 0,
            max_buffered,
            max_request_body,
            node_id,
            window_ms,
            now_ms: 0,
            starts: HashMap::new(),
            behind: false,
        }
    }

    /// A number for the next request waited on by this shard.
    pub fn next_req(&mut self) -> u32 {
        self.next_req = self.next_req.wrapping_add(1);
        self.next_req
    }

    /// Whether connection `key` waits for an answer (its next request must
    /// wait too: responses go out in request order).
    #[inline]
    pub fn is_waiting(&self, key: usize) -> bool {
        !self.waiting.is_empty() && self.waiting.contains_key(&key)
    }

    /// A message the session's socket sends (reply, push), or a broadcast
    /// for it: buffered.
    pub fn push(&mut self, idx: usize, item: Item, len: usize) {
        let Some(s) = self.sessions.get_mut(idx).filter(|s| !s.dead) else {
            return;
        };
        s.buffer.push(item);
        self.push_len(idx, len);
    }

    /// `len` more bytes in session `idx`'s buffer: past the bound the
    /// session ends; a parked poll is answered at the end of the turn.
    pub fn push_len(&mut self, idx: usize, len: usize) {
        let max = self.max_buffered;
        let Some(s) = self.sessions.get_mut(idx).filter(|s| !s.dead) else {
            return;
        };
        s.buffered += len;
        if s.buffered > max {
            return self.doom(idx, CloseReason::SessionOverflow);
        }
        if s.parked.is_some() && !s.ready {
            s.ready = true;
            self.ready.push(idx);
        }
    }

    /// A broadcast for session `idx`: the shared broadcast is buffered, not
    /// a copy of its bytes.
    pub fn deliver(&mut self, idx: usize, b: &Arc<Broadcast>) {
        let Some(len) = self
            .sessions
            .get(idx)
            .filter(|s| !s.dead)
            .and_then(|s| b.body(s.vsn))
            .map(|body| body.len())
        else {
            return;
        };
        self.push(idx, Item::Shared(b.clone()), len);
    }

    /// Takes the engine's work for this shard's sessions now (a broadcast
    /// a socket's callback made reaches the sessions before that socket's
    /// reply, as it reaches connections: Phoenix's fastlane order).
    pub fn take_work(&mut self, work: &mut Vec<crate::engine::outlet::SessionWork>) {
        use crate::engine::outlet::SessionWork;
        for w in work.drain(..) {
            match w {
                SessionWork::Deliver(idx, b) => self.deliver(idx, &b),
                SessionWork::Doom(idx, reason) => self.doom(idx, reason),
            }
        }
    }

    /// Marks session `idx` for ending once this call is over.
    pub fn doom(&mut self, idx: usize, reason: CloseReason<'static>) {
        if let Some(s) = self.sessions.get_mut(idx) {
            if !s.dead {
                s.dead = true;
                self.doomed.push((idx, reason));
            }
        }
    }
}

/// `{"status":N,"token":T,"messages":[..]}`, each message a JSON string of
/// the serializer's text (base64 for a binary one).
pub(crate) fn poll_body(status: u16, token: &Token, vsn: Vsn, items: &[Item]) -> Vec<u8> {
    let size: usize = items.iter().map(|i| i.body(vsn).0.len() + 8).sum();
    let mut out = Vec::with_capacity(96 + size);
    let _ = write!(
        out,
        "{{\"status\":{status},\"token\":\"{token}\",\"messages\":["
    );
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let (bytes, binary) = item.body(vsn);
        match std::str::from_utf8(bytes) {
            Ok(text) if !binary => {
                // A string of valid UTF-8 always serializes.
                let _ = serde_json::to_writer(&mut out, text);
            }
            _ => {
                out.push(b'"');
                out.extend_from_slice(STANDARD.encode(bytes).as_bytes());
                out.push(b'"');
            }
        }
    }
    out.extend_from_slice(b"]}");
    out
}

/// The HTTP response around a long-poll JSON body. `Access-Control-Allow-Origin: *`
/// as Phoenix sends it (phoenix.js sends no credentials).
pub(crate) fn http_response(body: &[u8], keep_alive: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + body.len());
    let _ =
        write!(
        out,
        "HTTP/1.1 200 OK\r\nServer: throng\r\nContent-Type: application/json; charset=utf-8\r\n\
         Access-Control-Allow-Origin: *\r\nContent-Length: {}\r\n{}\r\n",
        body.len(),
        if keep_alive { "" } else { "Connection: close\r\n" }
    );
    out.extend_from_slice(body);
    out
}

/// The answer to a CORS preflight, as Phoenix's long-poll gives it.
pub(crate) fn preflight_response(request_headers: &str, keep_alive: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nServer: throng\r\nAccess-Control-Allow-Origin: *\r\n\
         Access-Control-Allow-Headers: {request_headers}\r\n\
         Access-Control-Allow-Methods: get, post, options\r\nAccess-Control-Max-Age: 3600\r\n\
         Content-Length: 0\r\n{}\r\n",
        if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        }
    )
    .into_bytes()
}

/// The messages of a POST body: one per non-empty line for ndjson (`\n` or
/// `\r\n`, as Phoenix splits them), else the whole body.
pub(crate) fn post_lines(body: &[u8], ndjson: bool) -> Vec<&[u8]> {
    if !ndjson {
        return vec![body];
    }
    body.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
        .collect()
}

/// A POSTed message as the serializer reads it: JSON text as it is, and
/// anything else as base64 of a binary message (phoenix.js sends binary
/// pushes over long-poll so). `None` if it is neither.
pub(crate) fn post_message(line: &[u8]) -> Option<(throng_protocol::frame::Opcode, Vec<u8>)> {
    use throng_protocol::frame::Opcode;
    match line.first() {
        // Text is UTF-8, as a WebSocket text frame must be: serde_json checks
        // it only in the fields it reads (found by the longpoll fuzz target).
        Some(b'[' | b'{') => std::str::from_utf8(line)
            .ok()
            .map(|_| (Opcode::Text, line.to_vec())),
        _ => STANDARD.decode(line).ok().map(|b| (Opcode::Binary, b)),
    }
}

/// Why a POST ends its session: a line that is no Phoenix message.
pub(crate) const NOT_A_MESSAGE: crate::engine::close::CloseReason<'static> =
    crate::engine::close::CloseReason::Protocol {
        code: throng_protocol::frame::close_code::INVALID_PAYLOAD,
        text: "not a Phoenix message",
    };

/// A POSTed message (as [`post_message`] read it) as the session's socket
/// takes it: decoded with the session's serializer, its refs within
/// `--max-ref-bytes` as a WebSocket message's are; else why the session
/// ends.
pub(crate) fn decode_post(
    decoded: &(throng_protocol::frame::Opcode, Vec<u8>),
    vsn: Vsn,
    max_ref: usize,
) -> Result<throng_protocol::Message<'_>, crate::engine::close::CloseReason<'static>> {
    use throng_protocol::serializer::{decode, Sender};
    let msg = decode(vsn, decoded.0, &decoded.1, Sender::Client).map_err(|_| NOT_A_MESSAGE)?;
    crate::limits::check_refs(&msg, max_ref)
        .map_err(crate::engine::close::CloseReason::RefTooLong)?;
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use throng_protocol::OwnedPayload;

    #[test]
    fn a_posted_message_has_the_ref_bound_of_a_websockets() {
        let line = br#"["1","123456789","room:a","phx_join",{}]"#;
        let decoded = post_message(line).expect("a message");
        assert!(decode_post(&decoded, Vsn::V2, 9).is_ok());
        assert!(matches!(
            decode_post(&decoded, Vsn::V2, 8),
            Err(crate::engine::close::CloseReason::RefTooLong(_))
        ));
        let junk = post_message(b"[1]").expect("text");
        assert!(matches!(
            decode_post(&junk, Vsn::V2, 8),
            Err(crate::engine::close::CloseReason::Protocol { .. })
        ));
    }

    fn token() -> Token {
        Token {
            node: 1,
            shard: 0,
            key: 2,
            secret: Secret([0xab; 16]),
        }
    }

    #[test]
    fn poll_bodies_carry_the_serializers_text() {
        let b = Arc::new(Broadcast::new(
            "t".into(),
            "e".into(),
            OwnedPayload::Json(r#"{"a":"\u00e9"}"#.into()),
            None,
        ));
        let items = [
            Item::Shared(b.clone()),
            Item::Owned(br#"[null,"1","t","phx_reply",{}]"#.to_vec(), false),
            Item::Owned(vec![0, 1, 255], true),
        ];
        let body = poll_body(200, &token(), Vsn::V2, &items);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["token"], token().to_string());
        let msgs = v["messages"].as_array().unwrap();
        assert_eq!(msgs[0], r#"[null,null,"t","e",{"a":"\u00e9"}]"#);
        assert_eq!(msgs[1], r#"[null,"1","t","phx_reply",{}]"#);
        assert_eq!(msgs[2], "AAH/");
        let v1 = poll_body(204, &token(), Vsn::V1, &items[..1]);
        let v: serde_json::Value = serde_json::from_slice(&v1).unwrap();
        assert_eq!(
            v["messages"][0],
            r#"{"event":"e","payload":{"a":"\u00e9"},"ref":null,"topic":"t"}"#
        );
        assert_eq!(status_body(403), br#"{"status":403}"#);
    }

    #[test]
    fn an_answer_that_found_no_connection_gives_back_its_messages() {
        let items = [
            Item::Owned(br#"[null,null,"t","e",{"a":"\u00e9"}]"#.to_vec(), false),
            Item::Owned(vec![0, 1, 255], true),
        ];
        let body = poll_body(200, &token(), Vsn::V2, &items);
        let (t, back) = returned_messages(&body).expect("messages");
        assert_eq!(t, token());
        let back: Vec<(Vec<u8>, bool)> = back
            .into_iter()
            .map(|i| match i {
                Item::Owned(v, b) => (v, b),
                Item::Shared(_) => panic!("owned"),
            })
            .collect();
        assert_eq!(
            back,
            vec![
                (br#"[null,null,"t","e",{"a":"\u00e9"}]"#.to_vec(), false),
                (vec![0, 1, 255], true)
            ]
        );
        // Answers that hand over nothing: nothing to give back.
        assert!(returned_messages(&poll_body(204, &token(), Vsn::V2, &[])).is_none());
        assert!(returned_messages(&status_body(410)).is_none());
        assert!(returned_messages(br#"{"status":200}"#).is_none());
        assert!(returned_messages(b"not json").is_none());
    }

    #[test]
    fn post_bodies_split_as_phoenix() {
        assert_eq!(
            post_lines(b"[1]\n[2]\r\n\n[3]\n", true),
            vec![&b"[1]"[..], b"[2]", b"[3]"]
        );
        assert_eq!(post_lines(b"[1]\n[2]", false), vec![&b"[1]\n[2]"[..]]);
        use throng_protocol::frame::Opcode;
        assert_eq!(post_message(b"[1]").unwrap().0, Opcode::Text);
        assert_eq!(post_message(b"{}").unwrap().0, Opcode::Text);
        assert_eq!(
            post_message(b"AAH/"),
            Some((Opcode::Binary, vec![0, 1, 255]))
        );
        assert_eq!(post_message(b"not base64!"), None);
        // Text that is no UTF-8 (here in a field the serializer skips) is no message.
        assert_eq!(post_message(b"{\"x\":\"\xc0\"}"), None);
    }

    #[test]
    fn responses_are_http() {
        let r = String::from_utf8(http_response(b"{}", false)).unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("Content-Length: 2\r\nConnection: close\r\n\r\n{}"),
            "{r}"
        );
        assert!(r.contains("Access-Control-Allow-Origin: *\r\n"));
        let p = String::from_utf8(preflight_response("x-phoenix-authtoken", true)).unwrap();
        assert!(
            p.contains("Access-Control-Allow-Headers: x-phoenix-authtoken\r\n"),
            "{p}"
        );
        assert!(p.ends_with("Content-Length: 0\r\n\r\n"), "{p}");
    }
}
