//! Prometheus text format: every `/metrics` line, the server's and the
//! backplanes', is written by [`write_metric`].

use std::fmt::Write as _;

/// Appends one metric: its HELP, TYPE and value.
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
