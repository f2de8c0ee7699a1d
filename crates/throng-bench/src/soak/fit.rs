//! The verdict on each series of a soak: a least-squares line over the
//! second half of the soak (when the population has long been steady), the
//! noise around it, and the rules:
//!
//! - **No growth beyond noise** (every series but memory): the line's rise
//!   over the window, and the change from the window's first tenth to its
//!   last, must both stay within the noise band: three times the residuals'
//!   standard deviation, or three times the population's own relative noise
//!   times the series' level (a count that follows the population moves as
//!   it does), and at least 1% of its level and 1 (see [`LEVEL_SHARE`]). A
//!   line fitted to stationary noise rises by a fraction of one standard
//!   deviation over a window of a hundred samples or more, so the band is
//!   far from what noise alone reaches; a leak of one thing a second over
//!   fifteen minutes is 900 things.
//! - **Memory** (RSS, PSS, Redis's memory): the line's rise over the second
//!   half must be less than 5% of its value at the half's start. An
//!   allocator's heap settles in steps, not in a line, so memory gets a
//!   relative bound rather than the noise band.
//! - **Back where it started** (counts): once the clients have gone and
//!   the server has had time to expire what they left (long-poll sessions,
//!   idle keep-alive connections to the backend, history past its ttl), a
//!   count is back at its value before the clients came.

use serde::Serialize;

use super::series::{Kind, Samples, SESSIONS};

/// A count is back when it is this close to its value before the clients.
pub const RETURN_TOLERANCE: f64 = 0.5;
/// A series moving by less than this share of its level is not growing:
/// the pool of keep-alive connections to the backend, or the sockets
/// between a client's close and the server's, move a count of open files
/// in steps that a short window reads as a slope. A smaller leak of
/// something the clients hold is still caught when they leave: counts must
/// come back to exactly where they started.
pub const LEVEL_SHARE: f64 = 0.01;
/// Memory may grow this much (percent) over the second half.
pub const MEMORY_GROWTH_PCT: f64 = 5.0;

/// A least-squares line and the noise around it.
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// Per second.
    pub slope: f64,
    /// The line's value at `t = 0`.
    pub intercept: f64,
    /// The residuals' standard deviation.
    pub noise: f64,
    pub n: usize,
}

impl Line {
    /// The least-squares line through `(t, y)` (two points at least).
    pub fn fit(t: &[f64], y: &[f64]) -> Option<Line> {
        let n = t.len().min(y.len());
        if n < 2 {
            return None;
        }
        let (mt, my) = (mean(&t[..n]), mean(&y[..n]));
        let (mut stt, mut sty) = (0.0, 0.0);
        for i in 0..n {
            stt += (t[i] - mt) * (t[i] - mt);
            sty += (t[i] - mt) * (y[i] - my);
        }
        let slope = if stt > 0.0 { sty / stt } else { 0.0 };
        let intercept = my - slope * mt;
        let ss: f64 = (0..n)
            .map(|i| (y[i] - intercept - slope * t[i]).powi(2))
            .sum();
        let noise = (ss / (n.saturating_sub(2).max(1)) as f64).sqrt();
        Some(Line {
            slope,
            intercept,
            noise,
            n,
        })
    }

    pub fn at(&self, t: f64) -> f64 {
        self.intercept + self.slope * t
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

fn sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// The times a soak's verdicts read.
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
pub struct Windows {
    /// The second half of the soak: from, to (seconds since the clients
    /// started).
    pub from: f64,
    pub to: f64,
    /// When the clients were told to stop, and the last sample after.
    pub stopped: f64,
    pub last: f64,
}

/// One series' verdict.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Verdict {
    pub kind: Kind,
    /// The line over the window: per hour, and its values at the window's
    /// start and end.
    pub slope_per_hour: f64,
    pub line_start: f64,
    pub line_end: f64,
    /// The residuals' standard deviation.
    pub noise: f64,
    /// The means of the window's first and last tenths.
    pub start: f64,
    pub end: f64,
    /// What a change must pass to be growth (not memory).
    pub band: f64,
    /// Memory: the line's rise over the window, percent of its start.
    pub growth_pct: Option<f64>,
    /// Counts: the mean before the clients came, the last value after they
    /// left, and how long after they were told to stop it got back (`null`:
    /// it did not).
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub returned_after_secs: Option<f64>,
    /// Whether it grew (or did not come back), and why, in words.
    pub grew: bool,
    pub why: Option<String>,
}

/// The population's relative noise over the window: the standard
/// deviation of the clients' open sessions over their mean.
pub fn population_noise(s: &Samples, w: &Windows) -> f64 {
    let (_, y) = s.window(SESSIONS, w.from, w.to);
    let m = mean(&y);
    if m > 0.0 {
        sd(&y) / m
    } else {
        0.0
    }
}

/// The verdict on series `name` (`None`: too few samples in the window).
pub fn judge(s: &Samples, name: &str, w: &Windows, pop_noise: f64) -> Option<Verdict> {
    let kind = Kind::of(name);
    let (t, y) = s.window(name, w.from, w.to);
    let line = Line::fit(&t, &y)?;
    let tenth = (y.len() / 10).max(1);
    let (start, end) = (mean(&y[..tenth]), mean(&y[y.len() - tenth..]));
    let (line_start, line_end) = (line.at(w.from), line.at(w.to));
    let rise = line_end - line_start;
    let level = mean(&y).abs();
    let band = (3.0 * line.noise)
        .max(3.0 * pop_noise * level)
        .max(LEVEL_SHARE * level)
        .max(1.0);
    let mut v = Verdict {
        kind,
        slope_per_hour: line.slope * 3600.0,
        line_start,
        line_end,
        noise: line.noise,
        start,
        end,
        band,
        growth_pct: None,
        before: None,
        after: None,
        returned_after_secs: None,
        grew: false,
        why: None,
    };
    if kind == Kind::Shown {
        return Some(v);
    }
    if kind == Kind::Memory {
        let pct = if line_start > 0.0 {
            rise / line_start * 100.0
        } else {
            0.0
        };
        v.growth_pct = Some(pct);
        if pct >= MEMORY_GROWTH_PCT {
            v.grew = true;
            v.why = Some(format!(
                "grew {pct:.1}% over the second half (the bound: less than {MEMORY_GROWTH_PCT}%)"
            ));
        }
        return Some(v);
    }
    if rise > band && end - start > band {
        v.grew = true;
        v.why = Some(format!(
            "rose {rise:.1} over the second half ({:.1} an hour), past its noise band of {band:.1}",
            line.slope * 3600.0
        ));
    }
    if kind == Kind::Count {
        back_where_it_started(s, name, w, &mut v);
    }
    Some(v)
}

/// Whether count `name` came back to its value before the clients once
/// they had left (fills `v`'s `before`, `after`, `returned_after_secs`).
fn back_where_it_started(s: &Samples, name: &str, w: &Windows, v: &mut Verdict) {
    let (_, before) = s.window(name, f64::NEG_INFINITY, -f64::EPSILON);
    let (t, after) = s.window(name, w.stopped, w.last);
    let (Some(&last), false) = (after.last(), before.is_empty()) else {
        return;
    };
    let base = mean(&before);
    v.before = Some(base);
    v.after = Some(last);
    let within = |x: f64| x <= base + RETURN_TOLERANCE;
    // From the last sample back, the first time it stayed within.
    let since = after.iter().rposition(|x| !within(*x)).map_or(0, |i| i + 1);
    if since < after.len() {
        v.returned_after_secs = Some(t[since] - w.stopped);
    } else if !v.grew {
        v.grew = true;
        v.why = Some(format!(
            "{last} once the clients had left, against {base:.1} before they came"
        ));
    }
}

/// Whether every count is back where it started (the settle's end).
pub fn all_back(s: &Samples, w: &Windows) -> bool {
    s.series
        .keys()
        .filter(|n| !n.contains("@w") && Kind::of(n) == Kind::Count)
        .all(|n| {
            let (_, before) = s.window(n, f64::NEG_INFINITY, -f64::EPSILON);
            let (_, after) = s.window(n, w.stopped, w.last);
            match (before.is_empty(), after.last()) {
                (false, Some(&last)) => last <= mean(&before) + RETURN_TOLERANCE,
                _ => true,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(f: impl Fn(f64) -> f64, name: &str) -> Samples {
        let mut s = Samples::default();
        for i in -10..=400 {
            let t = i as f64;
            let mut row: std::collections::BTreeMap<String, f64> =
                [(name.to_string(), f(t))].into();
            row.insert(
                SESSIONS.into(),
                if (0.0..=300.0).contains(&t) {
                    1000.0
                } else {
                    0.0
                },
            );
            s.push(t, row);
        }
        s
    }

    const W: Windows = Windows {
        from: 150.0,
        to: 300.0,
        stopped: 300.0,
        last: 400.0,
    };

    /// A deterministic wobble of amplitude `a` (no trend).
    fn noise(t: f64, a: f64) -> f64 {
        a * ((t * 1.7).sin() + (t * 0.37).cos()) / 2.0
    }

    #[test]
    fn a_line_is_fitted_exactly() {
        let t = [0.0, 1.0, 2.0, 3.0];
        let l = Line::fit(&t, &[1.0, 3.0, 5.0, 7.0]).unwrap();
        assert!((l.slope - 2.0).abs() < 1e-12 && (l.intercept - 1.0).abs() < 1e-12);
        assert!(l.noise < 1e-9);
        assert!(Line::fit(&[1.0], &[1.0]).is_none());
    }

    #[test]
    fn steady_noise_and_a_return_pass() {
        let count = |t: f64| match t {
            t if !(0.0..=330.0).contains(&t) => 0.0,
            t if t <= 300.0 => 5000.0 + noise(t, 40.0),
            _ => 7.0,
        };
        let s = samples(count, "throng_connections");
        let v = judge(&s, "throng_connections", &W, 0.0).unwrap();
        assert!(!v.grew, "{v:?}");
        assert_eq!(v.before, Some(0.0));
        assert_eq!(v.returned_after_secs, Some(31.0));
        assert!(all_back(&s, &W));
    }

    #[test]
    fn a_leak_is_named() {
        // One a second on top of the noise: 150 over the window.
        let leak = |t: f64| {
            if t < 0.0 {
                0.0
            } else {
                5000.0 + noise(t, 40.0) + t.min(300.0)
            }
        };
        let s = samples(leak, "throng_users");
        let v = judge(&s, "throng_users", &W, 0.0).unwrap();
        assert!(v.grew, "{v:?}");
        assert!(v.why.unwrap().contains("rose"));
        // A count that stays up after the clients left, however flat.
        let stuck = |t: f64| if t < 0.0 { 0.0 } else { 12.0 };
        let s = samples(stuck, "throng_hook_waits");
        let v = judge(&s, "throng_hook_waits", &W, 0.0).unwrap();
        assert!(v.grew && v.returned_after_secs.is_none(), "{v:?}");
        assert!(!all_back(&s, &W));
    }

    #[test]
    fn memory_is_judged_by_its_growth_over_the_second_half() {
        let flat = |t: f64| 100e6 + t.min(150.0) * 1e5 + noise(t, 1e5);
        let v = judge(
            &samples(flat, "process:rss_bytes"),
            "process:rss_bytes",
            &W,
            0.0,
        )
        .unwrap();
        assert!(!v.grew && v.growth_pct.unwrap() < 1.0, "{v:?}");
        let growing = |t: f64| 100e6 + t * 1e5;
        let v = judge(
            &samples(growing, "process:rss_bytes"),
            "process:rss_bytes",
            &W,
            0.0,
        )
        .unwrap();
        assert!(v.grew && v.growth_pct.unwrap() > 5.0, "{v:?}");
        assert_eq!(v.before, None, "memory need not come back");
    }

    #[test]
    fn the_population_noise_widens_the_band() {
        let mut s = samples(|t| 1000.0 + noise(t, 10.0), "throng_channels_joined");
        let n = population_noise(&s, &W);
        assert_eq!(n, 0.0);
        s.series.get_mut(SESSIONS).unwrap()[200] = 900.0;
        assert!(population_noise(&s, &W) > 0.0);
    }
}
