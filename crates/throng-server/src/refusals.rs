//! Refusals an operator should see, each said once where they look (the
//! log), with the fix. Each is counted in `/metrics` already; this logs
//! one line per reason per interval, with how many more were refused in
//! between, so a misconfigured page or topic rule is visible in the log
//! without a flood of refused clients becoming one:
//! - a connect refused for its token, its origin or its protocol version,
//!   or at a cap: at warn, one line per reason per [`EVERY`] (a
//!   misconfiguration until shown otherwise);
//! - a connect the app backend's connect hook refused, and a join refused
//!   (no channel for the topic, a topic rule, the channel, the join hook, a
//!   limit, a history that cannot be read): at info, one line per reason per [`JOIN_EVERY`] (the app's
//!   decisions, which a developer wants to see while building the app).
//!
//! Lock-free and allocation-free unless it logs: a refusal costs two
//! atomic operations, whichever shard it happens on; the line's text is
//! formatted only when it is written, so a client refused 10,000 times a
//! second costs 10,000 pairs of atomics and one line a second.

use std::fmt::{self, Display};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// At most one line per connect reason this often.
pub const EVERY: Duration = Duration::from_secs(10);
/// At most one line per join reason (and connect hook refusal) this often.
pub const JOIN_EVERY: Duration = Duration::from_secs(1);
/// The most of a client's or backend's text (a refusal's reason) a line
/// quotes.
pub const MAX_QUOTED: usize = 200;

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
    /// The app backend's connect hook refused the connect.
    ConnectHook,
    /// A join of a topic no channel serves (or one of the server's own).
    Unmatched,
    /// A join the `[[topics]]` rules (or the token's channels claim) refuse.
    Rule,
    /// A join the topic's channel refused.
    Channel,
    /// A join the app backend's join hook refused, or could not decide.
    JoinHook,
    /// A join past `--max-channels-per-socket`.
    TooManyChannels,
    /// A join past the socket's memory budget (`--max-socket-bytes`).
    SocketBudget,
    /// A join whose presence key is over `--max-presence-bytes`.
    PresenceKey,
    /// A join with `since` whose history (in Redis) could not be read now.
    HistoryUnavailable,
    /// A Pusher socket refused once upgraded: a key no app has, a bad URL,
    /// an app at its `max_connections`.
    Pusher,
}

const REASONS: usize = 15;

impl Reason {
    fn index(self) -> usize {
        self as usize
    }

    /// A join's (or the app's) refusal: info, once a second.
    fn is_app(self) -> bool {
        !matches!(
            self,
            Reason::NoToken
                | Reason::BadToken
                | Reason::Origin
                | Reason::Vsn
                | Reason::Capacity
                | Reason::Pusher
        )
    }

    fn every(self) -> Duration {
        if self.is_app() {
            JOIN_EVERY
        } else {
            EVERY
        }
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
            Reason::ConnectHook => {
                "the app backend's /connect answered so (an {\"error\": ...} or a 401/403): \
                 the client gets a 403 with this reason; sign in on the app's page first"
            }
            Reason::Unmatched => {
                "the built-in chat channel serves rooms:* and a [[topics]] rule's pattern gets \
                 a relay channel: add a [[topics]] rule matching this topic (README: Topic rules)"
            }
            Reason::Rule => "the first [[topics]] rule whose pattern matches a topic decides (README: Topic rules)",
            Reason::Channel => {
                "the channel's own join decided, after the topic rules let it through (the \
                 built-in chat channel takes rooms:lobby only, and every rooms:* topic once \
                 [[topics]] rules decide who joins)"
            }
            Reason::JoinHook => {
                "the app backend's /join decides joins of topics whose [[topics]] rule lists \
                 hooks = [\"join\"]"
            }
            Reason::TooManyChannels => {
                "raise --max-channels-per-socket, or have the client leave channels it no longer uses"
            }
            Reason::SocketBudget => {
                "the socket's joins (topics and join_refs) would pass --max-socket-bytes: raise it, \
                 or use shorter topics"
            }
            Reason::PresenceKey => {
                "raise --max-presence-bytes, or key presence by something shorter (--presence)"
            }
            Reason::HistoryUnavailable => {
                "the topic's history is kept in Redis, which is away or slower than \
                 --redis-timeout-ms (see the Redis errors in this log and throng_redis_connected): \
                 nothing to do, the client joins again by itself and recovers once Redis answers"
            }
            Reason::Pusher => {
                "a Pusher client connects to /app/KEY?protocol=7 with the key of an app given by \
                 --pusher-app or [[pusher.apps]]; an app's max_connections bounds its sockets"
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
    /// Notes a refusal; logs it unless its reason was logged within its
    /// interval. `detail` is formatted only then. True when it logged.
    pub fn note(&self, reason: Reason, what: &str, detail: &dyn Display) -> bool {
        let i = reason.index();
        let every = reason.every().as_millis() as u64;
        let now = self.started.elapsed().as_millis() as u64;
        let next = self.next_ms[i].load(Relaxed);
        if now < next
            || self.next_ms[i]
                .compare_exchange(next, now + every, Relaxed, Relaxed)
                .is_err()
        {
            self.held[i].fetch_add(1, Relaxed);
            return false;
        }
        let more = self.held[i].swap(0, Relaxed);
        let detail = detail.to_string();
        let line = Line {
            what,
            detail: detail.trim_end(),
            hint: reason.hint(),
            more,
            every: reason.every(),
        };
        if reason.is_app() {
            tracing::info!("{line}");
        } else {
            tracing::warn!("{line}");
        }
        true
    }
}

/// A refusal's log line.
struct Line<'a> {
    what: &'a str,
    detail: &'a str,
    hint: &'static str,
    more: u64,
    every: Duration,
}

impl Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.what, self.detail, self.hint)?;
        if self.more > 0 {
            let every = self.every.as_secs();
            write!(
                f,
                " ({} more refused for this since the last such line; one line per {every} s)",
                self.more
            )?;
        }
        Ok(())
    }
}

/// A [`Display`] made of a closure: a line's detail, written only when
/// the line is (so a refusal that is not logged formats nothing).
pub struct Lazy<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result>(pub F);

impl<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result> Display for Lazy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}

/// Text from a client or the app backend, quoted in a line: at most
/// [`MAX_QUOTED`] bytes (cut at a character boundary, with `...`).
pub fn quoted(text: &str) -> Quoted<'_> {
    Quoted(text)
}

/// See [`quoted`].
pub struct Quoted<'a>(&'a str);

impl Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.trim();
        if text.len() <= MAX_QUOTED {
            return f.write_str(text);
        }
        let mut end = MAX_QUOTED;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}...", &text[..end])
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

    #[test]
    fn a_refusal_not_logged_formats_nothing() {
        let log = RefusalLog::default();
        let formatted = std::cell::Cell::new(0);
        let detail = Lazy(|f| {
            formatted.set(formatted.get() + 1);
            f.write_str("topic \"x\"")
        });
        assert!(log.note(Reason::Rule, "join refused", &detail));
        for _ in 0..10_000 {
            assert!(!log.note(Reason::Rule, "join refused", &detail));
        }
        assert_eq!(formatted.get(), 1, "only the logged line is formatted");
        assert_eq!(log.held[Reason::Rule.index()].load(Relaxed), 10_000);
        assert_eq!(Reason::Rule.every(), JOIN_EVERY);
        assert_eq!(Reason::BadToken.every(), EVERY);
    }

    #[test]
    fn the_line_counts_the_rest() {
        let line = Line {
            what: "join refused",
            detail: "topic \"a\"",
            hint: "fix it",
            more: 41,
            every: JOIN_EVERY,
        }
        .to_string();
        assert_eq!(
            line,
            "join refused: topic \"a\"; fix it (41 more refused for this since the last such line; one line per 1 s)"
        );
    }

    #[test]
    fn quotes_are_bounded() {
        let long = "é".repeat(500);
        let q = quoted(&long).to_string();
        assert!(
            q.len() <= MAX_QUOTED + 3 && q.ends_with("..."),
            "{}",
            q.len()
        );
        assert_eq!(quoted(" short ").to_string(), "short");
    }
}
