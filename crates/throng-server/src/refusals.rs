//! Refusals an operator should see: a connect refused for its token, its
//! origin or its protocol version, a connection refused at a cap. Each is
//! counted in `/metrics` already; this logs one line per reason at the
//! default level (warn), at most once per [`EVERY`] per reason, with how
//! many more were refused in between, so a misconfigured page is visible
//! in the log without a flood of refused clients becoming one.
//!
//! Lock-free: a refusal costs two atomic operations, whichever shard it
//! happens on.

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// At most one line per reason this often.
pub const EVERY: Duration = Duration::from_secs(10);

/// Why a client was refused, as the log groups it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A connect without a token, when auth is on.
    NoToken,
    /// A token that does not verify: signature, expiry, revocation.
    BadToken,
    /// A browser page of an origin `--check-origin` does not allow.
    Origin,
    /// A `vsn` this server does not speak.
    Vsn,
    /// `--max-connections` or `--max-connections-per-ip` reached.
    Capacity,
}

const REASONS: usize = 5;

impl Reason {
    fn index(self) -> usize {
        self as usize
    }

    /// What to do about it, for someone who has never seen the code.
    fn hint(self) -> &'static str {
        match self {
            Reason::NoToken => {
                "the chat page sends one only when opened as /?token=TOKEN; \
                 `throng token --config FILE` mints one for testing"
            }
            Reason::BadToken => {
                "check that the app signs tokens with the secret or key this server has \
                 ([auth] in the config); `throng token` mints a valid one for testing"
            }
            Reason::Origin => {
                "the page's origin is not allowed: add it to --check-origin (or [check_origin])"
            }
            Reason::Vsn => "the client asked for a protocol version other than 1.x or 2.x",
            Reason::Capacity => {
                "raise --max-connections / --max-connections-per-ip, or add capacity"
            }
        }
    }
}

/// One node's refusal log.
pub struct RefusalLog {
    started: Instant,
    /// Per reason: when the next line may be logged (ms since `started`).
    next_ms: [AtomicU64; REASONS],
    /// Per reason: refusals since the last line.
    held: [AtomicU64; REASONS],
}

impl Default for RefusalLog {
    fn default() -> Self {
        RefusalLog {
            started: Instant::now(),
            next_ms: Default::default(),
            held: Default::default(),
        }
    }
}

impl RefusalLog {
    /// Notes a refusal; logs it unless its reason was logged within
    /// [`EVERY`]. True when it logged (for tests).
    pub fn note(&self, reason: Reason, what: &str, detail: &dyn Display) -> bool {
        let i = reason.index();
        let now = self.started.elapsed().as_millis() as u64;
        let next = self.next_ms[i].load(Relaxed);
        if now < next
            || self.next_ms[i]
                .compare_exchange(next, now + EVERY.as_millis() as u64, Relaxed, Relaxed)
                .is_err()
        {
            self.held[i].fetch_add(1, Relaxed);
            return false;
        }
        let more = self.held[i].swap(0, Relaxed);
        let detail = detail.to_string();
        let detail = detail.trim_end();
        if more > 0 {
            tracing::warn!(
                "{what}: {detail}; {} ({more} more refused for this since the last such line; \
                 one line per {} s)",
                reason.hint(),
                EVERY.as_secs()
            );
        } else {
            tracing::warn!("{what}: {detail}; {}", reason.hint());
        }
        true
    }
}

impl From<&crate::auth::Refusal> for Reason {
    fn from(r: &crate::auth::Refusal) -> Reason {
        match r {
            crate::auth::Refusal::Missing => Reason::NoToken,
            _ => Reason::BadToken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_reason_per_interval() {
        let log = RefusalLog::default();
        assert!(log.note(Reason::NoToken, "connect refused (403)", &"no token"));
        assert!(!log.note(Reason::NoToken, "connect refused (403)", &"no token"));
        assert!(log.note(Reason::Origin, "connect refused (403)", &"origin x"));
        assert_eq!(log.held[Reason::NoToken.index()].load(Relaxed), 1);
    }
}
