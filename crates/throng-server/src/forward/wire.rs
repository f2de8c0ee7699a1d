//! Forwarding: a long-poll HTTP request that reached a shard other than its
//! session's travels there as a [`Request`], and the JSON body of its
//! response comes back as an [`Answer`] to the shard and connection that
//! hold the HTTP request ([`ReplyTo`]). Between the shards of one process
//! they are plain values on the shard inboxes; between nodes (the workers of
//! `serve --workers`, or machines) they are bytes in a backplane direct
//! message, in the layout below (big-endian, like the broadcast envelope):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version, [`VERSION`] (1) |
//! | 1 | kind: 1 request, 2 answer |
//! | 8 + 2 + 4 + 4 | reply to: node, shard, connection key, request number |
//! | request: 8 + 2 + 4 + 16 | token: node, shard, session key, secret |
//! | request: 1 | ask: 0 poll, 1 post (one JSON message), 2 post (ndjson), 3 cancel (the poll's connection closed), 4 return (an answer's body that found no connection) |
//! | 4 + n | body length, body (a request's POST body; an answer's JSON) |
//!
//! Nothing may follow. Decoding checks every length and never panics.

use super::token::{Secret, Token};

/// The layout version this build writes and reads.
pub(crate) const VERSION: u8 = 1;
const KIND_REQUEST: u8 = 1;
const KIND_ANSWER: u8 = 2;

/// Where an answer goes: the node, shard and connection holding the HTTP
/// request, and the request's number on that shard (a connection key is
/// reused once its connection closes; the number tells a stale answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyTo {
    pub node: u64,
    pub shard: u16,
    pub conn: u32,
    pub req: u32,
}

/// What a request asks of its session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// GET: the messages waiting, or wait for some.
    Poll,
    /// POST: messages from the client; `ndjson`: one per line.
    Post { body: Vec<u8>, ndjson: bool },
    /// The connection of the poll `reply` names closed before its answer:
    /// the session takes the poll back, so messages wait for the next one.
    Cancel,
    /// The body of a poll's answer that found its connection gone (closed,
    /// or waiting on another request): its messages go back to the front
    /// of the session's buffer instead of being lost.
    Return { body: Vec<u8> },
}

/// A long-poll request for the shard that holds its session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub token: Token,
    pub ask: Ask,
    pub reply: ReplyTo,
}

/// The JSON body of a long-poll response, for the shard holding the request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub reply: ReplyTo,
    pub body: Vec<u8>,
}

/// A forwarded message between nodes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Forward {
    Request(Request),
    Answer(Answer),
}

impl Forward {
    /// The bytes of a backplane direct message.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(VERSION);
        match self {
            Forward::Request(r) => {
                out.push(KIND_REQUEST);
                put_reply(&mut out, &r.reply);
                out.extend_from_slice(&r.token.node.to_be_bytes());
                out.extend_from_slice(&r.token.shard.to_be_bytes());
                out.extend_from_slice(&r.token.key.to_be_bytes());
                out.extend_from_slice(&r.token.secret.0);
                let (ask, body): (u8, &[u8]) = match &r.ask {
                    Ask::Poll => (0, &[]),
                    Ask::Post {
                        body,
                        ndjson: false,
                    } => (1, body),
                    Ask::Post { body, ndjson: true } => (2, body),
                    Ask::Cancel => (3, &[]),
                    Ask::Return { body } => (4, body),
                };
                out.push(ask);
                put_bytes(&mut out, body);
            }
            Forward::Answer(a) => {
                out.push(KIND_ANSWER);
                put_reply(&mut out, &a.reply);
                put_bytes(&mut out, &a.body);
            }
        }
        out
    }

    /// Reads a direct message; `None` for anything this build did not write.
    pub fn decode(bytes: &[u8]) -> Option<Forward> {
        let mut r = Reader(bytes);
        if r.u8()? != VERSION {
            return None;
        }
        let kind = r.u8()?;
        let reply = ReplyTo {
            node: r.u64()?,
            shard: r.u16()?,
            conn: r.u32()?,
            req: r.u32()?,
        };
        let out = match kind {
            KIND_REQUEST => {
                let node = r.u64()?;
                let shard = r.u16()?;
                let key = r.u32()?;
                let secret: [u8; 16] = r.take(16)?.try_into().ok()?;
                let token = Token {
                    node,
                    shard,
                    key,
                    secret: Secret(secret),
                };
                let ask = r.u8()?;
                let body = r.field()?.to_vec();
                let ask = match ask {
                    0 if body.is_empty() => Ask::Poll,
                    1 => Ask::Post {
                        body,
                        ndjson: false,
                    },
                    2 => Ask::Post { body, ndjson: true },
                    3 if body.is_empty() => Ask::Cancel,
                    4 => Ask::Return { body },
                    _ => return None,
                };
                Forward::Request(Request { token, ask, reply })
            }
            KIND_ANSWER => Forward::Answer(Answer {
                reply,
                body: r.field()?.to_vec(),
            }),
            _ => return None,
        };
        r.0.is_empty().then_some(out)
    }
}

fn put_reply(out: &mut Vec<u8>, r: &ReplyTo) {
    out.extend_from_slice(&r.node.to_be_bytes());
    out.extend_from_slice(&r.shard.to_be_bytes());
    out.extend_from_slice(&r.conn.to_be_bytes());
    out.extend_from_slice(&r.req.to_be_bytes());
}

/// A length-prefixed field; bodies are bounded by `--max-message-bytes`,
/// far below 4 GiB.
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    fn field(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()?;
        self.take(len as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reply() -> ReplyTo {
        ReplyTo {
            node: 7,
            shard: 1,
            conn: 42,
            req: 9,
        }
    }

    fn token() -> Token {
        Token {
            node: 8,
            shard: 2,
            key: 5,
            secret: Secret([3; 16]),
        }
    }

    #[test]
    fn round_trips_each_kind() {
        let all = [
            Forward::Request(Request {
                token: token(),
                ask: Ask::Poll,
                reply: reply(),
            }),
            Forward::Request(Request {
                token: token(),
                ask: Ask::Post {
                    body: b"[1]\n[2]".to_vec(),
                    ndjson: true,
                },
                reply: reply(),
            }),
            Forward::Request(Request {
                token: token(),
                ask: Ask::Post {
                    body: b"{}".to_vec(),
                    ndjson: false,
                },
                reply: reply(),
            }),
            Forward::Answer(Answer {
                reply: reply(),
                body: br#"{"status":204}"#.to_vec(),
            }),
            Forward::Request(Request {
                token: token(),
                ask: Ask::Cancel,
                reply: reply(),
            }),
            Forward::Request(Request {
                token: token(),
                ask: Ask::Return {
                    body: br#"{"status":200,"messages":["[]"]}"#.to_vec(),
                },
                reply: reply(),
            }),
        ];
        for f in all {
            let bytes = f.encode();
            assert_eq!(Forward::decode(&bytes), Some(f));
            for n in 0..bytes.len() {
                assert_eq!(Forward::decode(&bytes[..n]), None, "{n}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert_eq!(Forward::decode(&long), None);
            let mut v2 = bytes;
            v2[0] = 2;
            assert_eq!(Forward::decode(&v2), None);
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Forward::decode(&bytes);
            let mut v1 = bytes.clone();
            if v1.len() > 1 { v1[0] = VERSION; v1[1] = KIND_REQUEST; }
            let _ = Forward::decode(&v1);
        }
    }
}
