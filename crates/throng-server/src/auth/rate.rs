//! The per-socket push budget (`--push-rate`, `--push-burst`,
//! `--push-strikes`): a token bucket kept as one `u32` in the connection.
//!
//! The bucket is the generic cell rate algorithm, the token bucket's
//! one-timestamp form: the connection stores the "theoretical arrival
//! time" (TAT) of its next push, in milliseconds of the shard's clock. A
//! push is allowed when the TAT is at most `(burst - 1) * interval` ahead
//! of now, and moves it one interval on. No timer refills anything: time
//! passing is the refill. A full bucket (a quiet socket) is any TAT in the
//! past.
//!
//! A refused push (answered `{"reason":"rate limited"}`) moves the TAT on
//! too, so a client that keeps pushing past its budget digs deeper instead
//! of being served every time the bucket drips; once it is `strikes`
//! intervals past the burst, the socket is closed with 1008 (policy
//! violation). A client that backs off pays the debt back by waiting.
//!
//! The clock wraps every 49.7 days; a TAT further ahead than any allowed
//! debt is stale (a socket quiet for weeks) and counts as a full bucket.

/// What to do with one push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Answer `{"reason":"rate limited"}`.
    Limited,
    /// Limited, and the socket is to be closed with 1008.
    Abuse,
}

/// The push budget of every socket of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushLimit {
    /// Milliseconds per push at the sustained rate; 0 = unlimited.
    interval: u32,
    /// How far the TAT may run ahead and still allow a push.
    tolerance: u32,
    /// How far past the tolerance refused pushes may take it before the
    /// socket is closed; `None`: never closed.
    strike_room: Option<u32>,
}

impl PushLimit {
    /// `rate` pushes a second sustained, `burst` at once; the `strikes`-th
    /// refused push not paid back by waiting closes the socket. `rate` 0 =
    /// no limit, `strikes` 0 = never close.
    pub fn new(rate: f64, burst: u32, strikes: u32) -> PushLimit {
        if rate.is_nan() || rate <= 0.0 {
            return PushLimit {
                interval: 0,
                tolerance: 0,
                strike_room: None,
            };
        }
        let interval = (1000.0 / rate).round().clamp(1.0, 3_600_000.0) as u32;
        let tolerance = interval.saturating_mul(burst.max(1) - 1);
        PushLimit {
            interval,
            tolerance,
            strike_room: (strikes > 0).then(|| interval.saturating_mul(strikes)),
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.interval == 0
    }

    /// Decides one push at `now` (ms, wrapping) and updates `tat`.
    pub fn check(&self, tat: &mut u32, now: u32) -> Verdict {
        if self.interval == 0 {
            return Verdict::Allow;
        }
        let most = self
            .tolerance
            .saturating_add(self.interval)
            .saturating_add(self.strike_room.unwrap_or(0));
        let ahead = tat.wrapping_sub(now) as i32;
        let ahead = if ahead <= 0 || ahead as u32 > most {
            0
        } else {
            ahead as u32
        };
        if ahead <= self.tolerance {
            *tat = now.wrapping_add(ahead + self.interval);
            return Verdict::Allow;
        }
        match self.strike_room {
            None => Verdict::Limited,
            Some(room) => {
                let ahead = ahead + self.interval;
                if ahead > self.tolerance.saturating_add(room) {
                    Verdict::Abuse
                } else {
                    *tat = now.wrapping_add(ahead);
                    Verdict::Limited
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(limit: &PushLimit, tat: &mut u32, now: u32, n: usize) -> Vec<Verdict> {
        (0..n).map(|_| limit.check(tat, now)).collect()
    }

    #[test]
    fn burst_then_rate() {
        let l = PushLimit::new(20.0, 50, 0);
        let mut tat = 0;
        let v = run(&l, &mut tat, 1000, 51);
        assert!(v[..50].iter().all(|v| *v == Verdict::Allow));
        assert_eq!(v[50], Verdict::Limited);
        // 50 ms later one more is allowed, not two.
        assert_eq!(l.check(&mut tat, 1050), Verdict::Allow);
        assert_eq!(l.check(&mut tat, 1050), Verdict::Limited);
        // Quiet for the whole burst window: full again.
        let v = run(&l, &mut tat, 1050 + 2600, 50);
        assert!(v.iter().all(|v| *v == Verdict::Allow));
    }

    #[test]
    fn sustained_rate_is_served() {
        let l = PushLimit::new(20.0, 1, 3);
        let mut tat = 0;
        for i in 0..1000u32 {
            assert_eq!(l.check(&mut tat, 5000 + i * 50), Verdict::Allow, "push {i}");
        }
    }

    #[test]
    fn strikes_close_a_client_that_keeps_pushing() {
        let l = PushLimit::new(10.0, 5, 3);
        let mut tat = 0;
        let v = run(&l, &mut tat, 0, 8);
        assert_eq!(
            v,
            [
                [Verdict::Allow; 5].as_slice(),
                &[Verdict::Limited, Verdict::Limited, Verdict::Abuse]
            ]
            .concat()
        );
        // Twice the rate still digs in: limited, then closed.
        let mut tat = 0;
        let mut now = 0;
        let mut seen = Vec::new();
        for _ in 0..100 {
            let v = l.check(&mut tat, now);
            seen.push(v);
            if v == Verdict::Abuse {
                break;
            }
            now += 50;
        }
        assert_eq!(seen.last(), Some(&Verdict::Abuse));
        // One that backs off after a refusal pays the debt back.
        let mut tat = 0;
        run(&l, &mut tat, 0, 6);
        assert_eq!(l.check(&mut tat, 700), Verdict::Allow);
    }

    #[test]
    fn clock_wrap_and_stale_tat() {
        let l = PushLimit::new(20.0, 2, 5);
        let mut tat = u32::MAX - 10;
        assert_eq!(l.check(&mut tat, u32::MAX - 10), Verdict::Allow);
        assert_eq!(l.check(&mut tat, u32::MAX - 10), Verdict::Allow);
        assert_eq!(l.check(&mut tat, 30), Verdict::Limited, "across the wrap");
        assert_eq!(l.check(&mut tat, 90), Verdict::Allow);
        // A TAT weeks old, now "ahead" after a wrap, is a full bucket.
        let mut tat = 1_000_000_000;
        assert_eq!(
            l.check(&mut tat, 1_000_000_000u32.wrapping_add(3_000_000_000)),
            Verdict::Allow
        );
        assert!(PushLimit::new(0.0, 1, 1).is_unlimited());
        assert_eq!(PushLimit::new(0.0, 1, 1).check(&mut tat, 0), Verdict::Allow);
    }
}
