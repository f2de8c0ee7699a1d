//! A soak's samples: one value per series per second (NaN where a sample
//! has none, such as the PSS between its reads), and the gauges of a
//! Prometheus page.
//!
//! Series names: a server gauge by its `/metrics` name (`throng_topics`,
//! with its labels if it has any), summed over the workers; each worker's
//! own as `NAME@wI`; the processes' figures from `/proc` as
//! `process:rss_bytes`, `process:pss_bytes`, `process:open_files` and
//! `process:threads` (summed, and `@wI`); Redis's as `redis:used_memory_bytes`,
//! `redis:keys`, `redis:pubsub_channels` and `redis:clients`; the clients'
//! sessions open as `bench:sessions_open`.

use std::collections::BTreeMap;

use serde::Serialize;

/// The bench's own count of the population: what a gauge tied to the
/// population is compared with.
pub const SESSIONS: &str = "bench:sessions_open";

/// The gauges of a Prometheus text page (`# TYPE NAME gauge`), by name
/// with their labels (`name{a="b"}`), each sample's value.
pub fn gauges(text: &str) -> BTreeMap<String, f64> {
    let mut names = std::collections::HashSet::new();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some("gauge")) = (parts.next(), parts.next()) {
                names.insert(name.to_string());
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let base = key.split('{').next().unwrap_or(key);
        if !names.contains(base) {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            out.insert(key.to_string(), v);
        }
    }
    out
}

/// What a series is, which decides how it is judged
/// (`super::fit::judge`).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A count of things (or bytes held for them) that the clients' going
    /// must take back to where it was before they came.
    Count,
    /// Memory of a process: judged by its growth over the second half
    /// (less than 5%), not by a return.
    Memory,
    /// A setting or a state (a limit, readiness, a link up): judged by its
    /// slope only.
    Level,
    /// Drawn, not judged: memory the allocator keeps for reuse, which rises
    /// after a peak by design (the RSS it is part of is judged).
    Shown,
}

impl Kind {
    pub fn of(name: &str) -> Kind {
        let base = name.split(['@', '{']).next().unwrap_or(name);
        match base {
            "process:rss_bytes"
            | "process:pss_bytes"
            | "redis:used_memory_bytes"
            | "throng_process_resident_memory_bytes"
            | "throng_heap_allocated_bytes" => Kind::Memory,
            "throng_heap_free_bytes" => Kind::Shown,
            "throng_max_connections"
            | "throng_ready"
            | "throng_draining"
            | "throng_hook_circuit_state"
            | SESSIONS => Kind::Level,
            b if b.ends_with("_connected") => Kind::Level,
            // Ages and round trips (the Redis links' last answer and
            // PING): a link that has had nothing to do since the clients
            // left answers only its once-a-second PING, so its age sits
            // near 1 s rather than near 0; a state, not a count.
            b if b.ends_with("_last_answer_seconds") || b.ends_with("_ping_seconds") => Kind::Level,
            _ => Kind::Count,
        }
    }
}

/// Samples, one row per second.
#[derive(Default, Debug, Clone)]
pub struct Samples {
    /// Seconds since the clients started (negative before).
    pub t: Vec<f64>,
    /// Each series' values, aligned with `t` (NaN: no value then).
    pub series: BTreeMap<String, Vec<f64>>,
}

impl Samples {
    /// Adds a row at `t`.
    pub fn push(&mut self, t: f64, row: BTreeMap<String, f64>) {
        let n = self.t.len();
        self.t.push(t);
        for (name, v) in row {
            let col = self.series.entry(name).or_insert_with(|| vec![f64::NAN; n]);
            col.push(v);
        }
        for col in self.series.values_mut() {
            if col.len() == n {
                col.push(f64::NAN);
            }
        }
    }

    /// The values of `name` at times in `from..=to`, NaN left out.
    pub fn window(&self, name: &str, from: f64, to: f64) -> (Vec<f64>, Vec<f64>) {
        let Some(col) = self.series.get(name) else {
            return (Vec::new(), Vec::new());
        };
        self.t
            .iter()
            .zip(col)
            .filter(|(t, v)| **t >= from && **t <= to && v.is_finite())
            .map(|(t, v)| (*t, *v))
            .unzip()
    }

    /// Every series summed over the workers, from each worker's values
    /// (`NAME@wI`), added to `row`.
    pub fn add_sums(row: &mut BTreeMap<String, f64>) {
        let mut sums: BTreeMap<String, f64> = BTreeMap::new();
        for (name, v) in row.iter() {
            if let Some((base, _)) = name.rsplit_once("@w") {
                *sums.entry(base.to_string()).or_default() += v;
            }
        }
        row.extend(sums);
    }

    /// At most `max` points of `name` (every k-th), for a chart.
    pub fn points(&self, name: &str, max: usize) -> Vec<(f64, f64)> {
        let Some(col) = self.series.get(name) else {
            return Vec::new();
        };
        let pts: Vec<(f64, f64)> = self
            .t
            .iter()
            .zip(col)
            .filter(|(_, v)| v.is_finite())
            .map(|(t, v)| (*t, *v))
            .collect();
        let step = pts.len().div_ceil(max.max(1)).max(1);
        let mut out: Vec<(f64, f64)> = pts.iter().step_by(step).copied().collect();
        if let (Some(last), Some(kept)) = (pts.last(), out.last()) {
            if last.0 != kept.0 {
                out.push(*last);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_gauges_only() {
        let page = "# HELP throng_connections Open.\n# TYPE throng_connections gauge\nthrong_connections 12\n# TYPE throng_joins_total counter\nthrong_joins_total 99\n# TYPE throng_hook_x gauge\nthrong_hook_x{hook=\"join\"} 3\nthrong_hook_x{hook=\"push\"} 4.5\n";
        let g = gauges(page);
        assert_eq!(g.len(), 3, "{g:?}");
        assert_eq!(g["throng_connections"], 12.0);
        assert_eq!(g["throng_hook_x{hook=\"push\"}"], 4.5);
        assert!(!g.contains_key("throng_joins_total"));
    }

    #[test]
    fn kinds() {
        assert_eq!(Kind::of("throng_connections"), Kind::Count);
        assert_eq!(Kind::of("throng_connections@w1"), Kind::Count);
        assert_eq!(Kind::of("process:rss_bytes@w0"), Kind::Memory);
        assert_eq!(Kind::of("throng_backplane_connected"), Kind::Level);
        assert_eq!(Kind::of(SESSIONS), Kind::Level);
        assert_eq!(
            Kind::of("throng_redis_last_answer_seconds{link=\"occupancy\"}@w1"),
            Kind::Level
        );
        assert_eq!(Kind::of("process:open_files"), Kind::Count);
    }

    #[test]
    fn rows_align_and_sum() {
        let mut s = Samples::default();
        let mut row: BTreeMap<String, f64> =
            [("a@w0".to_string(), 1.0), ("a@w1".to_string(), 2.0)].into();
        Samples::add_sums(&mut row);
        assert_eq!(row["a"], 3.0);
        s.push(0.0, row);
        s.push(1.0, [("b".to_string(), 5.0)].into());
        assert_eq!(s.series["a"].len(), 2);
        assert!(s.series["a"][1].is_nan());
        assert!(s.series["b"][0].is_nan());
        assert_eq!(s.window("a", 0.0, 1.0), (vec![0.0], vec![3.0]));
        for i in 2..1000 {
            s.push(i as f64, [("b".to_string(), i as f64)].into());
        }
        let p = s.points("b", 100);
        assert!(p.len() <= 101, "{}", p.len());
        assert_eq!(p.last(), Some(&(999.0, 999.0)));
    }
}
