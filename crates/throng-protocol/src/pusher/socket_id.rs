//! Socket ids: `<digits>.<digits>`, as Pusher hands them out in
//! `pusher:connection_established` and as every server SDK checks them
//! (`/^\d+\.\d+$/` in Node's lib/pusher.js, `\A\d+\.\d+\Z` in Python's
//! pusher/util.py). A client signs its subscriptions with it and a trigger
//! names one to leave out, so it must be unique across the server's nodes
//! and restarts: the server picks the two numbers (for example a per-process
//! random number and a per-socket counter); this file only writes and reads
//! them, without allocating.

use std::fmt;
use std::io::Write;

/// The longest socket id this server writes: two `u64`s and a dot.
pub const MAX_LEN: usize = 41;

/// A socket id: two numbers, written `high.low`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SocketId {
    /// The number before the dot.
    pub high: u64,
    /// The number after the dot.
    pub low: u64,
}

/// A socket id's text in a stack buffer (what a signature covers).
#[derive(Clone, Copy)]
pub struct SocketIdText {
    buf: [u8; MAX_LEN],
    len: usize,
}

impl SocketId {
    /// The socket id `high.low`.
    pub const fn new(high: u64, low: u64) -> SocketId {
        SocketId { high, low }
    }

    /// The id's text, `high.low`.
    pub fn text(&self) -> SocketIdText {
        let mut buf = [0u8; MAX_LEN];
        let mut rest = &mut buf[..];
        // Two u64s and a dot fit in MAX_LEN bytes.
        let _ = write!(rest, "{}.{}", self.high, self.low);
        let len = MAX_LEN - rest.len();
        SocketIdText { buf, len }
    }

    /// Reads a socket id this server could have written: well formed, and
    /// both numbers fit a `u64`.
    pub fn parse(s: &str) -> Option<SocketId> {
        if !is_well_formed(s) {
            return None;
        }
        let (high, low) = s.split_once('.')?;
        Some(SocketId::new(high.parse().ok()?, low.parse().ok()?))
    }
}

impl fmt::Display for SocketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.high, self.low)
    }
}

impl SocketIdText {
    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and a dot were written.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::ops::Deref for SocketIdText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for SocketIdText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Whether `s` has a socket id's shape, `<digits>.<digits>`, as the SDKs
/// check it (any number of digits).
pub fn is_well_formed(s: &str) -> bool {
    let Some((high, low)) = s.split_once('.') else {
        return false;
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    digits(high) && digits(low)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn writes_and_reads() {
        let id = SocketId::new(1234, 1234);
        assert_eq!(&*id.text(), "1234.1234");
        assert_eq!(id.to_string(), "1234.1234");
        let max = SocketId::new(u64::MAX, u64::MAX);
        assert_eq!(max.text().len(), MAX_LEN);
        assert_eq!(SocketId::parse(&max.text()), Some(max));
        assert_eq!(SocketId::parse("0.0"), Some(SocketId::new(0, 0)));
    }

    #[test]
    fn shape_as_the_sdks_check_it() {
        for ok in ["1.2", "123456789.987654321", "00.1"] {
            assert!(is_well_formed(ok), "{ok}");
        }
        for bad in [
            "", "1", "1.", ".1", "1.2.3", "a.1", "1.-2", " 1.2", "1.2\n", "１.2",
        ] {
            assert!(!is_well_formed(bad), "{bad:?}");
            assert_eq!(SocketId::parse(bad), None);
        }
        // Well formed, but not one this server writes.
        let long = format!("{}.1", "9".repeat(30));
        assert!(is_well_formed(&long));
        assert_eq!(SocketId::parse(&long), None);
    }

    proptest! {
        #[test]
        fn round_trips(high in any::<u64>(), low in any::<u64>()) {
            let id = SocketId::new(high, low);
            prop_assert_eq!(SocketId::parse(&id.text()), Some(id));
            prop_assert_eq!(id.text().to_string(), id.to_string());
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,50}") {
            let _ = SocketId::parse(&s);
        }
    }
}
