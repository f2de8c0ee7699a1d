//! The metrics registry's types: each metric is one static [`Metric`]
//! (name, kind, help, and whether the dashboard shows it) defined next to
//! the state it reads; each source of figures hands its values to a
//! [`Sink`] against those descriptors. `/metrics` is the [`Text`] sink
//! (Prometheus text format); the dashboard's node report is the [`Shown`]
//! sink, which keeps the figures the dashboard lists, by name, without a
//! round trip through text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A metric's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Whether the dashboard lists a metric: a limit or refusal counter (the
/// page lists those that moved), or one of the figures of its tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shows {
    No,
    Limit,
    Figure,
}

/// One metric, defined once: `/metrics` writes its HELP and TYPE lines
/// from here, and every sample of it names it.
#[derive(Debug)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub shows: Shows,
}

impl Metric {
    pub const fn counter(name: &'static str, help: &'static str) -> Metric {
        Metric::new(name, Kind::Counter, help)
    }

    pub const fn gauge(name: &'static str, help: &'static str) -> Metric {
        Metric::new(name, Kind::Gauge, help)
    }

    pub const fn new(name: &'static str, kind: Kind, help: &'static str) -> Metric {
        Metric {
            name,
            kind,
            help,
            shows: Shows::No,
        }
    }

    /// The dashboard lists it among the limits when it moves.
    pub const fn limit(mut self) -> Metric {
        self.shows = Shows::Limit;
        self
    }

    /// The dashboard shows it in a tile.
    pub const fn figure(mut self) -> Metric {
        self.shows = Shows::Figure;
        self
    }
}

/// A sample's value, written as `/metrics` has always written it.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    U(u64),
    I(i64),
    F(f64),
    /// With this many decimals.
    Fixed(f64, usize),
}

impl Value {
    pub fn as_f64(self) -> f64 {
        match self {
            Value::U(v) => v as f64,
            Value::I(v) => v as f64,
            Value::F(v) | Value::Fixed(v, _) => v,
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::U(v) => write!(f, "{v}"),
            Value::I(v) => write!(f, "{v}"),
            Value::F(v) => write!(f, "{v}"),
            Value::Fixed(v, d) => write!(f, "{v:.d$}"),
        }
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::U(v as u64)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::U(v as u64)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::I(v)
    }
}

/// Where a source hands its figures: a family starts with
/// [`Sink::family`], then has its samples.
pub trait Sink {
    /// A metric's family begins (its HELP and TYPE lines), even if no
    /// sample follows.
    fn family(&mut self, m: &'static Metric);
    /// One sample of `m`: `suffix` is a histogram's `_bucket`, `_sum` or
    /// `_count` (else empty), `labels` its label pairs.
    fn sample(&mut self, m: &'static Metric, suffix: &str, labels: &[(&str, &str)], v: Value);
}

impl dyn Sink + '_ {
    /// A metric of one unlabelled sample.
    pub fn put(&mut self, m: &'static Metric, v: impl Into<Value>) {
        self.family(m);
        self.sample(m, "", &[], v.into());
    }
}

/// A metric and the figure it reads off `S`.
pub type Figure<S> = (Metric, fn(&S) -> Value);
/// A metric defined elsewhere (shared) and the figure it reads off `S`.
pub type Shared<S> = (&'static Metric, fn(&S) -> Value);
/// A metric and the counter of `S` it reads.
pub type Counted<S> = (
    Metric,
    for<'a> fn(&'a S) -> &'a std::sync::atomic::AtomicU64,
);

/// A source of figures: hands each of its metrics to a sink.
pub trait Source {
    fn describe(&self, sink: &mut dyn Sink);
}

/// The Prometheus text format, appended to a string.
pub struct Text<'a>(pub &'a mut String);

impl Sink for Text<'_> {
    fn family(&mut self, m: &'static Metric) {
        let (name, help, kind) = (m.name, m.help, m.kind.as_str());
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, m: &'static Metric, suffix: &str, labels: &[(&str, &str)], v: Value) {
        let out = &mut *self.0;
        out.push_str(m.name);
        out.push_str(suffix);
        write_labels(out, labels);
        let _ = writeln!(out, " {v}");
    }
}

/// `{k="v",...}`, nothing without labels.
fn write_labels(out: &mut String, labels: &[(&str, &str)]) {
    for (i, (k, v)) in labels.iter().enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        let _ = write!(out, "{k}=\"{v}\"");
    }
    if !labels.is_empty() {
        out.push('}');
    }
}

/// The Prometheus text of what `describe` hands a sink.
pub fn text(describe: impl FnOnce(&mut dyn Sink)) -> String {
    let mut out = String::with_capacity(4096);
    describe(&mut Text(&mut out));
    out
}

/// The samples of the metrics the dashboard shows, keyed as `/metrics`
/// writes them (`name`, or `name{label="value"}`).
#[derive(Default)]
pub struct Shown(pub BTreeMap<String, f64>);

impl Sink for Shown {
    fn family(&mut self, _: &'static Metric) {}

    fn sample(&mut self, m: &'static Metric, suffix: &str, labels: &[(&str, &str)], v: Value) {
        if m.shows == Shows::No || (m.kind == Kind::Histogram && suffix == "_bucket") {
            return;
        }
        let mut key = format!("{}{suffix}", m.name);
        write_labels(&mut key, labels);
        self.0.insert(key, v.as_f64());
    }
}

/// Appends one metric: its HELP, TYPE and value (for a metric written
/// once, outside any source's table: the tests' fixtures).
pub fn write_metric(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    value: impl std::fmt::Display,
) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// The names of `metrics` that break the registry's rules: not
/// `throng_`-prefixed, or defined twice.
pub fn misnamed<'a>(metrics: impl IntoIterator<Item = &'a Metric>) -> Vec<&'a str> {
    let mut seen = std::collections::BTreeSet::new();
    let mut bad = Vec::new();
    for m in metrics {
        if !m.name.starts_with("throng_") || !seen.insert(m.name) {
            bad.push(m.name);
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: Metric = Metric::counter("throng_a_total", "A.");
    static B: Metric = Metric::gauge("throng_b", "B.").figure();

    #[test]
    fn text_is_prometheus_and_shown_keeps_the_dashboards() {
        let describe = |s: &mut dyn Sink| {
            s.put(&A, 3u64);
            s.family(&B);
            s.sample(&B, "", &[("link", "x")], Value::Fixed(0.5, 3));
        };
        assert_eq!(
            text(describe),
            "# HELP throng_a_total A.\n# TYPE throng_a_total counter\nthrong_a_total 3\n\
             # HELP throng_b B.\n# TYPE throng_b gauge\nthrong_b{link=\"x\"} 0.500\n"
        );
        let mut shown = Shown::default();
        describe(&mut shown);
        assert_eq!(
            shown.0.into_iter().collect::<Vec<_>>(),
            [("throng_b{link=\"x\"}".to_string(), 0.5)]
        );
    }

    #[test]
    fn misnamed_finds_doubles_and_unprefixed() {
        static C: Metric = Metric::gauge("other", "C.");
        assert_eq!(misnamed([&A, &B, &C, &A]), ["other", "throng_a_total"]);
    }
}
