//! The hooks scenario (`throng bench --hooks`): what the app backend's join
//! hook costs, measured against joins without hooks in the same run.
//!
//! The bench starts a built-in backend ([`responder`]: fast, fixed answers
//! with 50 bytes of assigns, so the backend is not the bottleneck) and
//! `throng serve` with `--hook-url` pointing at it and two topic rules:
//! `plain:*` without hooks and `hooked:*` with `hooks = ["join"]`. Rounds
//! of two phases follow, alternating which goes first: N sockets connect
//! and join `plain:lobby` ([`joiner`], a closed loop), are closed, then N
//! connect and join `hooked:lobby`. Both phases of a round share the
//! machine's noise, so their ratio means more than either rate. Memory per
//! idle joined socket is measured on fresh servers, with and without the
//! hook, as the growth of the server's RSS over the sockets. The run itself
//! is `controller::hooks`; [`report`] holds its figures.

pub mod joiner;
pub mod report;
pub mod responder;

pub use report::HooksReport;
pub use responder::{Responder, ASSIGNS};
