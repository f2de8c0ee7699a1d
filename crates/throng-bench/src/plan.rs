//! An agent's orders: which share of which scenario it runs, against what.
//!
//! The controller writes one per agent and sends it over the wire; the
//! agent hands it, capped by its own open-files limit, to its engine.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

pub use crate::join::tls::TlsPlan;
use crate::scenario::Scenario;

/// What one agent runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    /// This agent's index among `agents`: it starts global users
    /// `index, index + agents, ...` (see [`crate::engine`]).
    pub index: u32,
    pub agents: u32,
    pub scenario: Scenario,
    /// The server's address.
    pub target: SocketAddr,
    /// The Host header of the upgrade requests.
    pub host: String,
    /// Bind each socket to one of this agent's loopback source addresses
    /// (127.0.0.2, ...), so no one address runs out of ports.
    pub bind_sources: bool,
    /// Most connections this agent may hold (an open-files limit less a margin).
    pub capacity: u64,
    /// The controller sets the arrival rate as the run goes (the
    /// scenario's one phase gives the first rate and the users).
    #[serde(default)]
    pub adaptive: bool,
    /// `--tls`: connect with TLS, trusting this CA.
    #[serde(default)]
    pub tls: Option<TlsPlan>,
    /// `--auth jwt`: the server's HS256 secret; each user connects with
    /// its own token signed with it ([`crate::jwt`]).
    #[serde(default)]
    pub auth_jwt_secret: Option<String>,
}
