//! A refused join, the one way each refusal goes: counted in `/metrics`,
//! logged at info with the topic, what refused it and the fix (one line per
//! reason a second, `crate::refusals`: the text is formatted only for the
//! line written, so a client refused 10,000 times a second costs no
//! allocation beyond it), and answered with the error reply.

use throng_protocol::{Payload, Ref};

use super::{Mux, Transport};
use crate::channel::topic_matches;
use crate::hooks::Failure;
use crate::metrics::ShardStats;
use crate::refusals::{quoted, Lazy, Reason};

/// Why a join was refused.
#[derive(Clone, Copy)]
pub(super) enum Refused<'r> {
    /// No channel serves the topic, or it is one of the server's own.
    Unmatched { reserved: bool },
    /// The `[[topics]]` rules or the token's `channels` claim.
    Rule,
    /// The topic's channel answered the join with an error.
    Channel,
    /// The app backend's join hook answered `{"error": ...}` (this).
    Hook(&'r str),
    /// The app backend could not decide.
    HookFailed(Failure),
    /// `--max-channels-per-socket`.
    TooMany,
    /// The socket's memory budget.
    Budget,
    /// A presence key this long, over `--max-presence-bytes`.
    PresenceKey(usize),
    /// A join with `since` whose history read found Redis away.
    HistoryUnavailable,
}

impl Refused<'_> {
    fn reason(self) -> Reason {
        match self {
            Refused::Unmatched { .. } => Reason::Unmatched,
            Refused::Rule => Reason::Rule,
            Refused::Channel => Reason::Channel,
            Refused::Hook(_) | Refused::HookFailed(_) => Reason::JoinHook,
            Refused::TooMany => Reason::TooManyChannels,
            Refused::Budget => Reason::SocketBudget,
            Refused::PresenceKey(_) => Reason::PresenceKey,
            Refused::HistoryUnavailable => Reason::HistoryUnavailable,
        }
    }

    /// Its counters besides `throng_refused_joins_total`.
    fn count(self, stats: &ShardStats) {
        ShardStats::add(&stats.refused_joins, 1);
        let also = match self {
            Refused::Rule => &stats.policy_refusals,
            Refused::TooMany => &stats.channel_limit_refusals,
            Refused::Budget => &stats.socket_budget_refusals,
            Refused::PresenceKey(_) => &stats.presence_refused,
            Refused::HistoryUnavailable => &stats.history_unavailable,
            _ => return,
        };
        ShardStats::add(also, 1);
    }
}

impl<T: Transport> Mux<'_, T> {
    /// Refuses the join of `topic` for `why`, with the error reply `reply`.
    pub(super) fn refuse_join(
        &mut self,
        why: Refused<'_>,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        reply: Payload<'_>,
    ) {
        why.count(self.t.stats());
        if let Some(log) = self.t.refusals() {
            let detail = Lazy(|f| self.explain(f, why, topic, reply));
            log.note(why.reason(), "join refused", &detail);
        }
        self.reply(join_ref, msg_ref, topic, Err(reply));
    }

    /// The log line's detail: the topic, what refused it, the reply.
    fn explain(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        why: Refused<'_>,
        topic: &str,
        reply: Payload<'_>,
    ) -> std::fmt::Result {
        write!(f, "topic {:?}", quoted(topic).to_string())?;
        if let Some(user) = self.cx.who.user {
            write!(f, " (user {:?})", quoted(user).to_string())?;
        }
        let limit =
            |f: &mut std::fmt::Formatter<'_>, what: &str, n: usize| write!(f, ": {what} ({n})");
        match why {
            Refused::Unmatched { reserved: true } => {
                f.write_str(": users_socket:* and throng:* topics are the server's own")
            }
            Refused::Unmatched { reserved: false } => {
                let patterns: Vec<&str> = self.cx.router.patterns().collect();
                write!(f, ": no channel serves it (channels serve {patterns:?})")
            }
            Refused::Rule => {
                let refusal = self.cx.policy.join_refusal(topic, self.cx.who);
                write!(f, ": {refusal}")
            }
            Refused::Channel => {
                let pattern = self.cx.router.patterns().find(|p| topic_matches(p, topic));
                write!(
                    f,
                    ": the channel serving {:?} refused it",
                    pattern.unwrap_or("?")
                )
            }
            Refused::Hook(error) => write!(
                f,
                ": the app backend's join hook answered {{\"error\": {}}}",
                quoted(error)
            ),
            Refused::HookFailed(failure) => write!(
                f,
                ": the app backend could not decide ({}; see its warnings above and \
                 throng_hook_errors_total)",
                failure.reply()
            ),
            Refused::TooMany => limit(
                f,
                "the socket holds the most channels --max-channels-per-socket allows",
                self.cx.max_channels,
            ),
            Refused::Budget => limit(
                f,
                "its topic and join_ref would pass the socket's budget of bytes for joins",
                self.cx.max_join_bytes,
            ),
            Refused::PresenceKey(n) => write!(
                f,
                ": its presence key is {n} bytes, over --max-presence-bytes ({})",
                self.cx.max_presence_bytes
            ),
            Refused::HistoryUnavailable => {
                f.write_str(": it asked for the messages after `since`, and Redis could not answer")
            }
        }?;
        match reply {
            Payload::Json(json) => write!(f, "; the client got {}", quoted(json)),
            Payload::Binary(_) => Ok(()),
        }
    }
}
