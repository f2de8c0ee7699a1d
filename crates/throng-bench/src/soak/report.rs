//! What a soak reports: how it ran (population, churn, what the clients and
//! the server API did), every series sampled with its verdict and its
//! points (at most [`MAX_POINTS`] each, for the charts), and the names of
//! those that grew; as JSON (`--json`), a terminal summary and the HTML
//! report (`crate::report::html` draws a chart per series).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::api::Counts;
use super::fit::{self, Verdict, Windows};
use super::series::{Kind, Samples};
use super::{Status, Topics};

/// Points per series in the report (a 30-minute soak has 1,800 samples).
pub const MAX_POINTS: usize = 600;

#[derive(Serialize, Debug, Clone)]
pub struct SoakReport {
    pub scenario: &'static str,
    /// Unix seconds at the start.
    pub started_unix: u64,
    /// Nothing grew, and the soak held its load.
    pub passed: bool,
    /// The series that grew (or did not come back), each with why.
    pub grew: Vec<String>,
    /// How the soak fell short of its load, if it did: the population not
    /// held (under 90% of it open on average over the second half), or the
    /// clients' errors 1% of their sessions or more. A soak that did not
    /// hold its load proves nothing about growth under it.
    pub load_missed: Vec<String>,
    pub duration_secs: f64,
    /// Sessions held at once, and new ones a second.
    pub population: u64,
    pub churn_per_sec: f64,
    pub mean_life_secs: f64,
    /// Server worker processes, and whether they ran on Redis.
    pub workers: usize,
    pub redis: bool,
    /// The `throng serve` arguments and the config file given to it.
    pub server_args: Vec<String>,
    pub server_config: String,
    pub topics: Topics,
    pub client_processes: usize,
    pub windows: Windows,
    /// The population's relative noise over the second half.
    pub population_noise: f64,
    /// The clients' counts, summed over their processes.
    pub clients: Status,
    /// The server API's calls by route.
    pub api: Counts,
    /// Requests the app backend answered, by hook.
    pub backend: BTreeMap<String, u64>,
    pub series: Vec<SeriesReport>,
}

/// One series: its verdict (summed series only), its points and each
/// worker's.
#[derive(Serialize, Debug, Clone)]
pub struct SeriesReport {
    pub name: String,
    pub verdict: Option<Verdict>,
    pub points: Vec<(f64, f64)>,
    pub workers: BTreeMap<String, Vec<(f64, f64)>>,
}

/// The verdict on every summed series, with their points and their
/// workers' (`NAME@wI`), those that grew first.
pub fn series(s: &Samples, w: &Windows) -> (Vec<SeriesReport>, f64) {
    let noise = fit::population_noise(s, w);
    let mut out: Vec<SeriesReport> = s
        .series
        .keys()
        .filter(|n| !n.contains("@w"))
        .map(|name| SeriesReport {
            name: name.clone(),
            verdict: fit::judge(s, name, w, noise),
            points: s.points(name, MAX_POINTS),
            workers: s
                .series
                .keys()
                .filter_map(|k| {
                    let (base, worker) = k.rsplit_once('@')?;
                    (base == name).then(|| (worker.to_string(), s.points(k, MAX_POINTS)))
                })
                .collect(),
        })
        .collect();
    out.sort_by_key(|r| (!r.verdict.as_ref().is_some_and(|v| v.grew), r.name.clone()));
    (out, noise)
}

/// The share of the population a soak must hold on average over its
/// second half, and the clients' errors per session it may see at most.
pub const HELD: f64 = 0.9;
pub const ERRORS_PER_SESSION: f64 = 0.01;

/// How a soak fell short of its load (see [`SoakReport::load_missed`]).
pub fn load_missed(s: &Samples, w: &Windows, population: u64, clients: &Status) -> Vec<String> {
    let mut missed = Vec::new();
    let (_, open) = s.window(super::series::SESSIONS, w.from, w.to);
    let mean = open.iter().sum::<f64>() / open.len().max(1) as f64;
    if mean < HELD * population as f64 {
        missed.push(format!(
            "{mean:.0} sessions open on average over the second half, under {:.0}% of {population}: the machine (or the server) could not keep the population connected",
            HELD * 100.0
        ));
    }
    let sessions = clients.connects.max(1);
    if clients.errors as f64 >= ERRORS_PER_SESSION * sessions as f64 {
        missed.push(format!(
            "the clients saw {} errors in {sessions} sessions ({:.1}%, the bound: under {:.0}%)",
            clients.errors,
            clients.errors as f64 * 100.0 / sessions as f64,
            ERRORS_PER_SESSION * 100.0
        ));
    }
    missed
}

impl SoakReport {
    /// The names of the series that grew, with why.
    pub fn grown(series: &[SeriesReport]) -> Vec<String> {
        series
            .iter()
            .filter_map(|r| {
                let v = r.verdict.as_ref().filter(|v| v.grew)?;
                Some(format!("{}: {}", r.name, v.why.clone().unwrap_or_default()))
            })
            .collect()
    }

    /// The terminal summary.
    pub fn summary(&self) -> String {
        let mut o = String::new();
        let c = &self.clients;
        let _ = writeln!(
            o,
            "throng bench --soak: {:.0} s, {} sessions churned at {:.0} a second (mean life {:.0} s), {} worker(s){}",
            self.duration_secs,
            self.population,
            self.churn_per_sec,
            self.mean_life_secs,
            self.workers,
            if self.redis { " on Redis" } else { "" }
        );
        let _ = writeln!(
            o,
            "  clients: {} sessions ({} long-poll), {} connect errors; {} joins ({} refused), {} rejoins with since ({} recovered); {} leaves, {} pushes ({} ok), {} heartbeats, {} messages received",
            c.connects, c.longpoll_sessions, c.connect_errors, c.joins, c.join_errors,
            c.recovered + c.not_recovered, c.recovered, c.leaves, c.pushes, c.push_ok, c.heartbeats, c.received
        );
        let _ = writeln!(
            o,
            "  ends: {} close frames, {} resets, {} dropped, {} long-poll left to expire, {} long-poll cut mid-poll, {} disconnected by the server API, {} other server closes; {} errors{}",
            c.ended_close, c.ended_reset, c.ended_drop, c.ended_longpoll_expire, c.ended_longpoll_cut,
            c.server_disconnects, c.server_closes, c.errors,
            c.first_error.as_ref().map_or(String::new(), |e| format!(" (first: {e})"))
        );
        for (kind, n) in &c.error_kinds {
            let _ = writeln!(o, "    {n} x {kind}");
        }
        let api: Vec<String> = self
            .api
            .iter()
            .map(|(k, v)| format!("{k} {}/{}", v.ok, v.ok + v.errors))
            .collect();
        let _ = writeln!(o, "  server API (ok/calls): {}", api.join(", "));
        let backend: Vec<String> = self
            .backend
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(o, "  app backend requests: {}", backend.join(", "));
        let _ = writeln!(
            o,
            "  series over the second half ({:.0}-{:.0} s; population noise {:.2}%), and once the clients left:",
            self.windows.from, self.windows.to, self.population_noise * 100.0
        );
        let _ = writeln!(
            o,
            "    {:<44} {:>13} {:>13} {:>11} {:>10} {:>11} {:>11}",
            "series", "start", "end", "per hour", "band", "before", "after"
        );
        for r in &self.series {
            let Some(v) = &r.verdict else { continue };
            let band = match v.kind {
                Kind::Memory => format!("{:+.1}%", v.growth_pct.unwrap_or(0.0)),
                _ => num(v.band),
            };
            let _ = writeln!(
                o,
                "  {} {:<44} {:>13} {:>13} {:>11} {:>10} {:>11} {:>11}",
                if v.grew { "!" } else { " " },
                r.name,
                num(v.start),
                num(v.end),
                num(v.slope_per_hour),
                band,
                v.before.map_or("-".into(), num),
                v.after.map_or("-".into(), num)
            );
        }
        if self.passed {
            let _ = writeln!(o, "soak passed: nothing grew, every count came back once the clients left, and the load was held");
        } else {
            let _ = writeln!(o, "soak FAILED:");
            for g in self.grew.iter().chain(&self.load_missed) {
                let _ = writeln!(o, "  {g}");
            }
        }
        o
    }
}

/// A figure for the summary: whole numbers with separators, else 2 decimals.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if v.abs() >= 1000.0 || v.fract() == 0.0 {
        let n = v.round() as i64;
        let s = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, ch) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(ch);
        }
        return if n < 0 { format!("-{out}") } else { out };
    }
    format!("{v:.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_well() {
        assert_eq!(num(1234567.0), "1,234,567");
        assert_eq!(num(-2500.4), "-2,500");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(0.126), "0.13");
        assert_eq!(num(f64::NAN), "-");
    }

    #[test]
    fn grown_series_come_first_and_are_named() {
        let mut s = Samples::default();
        for i in -5..=60 {
            let t = i as f64;
            let mut row: BTreeMap<String, f64> = BTreeMap::new();
            row.insert("flat@w0".into(), if t < 0.0 { 0.0 } else { 3.0 });
            row.insert("leak@w0".into(), if t < 0.0 { 0.0 } else { t * 10.0 });
            Samples::add_sums(&mut row);
            s.push(t, row);
        }
        let w = Windows {
            from: 20.0,
            to: 40.0,
            stopped: 40.0,
            last: 60.0,
        };
        let (series, _) = series(&s, &w);
        assert_eq!(series[0].name, "flat");
        assert!(series[1].workers.contains_key("w0"));
        let grew = SoakReport::grown(&series);
        assert_eq!(grew.len(), 2, "{grew:?}");
        assert!(grew[0].starts_with("flat: 3 once"), "{grew:?}");
        assert!(grew[1].starts_with("leak: rose"), "{grew:?}");
    }
}
