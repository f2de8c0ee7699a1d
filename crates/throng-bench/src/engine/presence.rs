//! Presence on the client side: the presence messages a connection
//! receives, counted by kind, each distinct `presence_diff` recorded once
//! with its receipts (its keys read once per agent), each subscriber's
//! `presence_count` steps, and the send time of each presence join (what
//! `crate::presence` merges into join visibility).
//!
//! A diff is named by a signature: its length and a hash of its first
//! [`SIG_HEAD`] and last [`SIG_TAIL`] bytes (the same whether it came whole
//! or streamed, see `large`). Every subscriber of a node receives that
//! node's diff byte for byte, and a diff's ends hold its first and last
//! keys with their `phx_ref`s (unique), so two diffs share a signature only
//! if they agree on length and both ends.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hasher};

use serde::Deserialize;
use serde_json::value::RawValue;
use throng_protocol::Vsn;

use super::Engine;
use crate::presence::{DiffSeen, Kind, PresenceWire};
use crate::sys;

/// `Conn::flags` bit: the connection has had its `presence_count` since
/// its last join (`last_count` holds the count it knows).
pub(super) const F_COUNT_SEEN: u8 = 8;

/// Bytes of a message's start its signature covers.
pub(super) const SIG_HEAD: usize = 512;
/// Bytes of its end (a streamed diff keeps them, inline: see `large`):
/// the last key and its `phx_ref` fit.
pub(super) const SIG_TAIL: usize = 128;

/// What an agent records of presence (see the module docs).
#[derive(Default)]
pub struct PresenceLog {
    /// `(user, CLOCK_REALTIME ns)` of each presence join answered `ok`.
    pub joins: Vec<(u32, u64)>,
    /// Distinct diffs by signature.
    pub diffs: HashMap<u64, DiffSeen>,
    /// Head signatures of large diffs a connection reads (or read) whole.
    pub(super) heads: HashSet<u64>,
    /// `(p, c)` -> the latest receipt raising a subscriber's count from p to c.
    pub counts: HashMap<(u32, u32), u64>,
}

impl PresenceLog {
    pub fn to_wire(&self) -> PresenceWire {
        PresenceWire {
            joins: self.joins.clone(),
            diffs: self.diffs.iter().map(|(k, v)| (*k, v.clone())).collect(),
            counts: self.counts.iter().map(|(&(p, c), &t)| (p, c, t)).collect(),
        }
    }
}

/// The signature of a message's start: its first [`SIG_HEAD`] bytes and
/// its length.
pub(super) fn head_sig(message: &[u8], len: u64) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(&message[..message.len().min(SIG_HEAD)]);
    h.write_u64(len);
    h.finish()
}

/// The whole signature: the start's and the last [`SIG_TAIL`] bytes.
pub(super) fn full_sig(head_sig: u64, tail: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write_u64(head_sig);
    h.write(&tail[tail.len().saturating_sub(SIG_TAIL)..]);
    h.finish()
}

/// The end of the JSON scalar (string, null, number) starting at `i`.
fn scalar_end(b: &[u8], i: usize) -> Option<usize> {
    if *b.get(i)? == b'"' {
        let mut j = i + 1;
        loop {
            match *b.get(j)? {
                b'\\' => j += 2,
                b'"' => return Some(j + 1),
                _ => j += 1,
            }
        }
    }
    let n = b[i..]
        .iter()
        .position(|c| matches!(c, b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t'))?;
    Some(i + n)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

/// A JSON string without escapes at `i`: its contents.
fn plain_string(b: &[u8], i: usize) -> Option<&[u8]> {
    let end = scalar_end(b, i)?;
    let s = b.get(i..end)?;
    match s {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => Some(inner),
        _ => None,
    }
}

/// The event of a server's text message from its first bytes, if they
/// hold it: v2 `[join_ref, ref, topic, event, payload]`; v1 an object
/// whose `"event"` comes first (Phoenix's and throng's order).
pub(super) fn event_in_head(vsn: Vsn, head: &[u8]) -> Option<&[u8]> {
    match vsn {
        Vsn::V2 => {
            let mut i = skip_ws(head, 0);
            if head.get(i) != Some(&b'[') {
                return None;
            }
            i += 1;
            for _ in 0..3 {
                i = scalar_end(head, skip_ws(head, i))?;
                i = skip_ws(head, i);
                if head.get(i) != Some(&b',') {
                    return None;
                }
                i += 1;
            }
            plain_string(head, skip_ws(head, i))
        }
        Vsn::V1 => {
            let i = skip_ws(head, 0);
            let rest = head.get(i..)?.strip_prefix(b"{")?;
            let at = skip_ws(rest, 0);
            let rest = rest.get(at..)?.strip_prefix(b"\"event\"")?;
            let at = skip_ws(rest, 0);
            let rest = rest.get(at..)?.strip_prefix(b":")?;
            plain_string(rest, skip_ws(rest, 0))
        }
    }
}

#[derive(Deserialize)]
struct DiffKeys<'a> {
    #[serde(borrow)]
    joins: HashMap<std::borrow::Cow<'a, str>, &'a RawValue>,
}

/// The user ids a `presence_diff` payload joins, and how many of its
/// joined keys are not user ids.
pub(super) fn diff_keys(payload: &str) -> (Vec<u32>, u32) {
    let Ok(d) = serde_json::from_str::<DiffKeys<'_>>(payload) else {
        return (Vec::new(), 0);
    };
    let mut keys = Vec::with_capacity(d.joins.len());
    let mut unmatched = 0;
    for k in d.joins.keys() {
        match k.parse::<u32>() {
            Ok(u) => keys.push(u),
            Err(_) => unmatched += 1,
        }
    }
    (keys, unmatched)
}

#[derive(Deserialize)]
struct Count {
    count: u64,
}

impl Engine {
    /// A whole presence message `data` (payload JSON `payload`) of `kind`
    /// on connection `token`.
    pub(super) fn on_presence(&mut self, token: usize, kind: Kind, data: &[u8], payload: &str) {
        let now = sys::realtime_ns();
        self.counters.presence.record(kind, data.len(), now);
        match kind {
            Kind::Diff => {
                let sig = full_sig(head_sig(data, data.len() as u64), data);
                let d = self.diff_receipt(sig, now);
                if d.keys.is_none() {
                    let (keys, unmatched) = diff_keys(payload);
                    d.keys = Some(keys);
                    d.unmatched = unmatched;
                }
            }
            Kind::Count => {
                let Ok(Count { count }) = serde_json::from_str::<Count>(payload) else {
                    return;
                };
                let n = count.min(u32::MAX as u64) as u32;
                let c = &mut self.conns[token];
                let first = c.flags & F_COUNT_SEEN == 0;
                let p = c.last_count;
                c.flags |= F_COUNT_SEEN;
                c.last_count = n;
                // Its own count on joining says what it knew; a rise after
                // makes the joins in between visible to it now.
                if !first && n > p {
                    let t = self.presence.counts.entry((p, n)).or_default();
                    *t = (*t).max(now);
                }
            }
            Kind::State | Kind::Other => {}
        }
    }

    /// One receipt of the diff with signature `sig` at `now_ns`.
    pub(super) fn diff_receipt(&mut self, sig: u64, now_ns: u64) -> &mut DiffSeen {
        let d = self.presence.diffs.entry(sig).or_default();
        d.receipts += 1;
        d.last_ns = d.last_ns.max(now_ns);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_from_message_heads() {
        let v2 = br#"[null,null,"rooms:lobby","presence_diff",{"joins":{"1":"#;
        assert_eq!(event_in_head(Vsn::V2, v2), Some(&b"presence_diff"[..]));
        let v2 = br#" [ "7" , null , "a,\"b]" , "presence_state" , {"1":"#;
        assert_eq!(event_in_head(Vsn::V2, v2), Some(&b"presence_state"[..]));
        let v1 = br#"{"event":"presence_state","payload":{"1":{"#;
        assert_eq!(event_in_head(Vsn::V1, v1), Some(&b"presence_state"[..]));
        assert_eq!(
            event_in_head(Vsn::V1, br#"{"payload":{},"event":"x"}"#),
            None
        );
        assert_eq!(
            event_in_head(Vsn::V2, br#"[null,null,"t""#),
            None,
            "cut short"
        );
        assert_eq!(
            event_in_head(Vsn::V2, br#"[null,null,"t","a\u0041",{}]"#),
            None
        );
        assert_eq!(
            Kind::of(event_in_head(Vsn::V2, br#"[null,null,"t","new:msg",{}]"#).unwrap()),
            Kind::Other
        );
    }

    #[test]
    fn signatures_cover_both_ends_and_the_length() {
        let a = vec![b'a'; 2000];
        let mut b = a.clone();
        b[1999] = b'b';
        let sig = |m: &[u8]| full_sig(head_sig(m, m.len() as u64), m);
        assert_ne!(sig(&a), sig(&b), "the tail counts");
        assert_ne!(sig(&a), sig(&a[..1999]), "the length counts");
        let mut c = a.clone();
        c[1000] = b'c';
        assert_eq!(sig(&a), sig(&c), "the middle does not");
        // streamed in pieces: the start's signature and the last bytes agree
        assert_eq!(full_sig(head_sig(&a[..600], 2000), &a[1400..]), sig(&a));
    }

    #[test]
    fn diff_keys_are_user_ids() {
        let p = r#"{"joins":{"12":{"metas":[{"phx_ref":"x"}]},"bot":{"metas":[]},"7":{"metas":[]}},"leaves":{"3":{"metas":[]}}}"#;
        let (mut keys, unmatched) = diff_keys(p);
        keys.sort();
        assert_eq!((keys, unmatched), (vec![7, 12], 1));
        assert_eq!(diff_keys("[]"), (vec![], 0));
    }
}
