//! Why a connection ends, and what each cause means: the one table
//! ([`CloseReason::row`]) from a reason to the close code and reason text a
//! WebSocket is sent, the counter in `/metrics`, and what happens to the
//! output still queued for it ([`Flush`]). Every way a connection ends
//! enters `transport::Conns::close` with a reason (a long-poll session,
//! `Conns::lp_doom`); a new cause is one variant and one row.
//!
//! A connection's lifecycle (`transport::conn::Kind`): handshake
//! (`Kind::Http`: HTTP requests, pages and long-poll, until an upgrade),
//! open (`Kind::Ws`), closing (`Kind::Closing`: its last bytes flush, then
//! a half-close and at most `CLOSE_LINGER` seconds for the peer's FIN),
//! closed (removed from the shard's slab). A connection that must end while
//! another is being handled is marked `dead` and closed at the end of the
//! event (`Conns::doom`).
//!
//! Apart from `transport` because the Phoenix socket (`crate::protocol::phoenix::socket`)
//! names reasons too (its rate budgets), and it must not depend on the
//! transport that carries it.

use std::sync::atomic::AtomicU64;

use throng_protocol::frame::close_code;

use crate::metrics::ShardStats;
use throng_protocol::Wire;

/// RFC 6455's registry: the server is overloaded, the client may retry.
pub(crate) const TRY_AGAIN_LATER: u16 = 1013;

/// Why a connection (or long-poll session) ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseReason<'a> {
    /// The peer went away: end of stream, or a read or write error.
    Gone,
    /// The peer sent a close frame (with its code, if any): echoed
    /// (RFC 6455 section 5.5.1).
    PeerClosed(Option<u16>),
    /// An HTTP connection's last response is out (an error page, a refused
    /// upgrade, `Connection: close`, a long-poll answer that ends it).
    Finished,
    /// A closing connection's peer did not close within the linger.
    Lingered,
    /// An HTTP connection did not send a whole request head in
    /// `--handshake-timeout` (answered 408 when a head had begun,
    /// `engine/conns/admission.rs`).
    HandshakeTimeout,
    /// An HTTP connection pipelined more than one request behind a
    /// long-poll waiting for its answer.
    Pipelined,
    /// A frame or message that breaks the protocol, with the code and text
    /// that say how (a long-poll session: a POST that is not a message).
    Protocol { code: u16, text: &'a str },
    /// A `join_ref` or `ref` over `--max-ref-bytes` (which of them, in the
    /// text): an error reply would echo it.
    RefTooLong(&'a str),
    /// Past the control budget's strikes with frames (pings, pongs, tiny
    /// fragments; `--control-rate`).
    ControlFrames,
    /// Past the control budget's strikes with messages (heartbeats, joins,
    /// leaves).
    ControlMessages,
    /// Past the push budget's strikes (`--push-rate`).
    RateLimited,
    /// The app disconnected the socket's user (`disconnect` on
    /// `users_socket:<user>`).
    UserDisconnect,
    /// More than `--max-outbound-bytes` waits behind the frame being written.
    SlowReader,
    /// The process's outbound memory is over `--max-outbound-total-bytes`
    /// and this reader is behind.
    OutboundBudget,
    /// Nothing received for `--idle-timeout`.
    Idle,
    /// The graceful drain's turn for this WebSocket.
    Drain,
    /// The drain window ended: what is left that is not a WebSocket. An
    /// idle one is closed at once, not left to the linger: a browser keeps
    /// its keep-alive connection open and never answers the half-close, so
    /// the process's exit waited the linger (2 to 3 s) for it.
    Shutdown,
    /// A long-poll session not polled for 1.5x `--longpoll-window`.
    SessionExpired,
    /// A long-poll session's buffer passed `--max-outbound-bytes`.
    SessionOverflow,
    /// Its protocol refused the socket once upgraded, with the protocol's
    /// code and text (Pusher: an unknown app key, 4001; an app over its
    /// connection quota, 4004: pusher-js reads only a WebSocket's close
    /// code, and retries a refused upgrade every second forever).
    Refused { code: u16, text: &'a str },
}

/// What happens to a connection's queued output when it closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Nothing more is sent: the connection is removed at once.
    Abort,
    /// Everything queued goes out first, then the close frame (a
    /// WebSocket's: the row's code and text, or an empty one when the row
    /// has no code); then a half-close and the linger for the peer's FIN.
    After,
    /// The queue is dropped (but for the rest of a frame partly written,
    /// so the stream stays well framed), then the close frame, the
    /// half-close and the linger: the memory is freed now instead of after
    /// the reader catches up. A connection that is not a WebSocket is
    /// removed at once.
    Drop,
    /// As [`Flush::Drop`] when output is queued; with none, the close frame
    /// is written once (what the kernel takes of it) and the connection
    /// removed at once, without a linger (the idle sweep can end many
    /// sockets at a time). A connection that is not a WebSocket: removed
    /// at once with nothing queued, else as [`Flush::After`].
    Now,
}

/// A counter in `/metrics`: its name and where a shard keeps it.
pub(crate) type Counter = (&'static str, fn(&ShardStats) -> &AtomicU64);

/// A row's code, text, counter and flush rule.
type RowParts<'a> = (Option<u16>, &'a str, Option<Counter>, Flush);

/// What a [`CloseReason`] means.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Row<'a> {
    /// The close frame's code; `None`: no code (an empty close frame
    /// under [`Flush::After`], as the peer's close without one is echoed;
    /// no frame under [`Flush::Abort`]). A connection that is not a
    /// WebSocket never gets a frame.
    pub code: Option<u16>,
    /// The close frame's reason text.
    pub text: &'a str,
    /// Counted once when the connection starts closing for this reason
    /// (besides `throng_closed_total`); `None` for ends the client chose.
    pub counter: Option<Counter>,
    pub flush: Flush,
}

impl<'a> CloseReason<'a> {
    /// The close code a `disconnect` lifecycle event reports: the close
    /// frame's; 1005 (no status) for a peer's close without a code; 1000
    /// for an end with nothing wrong; 1006 (abnormal: no close frame) for
    /// a lost or cut connection, or a long-poll session that expired.
    pub(crate) fn event_code(self) -> u16 {
        match (self, self.row().code) {
            (_, Some(code)) => code,
            (CloseReason::PeerClosed(None), None) => 1005,
            (CloseReason::Finished | CloseReason::Shutdown, None) => close_code::NORMAL,
            _ => 1006,
        }
    }

    /// The table: reason -> close code, reason text, counter, flush rule.
    pub(crate) fn row(self) -> Row<'a> {
        let (code, text, counter, flush) = match self.limit_row() {
            Some(parts) => parts,
            None => self.end_row(),
        };
        Row {
            code,
            text,
            counter,
            flush,
        }
    }

    /// The rows of the closes a limit or the server decides (control
    /// budgets, rate, slow readers, memory, idle, drain, the server API's
    /// disconnect); `None` for the others ([`CloseReason::end_row`]).
    fn limit_row(self) -> Option<RowParts<'a>> {
        use CloseReason as R;
        use Flush::*;
        Some(match self {
            R::ControlFrames => (
                Some(close_code::POLICY_VIOLATION),
                "too many control frames",
                Some(("throng_control_limit_closes_total", |s| {
                    &s.control_limit_closes
                })),
                After,
            ),
            R::ControlMessages => (
                Some(close_code::POLICY_VIOLATION),
                "too many control messages",
                Some(("throng_control_limit_closes_total", |s| {
                    &s.control_limit_closes
                })),
                After,
            ),
            R::RateLimited => (
                Some(close_code::POLICY_VIOLATION),
                "rate limited",
                Some(("throng_rate_limit_closes_total", |s| &s.rate_limit_closes)),
                After,
            ),
            R::UserDisconnect => (
                Some(close_code::GOING_AWAY),
                "disconnect",
                Some(("throng_user_disconnects_total", |s| &s.user_disconnects)),
                After,
            ),
            R::SlowReader => (
                Some(close_code::POLICY_VIOLATION),
                "slow reader",
                Some(("throng_slow_reader_closes_total", |s| &s.slow_reader_closes)),
                Drop,
            ),
            R::OutboundBudget => (
                Some(TRY_AGAIN_LATER),
                "server outbound memory full",
                Some(("throng_outbound_budget_closes_total", |s| {
                    &s.outbound_budget_closes
                })),
                Drop,
            ),
            R::Idle => (
                Some(close_code::GOING_AWAY),
                "idle timeout",
                Some(("throng_idle_timeout_closes_total", |s| {
                    &s.idle_timeout_closes
                })),
                Now,
            ),
            R::Drain => (
                Some(close_code::SERVICE_RESTART),
                "server restart",
                Some(("throng_drain_closes_total", |s| &s.drain_closes)),
                After,
            ),
            _ => return None,
        })
    }

    /// The rows of the closes the peer, the protocol or the connection's
    /// own end decide.
    fn end_row(self) -> RowParts<'a> {
        use CloseReason as R;
        use Flush::*;
        match self {
            R::Gone => (None, "", None, Abort),
            R::PeerClosed(code) => (code, "", None, After),
            R::Finished => (None, "", None, After),
            R::Lingered => (None, "", None, Abort),
            R::HandshakeTimeout => (
                None,
                "",
                Some(("throng_handshake_timeouts_total", |s| &s.handshake_timeouts)),
                Abort,
            ),
            R::Pipelined => (None, "", None, Abort),
            R::Protocol { code, text } => (
                Some(code),
                text,
                Some(("throng_protocol_errors_total", |s| &s.protocol_errors)),
                After,
            ),
            R::RefTooLong(text) => (
                Some(close_code::POLICY_VIOLATION),
                text,
                Some(("throng_ref_too_long_closes_total", |s| &s.ref_refusals)),
                After,
            ),
            R::Shutdown => (None, "", None, Now),
            R::SessionExpired => (
                None,
                "",
                Some(("throng_longpoll_expired_total", |s| &s.longpoll_expired)),
                Abort,
            ),
            R::SessionOverflow => (
                None,
                "",
                Some(("throng_longpoll_overflows_total", |s| &s.longpoll_overflows)),
                Abort,
            ),
            R::Refused { code, text } => (
                Some(code),
                text,
                Some(("throng_protocol_refusals_total", |s| &s.protocol_refusals)),
                After,
            ),
            _ => unreachable!("a limit's close has its row in limit_row"),
        }
    }

    /// The table's row for a socket speaking `wire`: a Pusher client gets
    /// Pusher's codes where they differ (pusher-js acts on the code:
    /// 4200 reconnect at once after a restart, 4201 a pong not received,
    /// 4009 terminated by the app; Pusher's protocol page).
    pub(crate) fn row_for(self, wire: Option<Wire>) -> Row<'a> {
        let mut row = self.row();
        if wire == Some(Wire::Pusher) {
            let pusher = match self {
                CloseReason::Drain => Some((4200, "server restarting: reconnect")),
                CloseReason::Idle => Some((4201, "Pong reply not received")),
                CloseReason::UserDisconnect => Some((4009, "connection terminated by the app")),
                _ => None,
            };
            if let Some((code, text)) = pusher {
                row.code = Some(code);
                row.text = text;
            }
        }
        row
    }

    /// Adds one to this reason's counter, if it has one.
    pub(crate) fn count(self, stats: &ShardStats) {
        if let Some((_, counter)) = self.row().counter {
            ShardStats::add(counter(stats), 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    /// Every reason, once (those with data, with an example).
    const ALL: &[CloseReason<'static>] = &[
        CloseReason::Gone,
        CloseReason::PeerClosed(Some(1000)),
        CloseReason::Finished,
        CloseReason::Lingered,
        CloseReason::HandshakeTimeout,
        CloseReason::Pipelined,
        CloseReason::Protocol {
            code: close_code::TOO_BIG,
            text: "message too big",
        },
        CloseReason::RefTooLong("ref too long"),
        CloseReason::ControlFrames,
        CloseReason::ControlMessages,
        CloseReason::RateLimited,
        CloseReason::UserDisconnect,
        CloseReason::SlowReader,
        CloseReason::OutboundBudget,
        CloseReason::Idle,
        CloseReason::Drain,
        CloseReason::Shutdown,
        CloseReason::SessionExpired,
        CloseReason::SessionOverflow,
        CloseReason::Refused {
            code: 4001,
            text: "no such app",
        },
    ];

    /// Keeps `ALL` complete: a new variant fails to compile here until it
    /// is listed.
    #[test]
    fn all_lists_every_reason() {
        for r in ALL {
            match r {
                CloseReason::Gone
                | CloseReason::PeerClosed(_)
                | CloseReason::Finished
                | CloseReason::Lingered
                | CloseReason::HandshakeTimeout
                | CloseReason::Pipelined
                | CloseReason::Protocol { .. }
                | CloseReason::RefTooLong(_)
                | CloseReason::ControlFrames
                | CloseReason::ControlMessages
                | CloseReason::RateLimited
                | CloseReason::UserDisconnect
                | CloseReason::SlowReader
                | CloseReason::OutboundBudget
                | CloseReason::Idle
                | CloseReason::Drain
                | CloseReason::Shutdown
                | CloseReason::SessionExpired
                | CloseReason::SessionOverflow
                | CloseReason::Refused { .. } => {}
            }
        }
        assert_eq!(ALL.len(), 20);
    }

    /// Every close the server decides is counted, every close frame has a
    /// code a client may receive and says why, and every flush rule is one
    /// of the documented ones.
    #[test]
    fn every_reason_has_a_code_a_counter_and_a_flush_rule() {
        let stats = ShardStats::default();
        let client_chose = |r: &CloseReason| {
            matches!(
                r,
                CloseReason::Gone
                    | CloseReason::PeerClosed(_)
                    | CloseReason::Finished
                    | CloseReason::Lingered
                    | CloseReason::Pipelined
                    | CloseReason::Shutdown
            )
        };
        for r in ALL {
            let row = r.row();
            if let Some(code) = row.code {
                // RFC 6455 7.4: 1005, 1006 and 1015 are never sent.
                assert!((1000..=4999).contains(&code), "{r:?}: code {code}");
                assert!(![1004, 1005, 1006, 1015].contains(&code), "{r:?}");
                if !matches!(r, CloseReason::PeerClosed(_)) {
                    assert!(!row.text.is_empty(), "{r:?}: a close frame says why");
                    // A close frame's reason fits its 123 bytes.
                    assert!(row.text.len() <= 123, "{r:?}");
                }
            } else {
                assert!(row.text.is_empty(), "{r:?}: text without a frame");
            }
            match row.counter {
                Some((name, counter)) => {
                    assert!(
                        name.starts_with("throng_") && name.ends_with("_total"),
                        "{r:?}"
                    );
                    // The one `/metrics` shows under that name.
                    let shown = crate::metrics::SHARD_METRICS
                        .iter()
                        .find(|m| m.0 == name)
                        .unwrap_or_else(|| panic!("{r:?}: {name} is not in /metrics"));
                    assert!(std::ptr::eq((shown.3)(&stats), counter(&stats)), "{r:?}");
                    let before = counter(&stats).load(Relaxed);
                    r.count(&stats);
                    assert_eq!(counter(&stats).load(Relaxed), before + 1, "{r:?}");
                    assert!(!client_chose(r), "{r:?} counted though the client chose it");
                }
                None => assert!(client_chose(r), "{r:?}: the server's close is counted"),
            }
            // A frame that drops the queue only for a server-side cause;
            // the peer's own close and the drain send what was queued.
            // (Shutdown is never a WebSocket's, and an HTTP connection's
            // queue goes out under Now.)
            match row.flush {
                Flush::Drop | Flush::Now if *r != CloseReason::Shutdown => {
                    assert!(row.code.is_some(), "{r:?}")
                }
                _ => {}
            }
        }
    }

    /// The codes the tests and clients rely on.
    #[test]
    fn codes() {
        let code = |r: CloseReason| r.row().code;
        assert_eq!(code(CloseReason::SlowReader), Some(1008));
        assert_eq!(code(CloseReason::OutboundBudget), Some(1013));
        assert_eq!(code(CloseReason::Idle), Some(1001));
        assert_eq!(code(CloseReason::Drain), Some(1012));
        assert_eq!(code(CloseReason::UserDisconnect), Some(1001));
        assert_eq!(code(CloseReason::RateLimited), Some(1008));
        assert_eq!(code(CloseReason::Gone), None);
    }
}
