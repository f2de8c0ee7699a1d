//! The run's timeline and the live dashboard: a [`Sample`] a second (kept in
//! the report's `timeline`) and the [`Live`] snapshot served while the run
//! is on. Apart from the final report's figures because they are read
//! during the run, not after it.

use serde::{Deserialize, Serialize};

use crate::stats::Counters;

/// One timeline sample.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Sample {
    /// Seconds since the arrivals started.
    pub t: f64,
    /// Sessions running (Tsung's "users").
    pub users: u64,
    /// Open WebSockets (Tsung's "connected").
    pub connected: u64,
    pub joined: u64,
    pub conn_per_sec: f64,
    pub msgs_out_per_sec: f64,
    pub msgs_in_per_sec: f64,
    /// Bytes the clients received per second, all messages and presence's.
    pub bytes_in_per_sec: f64,
    pub presence_bytes_in_per_sec: f64,
    pub errors: u64,
    pub server_conns: Option<f64>,
    pub server_rss_mb: Option<f64>,
    pub server_cpu_pct: Option<f64>,
    pub agents_cpu_pct: f64,
    pub agents_rss_mb: f64,
}

/// What the live dashboard shows while a run is on.
#[derive(Clone, Debug, Serialize)]
pub struct Live<'a> {
    /// The phase: `starting`, `floor`, `ramp-up`, `presence`, `hold`.
    pub status: &'a str,
    /// The scenario's name.
    pub scenario: &'a str,
    pub connections: LiveTarget,
    /// All agents' latest counters (`null` until every agent reported).
    pub counters: Option<Counters>,
    pub timeline: &'a [Sample],
}

/// The users a live run is heading for.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LiveTarget {
    pub target: u64,
}
