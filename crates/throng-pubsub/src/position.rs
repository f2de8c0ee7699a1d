//! A message's place in its topic's history: an epoch and an offset, and
//! the `ref` that carries them on the wire (`<epoch as 16 hex digits>.<offset>`;
//! why, in the `history` module docs). A plain value, below the broadcast,
//! the backplane and the history stores, which all read or write it.

/// A message's place in its topic's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Which incarnation of the topic's history.
    pub epoch: u64,
    /// 1 for the first message of the epoch, then one more per message.
    pub offset: u64,
}

impl Position {
    /// The ref a message at this position carries.
    pub fn to_ref(self) -> String {
        format!("{:016x}.{}", self.epoch, self.offset)
    }

    /// Reads a ref made by [`Position::to_ref`]; `None` for anything else
    /// (a client's own ref, a forged or truncated one).
    pub fn parse(text: &str) -> Option<Position> {
        let (epoch, offset) = text.split_once('.')?;
        if epoch.len() != 16 || offset.is_empty() || offset.len() > 20 {
            return None;
        }
        // Only the digits `to_ref` writes: lowercase hex, no sign, no
        // leading zero, so that one position has one ref.
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if !epoch.bytes().all(hex) || !offset.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if offset.len() > 1 && offset.starts_with('0') {
            return None;
        }
        Some(Position {
            epoch: u64::from_str_radix(epoch, 16).ok()?,
            offset: offset.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_round_trip_and_never_look_like_phoenix_js_refs() {
        let p = Position {
            epoch: 0xdead_beef_0000_0001,
            offset: 42,
        };
        assert_eq!(p.to_ref(), "deadbeef00000001.42");
        assert_eq!(Position::parse(&p.to_ref()), Some(p));
        for bad in [
            "",
            "1",
            "42",
            ".",
            "deadbeef00000001.",
            "deadbeef00000001.-1",
            "deadbeef00000001.+1",
            "deadbeef0000001.1",
            "xeadbeef00000001.1",
            "deadbeef00000001.1.2",
            // Not what `to_ref` writes, yet once read as a position (the
            // `redis_messages` fuzz target checks a ref reads back as itself).
            "+eadbeef00000001.1",
            "DEADBEEF00000001.1",
            "deadbeef00000001.01",
            "deadbeef00000001.99999999999999999999999",
        ] {
            assert_eq!(Position::parse(bad), None, "{bad:?}");
        }
    }
}
