//! Presence in a run: the rule a scenario turns it on with, the traffic it
//! costs the clients, and the time until a join is visible to every
//! subscriber. What an agent records and the controller merges, as
//! [`crate::stats`] is for the rest.
//!
//! - **The rule** is the server's own flag, `PATTERN=KEY[/count]` as
//!   `throng serve --presence` reads it: `throng bench` hands it to the
//!   server it starts; against `--target` it only says what to measure.
//! - **Traffic**: every message a client receives is counted by event,
//!   `presence_state`, `presence_diff`, `presence_count` or other, with its
//!   bytes (the WebSocket message, frame header not included).
//! - **Join visibility**: each presence join's send time (CLOCK_REALTIME,
//!   recorded when its reply says `ok`) against the last subscriber's first
//!   sight of it.
//!   - List mode: a subscriber hears of each join once, in one
//!     `presence_diff` (or in its own `presence_state`, when it joined
//!     after the diff). Every subscriber of a node gets that node's diff,
//!     byte for byte, so an agent keeps one row per distinct diff (its
//!     receipts and the latest), parses each diff's joined keys once, and
//!     the controller takes, per key, the latest receipt of a diff that
//!     carries it. The key must be the user id (`param:user` with
//!     `{"user":"%%user_id%%"}`, as the built-in scenario and
//!     `scenarios/presence.toml` join); other keys are counted as
//!     unmatched.
//!   - Count mode: `{"count": N}` names no one, so the `k`-th join (in send
//!     order) counts as visible to a subscriber when it first gets a count
//!     of `k` or more; each subscriber remembers the count it had (4 bytes,
//!     in padding of the connection struct), and each receipt that raises
//!     it from `p` to `c` makes joins `p+1..=c` visible to it. Agents keep
//!     the latest receipt per `(p, c)`. Exact while the count only grows
//!     (a ramp-up without leaves) and the server counts joins in the order
//!     they were sent, which it does give or take the join latency.

use std::collections::HashMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::hist::new_hist;

/// A presence rule as `throng serve --presence` spells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The whole rule, as given.
    pub spec: String,
    /// An exact topic, or a prefix ending in `*`.
    pub pattern: String,
    /// Count mode (`/count`): `presence_count` instead of state and diffs.
    pub count: bool,
}

impl Rule {
    /// `PATTERN=KEY[/count|/list]` (the key itself is the server's business).
    pub fn parse(spec: &str) -> Result<Rule, BenchError> {
        let bad = |why: &str| {
            BenchError::Scenario(format!(
                "presence rule {spec:?}: {why} (expected PATTERN=KEY[/count], as throng serve --presence)"
            ))
        };
        let (pattern, key) = spec.split_once('=').ok_or_else(|| bad("no '='"))?;
        if pattern.is_empty() {
            return Err(bad("empty pattern"));
        }
        let (key, count) = match key.rsplit_once('/') {
            Some((k, "count")) => (k, true),
            Some((k, "list")) => (k, false),
            _ => (key, false),
        };
        if key.is_empty() {
            return Err(bad("empty key"));
        }
        Ok(Rule {
            spec: spec.to_string(),
            pattern: pattern.to_string(),
            count,
        })
    }

    /// Whether the rule covers `topic` (the server's matching: exact, or a
    /// prefix ending in `*`).
    pub fn matches(&self, topic: &str) -> bool {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => topic.starts_with(prefix),
            None => topic == self.pattern,
        }
    }

    pub fn mode(&self) -> &'static str {
        if self.count {
            "count"
        } else {
            "list"
        }
    }
}

/// What a message from the server is, for presence accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    State,
    Diff,
    Count,
    Other,
}

impl Kind {
    pub fn of(event: &[u8]) -> Kind {
        match event {
            b"presence_state" => Kind::State,
            b"presence_diff" => Kind::Diff,
            b"presence_count" => Kind::Count,
            _ => Kind::Other,
        }
    }
}

/// Messages and their bytes.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Traffic {
    pub messages: u64,
    pub bytes: u64,
}

impl Traffic {
    pub fn add(&mut self, o: &Traffic) {
        self.messages += o.messages;
        self.bytes += o.bytes;
    }

    pub fn count(&mut self, bytes: usize) {
        self.messages += 1;
        self.bytes += bytes as u64;
    }
}

/// Presence messages an agent's clients received (cumulative).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct PresenceCounters {
    pub state: Traffic,
    pub diff: Traffic,
    pub count: Traffic,
    /// CLOCK_REALTIME ns of the latest presence message (merged: the latest).
    pub last_ns: u64,
}

impl PresenceCounters {
    pub fn add(&mut self, o: &PresenceCounters) {
        self.state.add(&o.state);
        self.diff.add(&o.diff);
        self.count.add(&o.count);
        self.last_ns = self.last_ns.max(o.last_ns);
    }

    /// All three kinds.
    pub fn total(&self) -> Traffic {
        let mut t = self.state;
        t.add(&self.diff);
        t.add(&self.count);
        t
    }

    /// Counts one message of `kind`, `bytes` long, received at `now_ns`.
    pub fn record(&mut self, kind: Kind, bytes: usize, now_ns: u64) {
        match kind {
            Kind::State => self.state.count(bytes),
            Kind::Diff => self.diff.count(bytes),
            Kind::Count => self.count.count(bytes),
            Kind::Other => return,
        }
        self.last_ns = self.last_ns.max(now_ns);
    }
}

/// One distinct `presence_diff` as one agent's clients received it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct DiffSeen {
    pub receipts: u64,
    /// CLOCK_REALTIME ns of the latest receipt.
    pub last_ns: u64,
    /// The user ids it joins (`null`: not parsed, see `engine`).
    pub keys: Option<Vec<u32>>,
    /// Joined keys that are not a user id.
    pub unmatched: u32,
}

/// An agent's presence measurements, shipped once at the end.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PresenceWire {
    /// `(user, CLOCK_REALTIME ns)` of each presence join answered `ok`.
    pub joins: Vec<(u32, u64)>,
    /// Distinct diffs by signature (list mode).
    pub diffs: Vec<(u64, DiffSeen)>,
    /// `(p, c, latest ns)`: a subscriber's count went from `p` to `c`
    /// (count mode).
    pub counts: Vec<(u32, u32, u64)>,
}

/// Every agent's presence measurements, merged.
#[derive(Debug, Default)]
pub struct Merged {
    pub joins: Vec<(u32, u64)>,
    pub diffs: HashMap<u64, DiffSeen>,
    pub counts: HashMap<(u32, u32), u64>,
}

/// The time from each join's send to its sight by the last subscriber.
#[derive(Debug)]
pub struct Visibility {
    /// Microseconds, one value per join seen.
    pub hist: Histogram<u64>,
    /// Joins no subscriber was seen to hear of.
    pub unseen: u64,
}

impl Merged {
    pub fn add(&mut self, w: &PresenceWire) {
        self.joins.extend_from_slice(&w.joins);
        for (sig, d) in &w.diffs {
            let e = self.diffs.entry(*sig).or_default();
            e.receipts += d.receipts;
            e.last_ns = e.last_ns.max(d.last_ns);
            if e.keys.is_none() && d.keys.is_some() {
                e.keys = d.keys.clone();
                e.unmatched = d.unmatched;
            }
        }
        for &(p, c, t) in &w.counts {
            let e = self.counts.entry((p, c)).or_default();
            *e = (*e).max(t);
        }
    }

    /// Distinct diffs no agent parsed.
    pub fn unparsed(&self) -> u64 {
        self.diffs.values().filter(|d| d.keys.is_none()).count() as u64
    }

    /// Joined keys that were not user ids, over the distinct diffs.
    pub fn unmatched(&self) -> u64 {
        self.diffs.values().map(|d| d.unmatched as u64).sum()
    }

    /// List mode: per key, the latest receipt of a diff joining it.
    pub fn list_visibility(&self) -> Visibility {
        let mut seen: HashMap<u32, u64> = HashMap::new();
        for d in self.diffs.values() {
            for k in d.keys.iter().flatten() {
                let e = seen.entry(*k).or_default();
                *e = (*e).max(d.last_ns);
            }
        }
        let mut hist = new_hist();
        let mut unseen = 0;
        for (user, sent) in &self.joins {
            match seen.get(user) {
                Some(&last) if last >= *sent => {
                    hist.saturating_record(((last - sent) / 1000).max(1));
                }
                _ => unseen += 1,
            }
        }
        Visibility { hist, unseen }
    }

    /// Count mode: the `k`-th join in send order is visible once the
    /// last subscriber that had fewer than `k` got a count of `k` or more.
    pub fn count_visibility(&self) -> Visibility {
        let mut sent: Vec<u64> = self.joins.iter().map(|j| j.1).collect();
        sent.sort_unstable();
        let n = sent.len();
        // seen[k - 1]: the latest first sight of the k-th join.
        let mut seen = vec![0u64; n];
        for (&(p, c), &t) in &self.counts {
            let (from, to) = (p as usize, (c as usize).min(n));
            for s in seen.iter_mut().take(to).skip(from) {
                *s = (*s).max(t);
            }
        }
        let mut hist = new_hist();
        let mut unseen = 0;
        for (s, t) in sent.iter().zip(&seen) {
            if *t > 0 && t >= s {
                hist.saturating_record(((t - s) / 1000).max(1));
            } else {
                unseen += 1;
            }
        }
        Visibility { hist, unseen }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_as_the_server_reads_them() {
        let r = Rule::parse("rooms:lobby=param:user/count").unwrap();
        assert!(r.count && r.matches("rooms:lobby") && !r.matches("rooms:lobby2"));
        assert_eq!(r.mode(), "count");
        let r = Rule::parse("rooms:*=param:user").unwrap();
        assert!(!r.count && r.matches("rooms:x") && !r.matches("room"));
        assert!(!Rule::parse("rooms:*=user_id/list").unwrap().count);
        for bad in ["rooms:lobby", "=param:user", "t=", "t=/count"] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn counters_count_presence_by_kind() {
        let mut c = PresenceCounters::default();
        c.record(Kind::of(b"presence_state"), 100, 5);
        c.record(Kind::of(b"presence_diff"), 40, 9);
        c.record(Kind::of(b"presence_diff"), 40, 7);
        c.record(Kind::of(b"new:msg"), 1000, 20);
        assert_eq!(
            c.state,
            Traffic {
                messages: 1,
                bytes: 100
            }
        );
        assert_eq!(
            c.diff,
            Traffic {
                messages: 2,
                bytes: 80
            }
        );
        assert_eq!(c.total().bytes, 180);
        assert_eq!(c.last_ns, 9, "other messages do not count");
        let mut sum = PresenceCounters::default();
        sum.add(&c);
        sum.add(&c);
        assert_eq!((sum.diff.messages, sum.last_ns), (4, 9));
    }

    fn ms(n: u64) -> u64 {
        n * 1_000_000
    }

    /// Two agents, two nodes' diffs: a key's visibility is the latest
    /// receipt of any diff joining it, whichever agent saw it.
    #[test]
    fn list_visibility_takes_the_last_receipt_of_any_diff_joining_the_key() {
        let mut m = Merged::default();
        let diff = |keys: &[u32], receipts, last| DiffSeen {
            receipts,
            last_ns: ms(last),
            keys: Some(keys.to_vec()),
            unmatched: 0,
        };
        m.add(&PresenceWire {
            joins: vec![(1, ms(100)), (2, ms(150))],
            diffs: vec![(10, diff(&[1, 2], 3, 900)), (11, diff(&[1, 2], 1, 1100))],
            counts: vec![],
        });
        m.add(&PresenceWire {
            joins: vec![(3, ms(200)), (4, ms(300))],
            // the same diff 10 on the other agent, received later; one unparsed
            diffs: vec![
                (10, diff(&[1, 2], 2, 950)),
                (
                    12,
                    DiffSeen {
                        receipts: 1,
                        last_ns: ms(2000),
                        keys: None,
                        unmatched: 0,
                    },
                ),
                (13, diff(&[3], 1, 700)),
            ],
            counts: vec![],
        });
        assert_eq!(m.diffs[&10].receipts, 5);
        assert_eq!(m.unparsed(), 1);
        let v = m.list_visibility();
        assert_eq!(v.unseen, 1, "user 4 never seen");
        assert_eq!(v.hist.len(), 3);
        // user 1: 1100 - 100; user 2: 1100 - 150; user 3: 700 - 200 (ms)
        assert!(
            (999_000..=1_001_000).contains(&v.hist.max()),
            "{}",
            v.hist.max()
        );
        assert!(
            (499_000..=501_000).contains(&v.hist.min()),
            "{}",
            v.hist.min()
        );
    }

    /// Counts: joins sent at 10, 20, 30, 40 ms; subscribers' counts went
    /// 0 -> 2 (latest at 50 ms), 2 -> 4 (latest at 90 ms) and, for one that
    /// joined at count 1, 1 -> 2 at 60 ms: join 2 is visible to everyone
    /// at 60 ms.
    #[test]
    fn count_visibility_from_count_steps() {
        let mut m = Merged::default();
        m.add(&PresenceWire {
            joins: vec![(4, ms(40)), (1, ms(10)), (3, ms(30)), (2, ms(20))],
            diffs: vec![],
            counts: vec![(0, 2, ms(50)), (2, 4, ms(90)), (1, 2, ms(60))],
        });
        m.add(&PresenceWire {
            joins: vec![],
            diffs: vec![],
            counts: vec![(0, 2, ms(45))],
        });
        let v = m.count_visibility();
        assert_eq!(v.unseen, 0);
        let mut got: Vec<u64> = v
            .hist
            .iter_recorded()
            .flat_map(|x| std::iter::repeat_n(x.value_iterated_to(), x.count_at_value() as usize))
            .map(|us| (us + 500) / 1000)
            .collect();
        got.sort_unstable();
        // join 1: 50 - 10 = 40; join 2: 60 - 20 = 40; join 3: 90 - 30 = 60; join 4: 90 - 40 = 50
        assert_eq!(got, vec![40, 40, 50, 60]);
        // a count never reached leaves the rest unseen
        let mut short = Merged::default();
        short.add(&PresenceWire {
            joins: vec![(1, ms(10)), (2, ms(20))],
            diffs: vec![],
            counts: vec![(0, 1, ms(30))],
        });
        assert_eq!(short.count_visibility().unseen, 1);
    }
}
