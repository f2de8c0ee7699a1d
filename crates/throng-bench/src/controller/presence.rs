//! Presence in the run: before the plateau, the wait until presence
//! traffic stops (a list-mode crowd leaves gigabytes queued in the server
//! when the last join is answered: memory is measured, and the run goes
//! on, once they are delivered); and presence's part of the report: the
//! traffic by kind and its rates, per join, and the time until each join
//! was visible to every subscriber, from what the agents counted and
//! recorded (see [`crate::presence`]).

use std::time::{Duration, Instant};

use super::run::{Collected, Run};
use crate::error::BenchError;
use crate::presence::{Traffic, Visibility};
use crate::report::{PresenceReport, TrafficRow};
use crate::stats::{percentile_curve, summarize};

/// How join visibility is measured, per mode.
const LIST_METHOD: &str = "each join's send time to the latest receipt, by any subscriber, of a presence_diff joining its key (the key is the user id)";
const COUNT_METHOD: &str = "the k-th join sent to the latest first receipt, by a subscriber whose count was below k, of a presence_count of k or more (exact while the count only grows)";

/// How long presence messages must stop arriving for their traffic to
/// count as over: more than the server's default interval (1 s) and two
/// of the agents' reports (one a second once the arrivals are over).
const QUIET: Duration = Duration::from_millis(2500);

/// In count mode the server sends a topic of N keys its count at most once
/// per `N / rate` seconds (`throng serve --presence-count-rate`, 20,000 by
/// default): the quiet must outlast that period, or the last joins' count
/// is still to come when the run stops listening (1,841 joins of 100,000
/// were reported unseen that way).
const SERVER_COUNT_RATE: f64 = 20_000.0;

/// How long presence messages must stop arriving, for `users` in `count`
/// mode or not.
fn quiet_for(users: u64, count: bool) -> Duration {
    if !count {
        return QUIET;
    }
    QUIET.max(Duration::from_secs_f64(
        1.5 * users as f64 / SERVER_COUNT_RATE + 1.0,
    ))
}

/// The longest the run waits for it.
const SETTLE_MAX: Duration = Duration::from_secs(600);

impl Run {
    /// With a presence rule: waits until no presence message has arrived
    /// for [`QUIET`] ([`quiet_for`] in count mode; at most [`SETTLE_MAX`]) and returns the seconds
    /// until the last one, and when that was (seconds since the run's
    /// start); `None` without a rule.
    pub(super) fn settle_presence(&mut self) -> Result<Option<(f64, f64)>, BenchError> {
        if self.sc.presence.is_none() {
            return Ok(None);
        }
        let count = self.sc.presence_rule()?.is_some_and(|r| r.count);
        let quiet = quiet_for(self.sc.total_users(), count);
        let start = Instant::now();
        let mut last = (u64::MAX, start);
        let mut next_line = start;
        loop {
            self.agents.pump(Duration::from_millis(50))?;
            if self.agents.ending() {
                break;
            }
            let now = Instant::now();
            if now >= self.next_trace {
                self.next_trace = now + Duration::from_millis(100);
                self.trace_point();
            }
            if now >= self.next_sample {
                self.next_sample += self.timeline.every;
                self.sample();
                self.publish_live("presence");
            }
            if now >= next_line {
                next_line = now + Duration::from_secs(1);
                self.progress("presence");
            }
            if let Some(c) = self.agents.total() {
                let seen = c.presence.total().messages;
                if seen != last.0 {
                    last = (seen, now);
                } else if now.duration_since(last.1) >= quiet {
                    break;
                }
            }
            if now.duration_since(start) > SETTLE_MAX {
                eprintln!(
                    "\nwarning: presence messages still arriving {} s after the ramp-up; going on",
                    SETTLE_MAX.as_secs()
                );
                break;
            }
        }
        if self.tty {
            eprintln!();
        }
        Ok(Some((
            last.1.saturating_duration_since(start).as_secs_f64(),
            last.1.saturating_duration_since(self.start).as_secs_f64(),
        )))
    }

    /// The presence report (`None`: no rule, no presence message) and its
    /// join visibility percentile curve. `start_rt`: CLOCK_REALTIME ns at
    /// the first arrival; `metric`: a server counter from its `/metrics`.
    pub(super) fn presence_report(
        &self,
        c: &Collected,
        start_rt: u64,
        settle_secs: Option<f64>,
        metric: &dyn Fn(&str) -> Option<f64>,
    ) -> (Option<PresenceReport>, Vec<(f64, f64)>) {
        let rule = self.sc.presence_rule().ok().flatten();
        let p = &c.counters.presence;
        let total = p.total();
        if rule.is_none() && total.messages == 0 {
            return (None, Vec::new());
        }
        let window_secs = (p.last_ns.saturating_sub(start_rt) as f64 / 1e9).max(0.0);
        let row = |t: Traffic| TrafficRow {
            messages: t.messages,
            bytes: t.bytes,
            messages_per_sec: per(t.messages as f64, window_secs),
            bytes_per_sec: per(t.bytes as f64, window_secs),
        };
        let other = Traffic {
            messages: c.counters.msgs_in.saturating_sub(total.messages),
            bytes: c.counters.bytes_in.saturating_sub(total.bytes),
        };
        let joins = c.presence.joins.len() as u64;
        let (visible, method) = match &rule {
            Some(r) if r.count => (Some(c.presence.count_visibility()), COUNT_METHOD),
            Some(_) => (Some(c.presence.list_visibility()), LIST_METHOD),
            None => (None, "not measured: no presence rule (--presence)"),
        };
        let curve = visible
            .as_ref()
            .map(|v| percentile_curve(&v.hist))
            .unwrap_or_default();
        let (join_visible, unseen) = match &visible {
            Some(Visibility { hist, unseen }) => (summarize(hist), *unseen),
            None => (Default::default(), 0),
        };
        let report = PresenceReport {
            rule: rule.as_ref().map(|r| r.spec.clone()),
            mode: rule.as_ref().map(|r| r.mode().to_string()),
            server_args: self.presence_args.clone(),
            state: row(p.state),
            diff: row(p.diff),
            count: row(p.count),
            other: row(other),
            window_secs,
            settle_secs,
            joins,
            messages_per_join: per(total.messages as f64, joins as f64),
            bytes_per_join: per(total.bytes as f64, joins as f64),
            join_visible,
            join_visible_unseen: unseen,
            join_visible_method: method.into(),
            diffs_distinct: c.presence.diffs.len() as u64,
            diffs_unparsed: c.presence.unparsed(),
            keys_unmatched: c.presence.unmatched(),
            server_state_encodes: metric("throng_presence_state_encodes_total"),
            server_diffs: metric("throng_presence_diffs_total"),
        };
        (Some(report), curve)
    }
}

/// `n` per `d` (0 when `d` is 0).
fn per(n: f64, d: f64) -> f64 {
    if d > 0.0 {
        n / d
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_mode_waits_longer_than_the_servers_count_period() {
        assert_eq!(quiet_for(100_000, false), QUIET);
        assert_eq!(
            quiet_for(1_000, true),
            QUIET,
            "small topics: every interval"
        );
        // 100,000 keys: a count every 5 s at most
        assert!(quiet_for(100_000, true) > Duration::from_secs(5));
    }
}
