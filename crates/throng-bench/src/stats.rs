//! Measurements an agent takes and the controller merges: counters, HDR
//! histograms (microseconds) and per-broadcast receipts.
//!
//! Histograms cross the wire as `(value, count)` pairs of their recorded
//! buckets and are merged by recording those back: percentiles are computed
//! from the merged histogram, never averaged.

use std::collections::{BTreeMap, HashMap};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::presence::PresenceCounters;

/// Errors by kind.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Errors {
    /// The server refused the TCP connection (ECONNREFUSED).
    pub refused: u64,
    /// Connect + handshake, or a reply, took longer than the scenario's timeout.
    pub timeout: u64,
    /// The server closed (or reset) a connection the session still used.
    pub closed: u64,
    /// A reply with a status other than `ok`, or a `phx_error`.
    pub error_reply: u64,
    /// The upgrade was answered with something other than 101.
    pub handshake: u64,
    /// No local address/port or file descriptor left (EADDRNOTAVAIL, EMFILE).
    pub local_limit: u64,
    /// Anything else (I/O errors, protocol violations).
    pub other: u64,
    /// The finer kinds behind the ones above, which say whose each error is.
    #[serde(default)]
    pub detail: ErrorDetail,
}

/// The finer kinds behind [`Errors`]: where a timeout struck, how a
/// connection was closed, which local resource ran out.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ErrorDetail {
    /// Of `timeout`: the TCP connect (no SYN-ACK: the listen queue was full
    /// or the SYN was lost; ETIMEDOUT too), the upgrade (connected, no 101),
    /// a tracked reply.
    pub timeout_tcp: u64,
    pub timeout_upgrade: u64,
    pub timeout_reply: u64,
    /// Of `closed`: close frames by code (1005: one without a code), and
    /// closes without a frame: a reset (ECONNRESET, EPIPE, ECONNABORTED) or
    /// the end of the stream.
    #[serde(deserialize_with = "code_keys")]
    pub close_codes: BTreeMap<u16, u64>,
    pub reset: u64,
    pub eof: u64,
    /// Of `handshake`: the HTTP statuses the server answered upgrades
    /// with instead of 101 (403: it refused the clients' authentication).
    #[serde(deserialize_with = "code_keys")]
    pub handshake_status: BTreeMap<u16, u64>,
    /// Of `local_limit`: no local port (EADDRNOTAVAIL, EADDRINUSE), no file
    /// descriptor (EMFILE, ENFILE), no socket memory (ENOBUFS, ENOMEM), or
    /// the agent already held its capacity.
    pub ports: u64,
    pub fds: u64,
    pub buffers: u64,
    pub capacity: u64,
}

/// Reads close codes (and HTTP statuses) keyed by their JSON text (`{"1001": 3}`). serde's
/// derived map would read them only from a plain document: inside the
/// tagged messages of the controller link the keys arrive buffered as
/// strings and a `u16` refuses them, and one server close then cut an
/// agent's link mid-run (it did at 1,000,000 with heartbeats).
fn code_keys<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<u16, u64>, D::Error> {
    BTreeMap::<String, u64>::deserialize(d)?
        .into_iter()
        .map(|(k, n)| {
            k.parse()
                .map(|code| (code, n))
                .map_err(|_| serde::de::Error::custom(format!("close code {k:?}")))
        })
        .collect()
}

impl ErrorDetail {
    pub fn add(&mut self, o: &ErrorDetail) {
        self.timeout_tcp += o.timeout_tcp;
        self.timeout_upgrade += o.timeout_upgrade;
        self.timeout_reply += o.timeout_reply;
        for (code, n) in &o.close_codes {
            *self.close_codes.entry(*code).or_default() += n;
        }
        self.reset += o.reset;
        self.eof += o.eof;
        for (status, n) in &o.handshake_status {
            *self.handshake_status.entry(*status).or_default() += n;
        }
        self.ports += o.ports;
        self.fds += o.fds;
        self.buffers += o.buffers;
        self.capacity += o.capacity;
    }
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.refused
            + self.timeout
            + self.closed
            + self.error_reply
            + self.handshake
            + self.local_limit
            + self.other
    }

    pub fn add(&mut self, o: &Errors) {
        self.refused += o.refused;
        self.timeout += o.timeout;
        self.closed += o.closed;
        self.error_reply += o.error_reply;
        self.handshake += o.handshake;
        self.local_limit += o.local_limit;
        self.other += o.other;
        self.detail.add(&o.detail);
    }

    pub fn by_kind(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("refused", self.refused),
            ("timeout", self.timeout),
            ("closed_by_server", self.closed),
            ("error_reply", self.error_reply),
            ("handshake", self.handshake),
            ("local_limit", self.local_limit),
            ("other", self.other),
        ]
    }
}

/// An agent's counters: cumulative unless said otherwise.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Counters {
    /// Users started (sessions begun).
    pub started: u64,
    /// WebSocket handshakes completed.
    pub connected: u64,
    /// Joins answered `ok`.
    pub joined: u64,
    /// Sessions over (ended, failed or dropped).
    pub ended: u64,
    /// Open WebSockets now.
    pub open: u64,
    /// Connections in TCP connect or handshake now.
    pub connecting: u64,
    /// Tracked replies outstanding now.
    pub awaiting: u64,
    /// Connections parked at the barrier now.
    pub at_barrier: u64,
    /// Connections in `hold` now.
    pub holding: u64,
    /// Every user of every phase has been started.
    pub arrivals_done: bool,
    /// Messages sent (text and binary frames), and received.
    pub msgs_out: u64,
    pub msgs_in: u64,
    /// Messages sent in binary frames (a Tsung config's, unless `frame="text"`).
    #[serde(default)]
    pub msgs_out_binary: u64,
    /// Bytes of the messages received (WebSocket payloads).
    #[serde(default)]
    pub bytes_in: u64,
    /// Of those, the presence messages, by kind.
    #[serde(default)]
    pub presence: PresenceCounters,
    /// Stamped broadcasts published, and stamped receipts.
    pub bcast_sent: u64,
    pub bcast_recv: u64,
    pub errors: Errors,
    /// The agent's resident set size, bytes.
    pub rss: u64,
    /// The agent's CPU time (user + system), seconds.
    pub cpu_secs: f64,
    /// Seconds from the start of arrivals to the last `ok` join (merged: the latest).
    pub last_join_secs: f64,
    /// Heartbeats sent.
    #[serde(default)]
    pub hb_sent: u64,
    /// The most a heartbeat went out after its time, ms (merged: the
    /// most): an agent starved of CPU sends late, and a server may close a
    /// connection whose heartbeats are late by more than its idle timeout
    /// leaves after the interval.
    #[serde(default)]
    pub hb_late_max_ms: u64,
    /// Now: the age of the oldest connect, upgrade or tracked reply in
    /// flight, ms (merged: the oldest): how long handshakes queue.
    #[serde(default)]
    pub oldest_in_flight_ms: u64,
    /// The floor measurement's sockets: open now, connecting now, failed to
    /// connect; its frames received, and the latest receipt (CLOCK_REALTIME
    /// ns; merged: the latest).
    #[serde(default)]
    pub floor_open: u64,
    #[serde(default)]
    pub floor_connecting: u64,
    #[serde(default)]
    pub floor_failed: u64,
    #[serde(default)]
    pub floor_recv: u64,
    #[serde(default)]
    pub floor_last_ns: u64,
    /// Heartbeats sent on the floor's sockets (not the run's).
    #[serde(default)]
    pub floor_hb_sent: u64,
}

impl Counters {
    /// Adds another agent's counters (open/now gauges add up too).
    pub fn add(&mut self, o: &Counters) {
        self.started += o.started;
        self.connected += o.connected;
        self.joined += o.joined;
        self.ended += o.ended;
        self.open += o.open;
        self.connecting += o.connecting;
        self.awaiting += o.awaiting;
        self.at_barrier += o.at_barrier;
        self.holding += o.holding;
        self.arrivals_done = self.arrivals_done && o.arrivals_done;
        self.msgs_out += o.msgs_out;
        self.msgs_in += o.msgs_in;
        self.msgs_out_binary += o.msgs_out_binary;
        self.bytes_in += o.bytes_in;
        self.presence.add(&o.presence);
        self.bcast_sent += o.bcast_sent;
        self.bcast_recv += o.bcast_recv;
        self.errors.add(&o.errors);
        self.rss += o.rss;
        self.cpu_secs += o.cpu_secs;
        self.last_join_secs = self.last_join_secs.max(o.last_join_secs);
        self.hb_sent += o.hb_sent;
        self.hb_late_max_ms = self.hb_late_max_ms.max(o.hb_late_max_ms);
        self.oldest_in_flight_ms = self.oldest_in_flight_ms.max(o.oldest_in_flight_ms);
        self.floor_open += o.floor_open;
        self.floor_connecting += o.floor_connecting;
        self.floor_failed += o.floor_failed;
        self.floor_recv += o.floor_recv;
        self.floor_last_ns = self.floor_last_ns.max(o.floor_last_ns);
        self.floor_hb_sent += o.floor_hb_sent;
    }

    /// Users whose session is running now.
    pub fn active(&self) -> u64 {
        self.started.saturating_sub(self.ended)
    }

    /// Sessions running their steps now, not parked in `hold`.
    pub fn unparked(&self) -> u64 {
        self.active().saturating_sub(self.holding)
    }

    /// Broadcast receipts due so far: every broadcast sent, to every open
    /// connection.
    pub fn receipts_due(&self) -> u64 {
        self.bcast_sent * self.open
    }
}

/// Latency histograms, microseconds.
#[derive(Clone, Debug)]
pub struct Hists {
    /// TCP connect + WebSocket handshake.
    pub connect: Histogram<u64>,
    /// Join sent to its reply.
    pub join: Histogram<u64>,
    /// Other tracked pushes to their reply.
    pub reply: Histogram<u64>,
    /// Broadcast publish (stamp) to receipt, per receiver.
    pub broadcast: Histogram<u64>,
    /// The floor's frames: the writer's stamp to receipt, per receiver.
    pub floor: Histogram<u64>,
}

pub use crate::hist::new_hist;

impl Default for Hists {
    fn default() -> Self {
        Hists {
            connect: new_hist(),
            join: new_hist(),
            reply: new_hist(),
            broadcast: new_hist(),
            floor: new_hist(),
        }
    }
}

/// A histogram on the wire: its recorded buckets.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HistWire(pub Vec<(u64, u64)>);

impl HistWire {
    pub fn from_hist(h: &Histogram<u64>) -> HistWire {
        HistWire(
            h.iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        )
    }

    /// Records these buckets into `h` (a merge).
    pub fn merge_into(&self, h: &mut Histogram<u64>) {
        for &(v, n) in &self.0 {
            h.saturating_record_n(v.max(1), n);
        }
    }
}

/// Every histogram of an agent, for the wire.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HistsWire {
    pub connect: HistWire,
    pub join: HistWire,
    pub reply: HistWire,
    pub broadcast: HistWire,
    #[serde(default)]
    pub floor: HistWire,
}

impl Hists {
    pub fn to_wire(&self) -> HistsWire {
        HistsWire {
            connect: HistWire::from_hist(&self.connect),
            join: HistWire::from_hist(&self.join),
            reply: HistWire::from_hist(&self.reply),
            broadcast: HistWire::from_hist(&self.broadcast),
            floor: HistWire::from_hist(&self.floor),
        }
    }

    pub fn merge_wire(&mut self, w: &HistsWire) {
        w.connect.merge_into(&mut self.connect);
        w.join.merge_into(&mut self.join);
        w.reply.merge_into(&mut self.reply);
        w.broadcast.merge_into(&mut self.broadcast);
        w.floor.merge_into(&mut self.floor);
    }
}

/// One broadcast as one agent saw it.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BcastSeen {
    /// CLOCK_REALTIME ns of the publish (from the stamp).
    pub sent_ns: u64,
    /// Receipts on this agent.
    pub recv: u64,
    /// CLOCK_REALTIME ns of this agent's last receipt.
    pub last_ns: u64,
}

/// Broadcasts by key (publisher user << 32 | ref).
pub type BcastTable = HashMap<u64, BcastSeen>;

/// Merges one agent's table into the run's.
pub fn merge_bcasts(into: &mut BcastTable, from: &[(u64, BcastSeen)]) {
    for (k, b) in from {
        let e = into.entry(*k).or_default();
        e.sent_ns = e.sent_ns.max(b.sent_ns);
        e.recv += b.recv;
        e.last_ns = e.last_ns.max(b.last_ns);
    }
}

/// Percentiles of a histogram in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

pub fn summarize(h: &Histogram<u64>) -> Summary {
    if h.is_empty() {
        return Summary::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Summary {
        count: h.len(),
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        max_ms: ms(h.max()),
        mean_ms: h.mean() / 1000.0,
    }
}

/// Points of a histogram's percentile curve, for charts: (percentile, ms).
pub fn percentile_curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    [
        0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99, 100.0,
    ]
    .iter()
    .map(|q| (*q, h.value_at_quantile(q / 100.0) as f64 / 1000.0))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_histograms_keep_percentiles() {
        let mut a = new_hist();
        let mut b = new_hist();
        for v in 1..=1000u64 {
            a.record(v).unwrap();
        }
        for v in 1001..=2000u64 {
            b.record(v * 10).unwrap();
        }
        let mut merged = new_hist();
        HistWire::from_hist(&a).merge_into(&mut merged);
        let json = serde_json::to_string(&HistWire::from_hist(&b)).unwrap();
        let back: HistWire = serde_json::from_str(&json).unwrap();
        back.merge_into(&mut merged);
        assert_eq!(merged.len(), 2000);
        let p50 = merged.value_at_quantile(0.5);
        assert!((995..=1005).contains(&p50), "{p50}");
        let p99 = merged.value_at_quantile(0.99);
        assert!((19_700..=19_900).contains(&p99), "{p99}");
    }

    #[test]
    fn bcast_tables_merge_by_key() {
        let mut t = BcastTable::new();
        merge_bcasts(
            &mut t,
            &[(
                1,
                BcastSeen {
                    sent_ns: 100,
                    recv: 3,
                    last_ns: 500,
                },
            )],
        );
        merge_bcasts(
            &mut t,
            &[(
                1,
                BcastSeen {
                    sent_ns: 0,
                    recv: 2,
                    last_ns: 900,
                },
            )],
        );
        assert_eq!(
            t[&1],
            BcastSeen {
                sent_ns: 100,
                recv: 5,
                last_ns: 900
            }
        );
    }

    #[test]
    fn counters_add() {
        let mut a = Counters {
            arrivals_done: true,
            started: 2,
            ..Default::default()
        };
        a.errors.timeout = 1;
        let b = Counters {
            arrivals_done: false,
            started: 3,
            ..Default::default()
        };
        a.add(&b);
        assert_eq!(a.started, 5);
        assert!(!a.arrivals_done);
        assert_eq!(a.errors.total(), 1);
    }
}
