//! Pusher's error and close codes and what `pusher-js` does on each.
//!
//! The list is Pusher's protocol document (`pusher-websockets-protocol.md`,
//! "Error Codes"); the ranges decide a client's next step. `pusher-js`
//! (src/core/connection/protocol/protocol.ts, `getCloseAction`) maps a
//! close code to an action: 4000 retries over TLS, 4001-4099 stops for
//! good, 4100-4199 retries after 1 s, 4200-4299 retries at once, and any
//! code from 4300 up stops for good too. So a server closes with a 41xx or
//! 42xx code when the client should come back, never with a 43xx one: those
//! are sent in `pusher:error` on a socket that stays open.

/// A code Pusher defines (4000-4301), plus 4300 for bad input that keeps
/// the socket open (Pusher's "any other type of error" range).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// The app only accepts TLS; reconnect with `wss://`.
    SslOnly = 4000,
    /// No app has the key the client connected with.
    AppDoesNotExist = 4001,
    /// The app is disabled.
    AppDisabled = 4003,
    /// The app has as many sockets as it may.
    OverConnectionQuota = 4004,
    /// The URL's path is not `/app/{key}`.
    PathNotFound = 4005,
    /// The `protocol` parameter is not a number.
    InvalidVersionFormat = 4006,
    /// The `protocol` version is not one the server speaks.
    UnsupportedProtocolVersion = 4007,
    /// The URL has no `protocol` parameter.
    NoProtocolVersion = 4008,
    /// The connection is not authorized (a sign-in refused, a user's
    /// sockets terminated).
    Unauthorized = 4009,
    /// The server is over capacity; retry after backing off.
    OverCapacity = 4100,
    /// Reconnect now (the server is restarting or draining).
    Reconnect = 4200,
    /// The client did not answer a ping.
    PongNotReceived = 4201,
    /// The client was idle too long and cannot ping.
    ClosedAfterInactivity = 4202,
    /// Bad input: a malformed or unknown frame, a bad subscription. Sent in
    /// `pusher:error`; the socket stays open.
    BadRequest = 4300,
    /// A client event over the socket's rate limit was dropped.
    ClientEventRateLimited = 4301,
}

/// What `pusher-js` does after the server closes with a code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconnect {
    /// Reconnects at once over TLS (4000).
    WithTls,
    /// Stays disconnected (4001-4099, and 4300 and above).
    Never,
    /// Reconnects after backing off, 1 s in `pusher-js` (4100-4199, and the
    /// WebSocket codes 1002-1004).
    AfterBackoff,
    /// Reconnects at once (4200-4299).
    Immediately,
}

impl ErrorCode {
    /// Every code, in order.
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::SslOnly,
        ErrorCode::AppDoesNotExist,
        ErrorCode::AppDisabled,
        ErrorCode::OverConnectionQuota,
        ErrorCode::PathNotFound,
        ErrorCode::InvalidVersionFormat,
        ErrorCode::UnsupportedProtocolVersion,
        ErrorCode::NoProtocolVersion,
        ErrorCode::Unauthorized,
        ErrorCode::OverCapacity,
        ErrorCode::Reconnect,
        ErrorCode::PongNotReceived,
        ErrorCode::ClosedAfterInactivity,
        ErrorCode::BadRequest,
        ErrorCode::ClientEventRateLimited,
    ];

    /// The number on the wire (the close code, and `code` in `pusher:error`).
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The code for a number, if it is one of these.
    pub fn from_code(code: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.code() == code)
    }

    /// Pusher's description of the code, for `pusher:error` and close frames
    /// when there is nothing more specific to say.
    pub const fn message(self) -> &'static str {
        match self {
            ErrorCode::SslOnly => {
                "Application only accepts SSL connections, reconnect using wss://"
            }
            ErrorCode::AppDoesNotExist => "Application does not exist",
            ErrorCode::AppDisabled => "Application disabled",
            ErrorCode::OverConnectionQuota => "Application is over connection quota",
            ErrorCode::PathNotFound => "Path not found",
            ErrorCode::InvalidVersionFormat => "Invalid version string format",
            ErrorCode::UnsupportedProtocolVersion => "Unsupported protocol version",
            ErrorCode::NoProtocolVersion => "No protocol version supplied",
            ErrorCode::Unauthorized => "Connection is unauthorized",
            ErrorCode::OverCapacity => "Over capacity",
            ErrorCode::Reconnect => "Generic reconnect immediately",
            ErrorCode::PongNotReceived => "Pong reply not received",
            ErrorCode::ClosedAfterInactivity => "Closed after inactivity",
            ErrorCode::BadRequest => "Bad request",
            ErrorCode::ClientEventRateLimited => "Client event rejected due to rate limit",
        }
    }

    /// What `pusher-js` does when the server closes with this code.
    pub const fn reconnect(self) -> Reconnect {
        match reconnect_after_close(self.code()) {
            Some(r) => r,
            None => Reconnect::Never,
        }
    }
}

/// What `pusher-js` does after a close frame with `code`, as its
/// `Protocol.getCloseAction` decides; `None` for the codes it ignores
/// (1000, 1001, 1005-3999), after which it reconnects in 1 s only if the
/// socket had been connected (`ConnectionManager.shouldRetry`).
pub const fn reconnect_after_close(code: u16) -> Option<Reconnect> {
    match code {
        1002..=1004 => Some(Reconnect::AfterBackoff),
        0..=3999 => None,
        4000 => Some(Reconnect::WithTls),
        4001..=4099 => Some(Reconnect::Never),
        4100..=4199 => Some(Reconnect::AfterBackoff),
        4200..=4299 => Some(Reconnect::Immediately),
        _ => Some(Reconnect::Never),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_fall_in_pushers_ranges() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(code.code()), Some(code));
            let expected = match code.code() {
                4000 => Reconnect::WithTls,
                4001..=4099 | 4300.. => Reconnect::Never,
                4100..=4199 => Reconnect::AfterBackoff,
                _ => Reconnect::Immediately,
            };
            assert_eq!(code.reconnect(), expected, "{code:?}");
        }
        assert_eq!(ErrorCode::from_code(4002), None);
        assert_eq!(ErrorCode::AppDoesNotExist.code(), 4001);
        assert_eq!(ErrorCode::ClientEventRateLimited.code(), 4301);
    }

    #[test]
    fn websocket_codes_as_pusher_js_reads_them() {
        assert_eq!(reconnect_after_close(1000), None);
        assert_eq!(reconnect_after_close(1006), None);
        assert_eq!(reconnect_after_close(1009), None);
        assert_eq!(reconnect_after_close(1002), Some(Reconnect::AfterBackoff));
        assert_eq!(reconnect_after_close(4999), Some(Reconnect::Never));
    }
}
