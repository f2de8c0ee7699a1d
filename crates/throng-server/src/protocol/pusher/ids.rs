//! Pusher socket ids (`pusher:connection_established`'s `socket_id`,
//! `<digits>.<digits>`): what a private channel's signature and a user's
//! sign-in are bound to, and what the HTTP API's `socket_id` names to leave
//! out of a trigger.
//!
//! An id says where its socket is and cannot be guessed:
//! `high = tag * 1000 + shard`, `low = key * 10^10 + secret`, where `tag` is
//! a random number the node draws at start (so ids are unique across nodes
//! and restarts), `key` the socket's connection key on its shard, and
//! `secret` a number below 2^32 drawn for the socket and kept in its
//! connection (4 bytes, `SocketState::tag`): a stolen signature is bound to an id that no later connection
//! on the same key gets again, but with a chance of one in 2^32.

use std::hash::{BuildHasher, Hasher};

use throng_protocol::pusher::socket_id::{SocketId, SocketIdText};

/// Shards an id can name (three decimal digits): more than a node runs.
const MAX_SHARDS: u64 = 1000;
const _: () = assert!(throng_pubsub::MAX_SHARDS as u64 <= MAX_SHARDS);
/// What `low` keeps below the key.
const KEY_SCALE: u64 = 10_000_000_000;

/// The ids of one node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ids {
    tag: u64,
}

impl Ids {
    /// A node's ids, with a fresh random tag.
    pub fn new() -> Ids {
        let mut bytes = [0u8; 4];
        // The OS's randomness; the clock's nanoseconds if it fails (ids
        // then stay unique across restarts, only easier to predict).
        if getrandom::fill(&mut bytes).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            bytes = t.to_le_bytes();
        }
        // At least 10 digits with the shard: never a leading zero.
        Ids {
            tag: 1_000_000 + u64::from(u32::from_le_bytes(bytes)) % 9_000_000,
        }
    }

    /// The id of the socket of connection `key` of `shard`, with `secret`.
    pub fn of(&self, shard: usize, key: usize, secret: u32) -> SocketIdText {
        let high = self.tag * MAX_SHARDS + shard as u64;
        let low = key as u64 * KEY_SCALE + u64::from(secret);
        SocketId::new(high, low).text()
    }

    /// Where the socket of id `id` is, if it is this node's: its shard,
    /// its connection key and its secret.
    pub fn locate(&self, id: &str) -> Option<(usize, usize, u32)> {
        let id = SocketId::parse(id)?;
        let SocketId { high, low } = id;
        if high / MAX_SHARDS != self.tag {
            return None;
        }
        let secret = u32::try_from(low % KEY_SCALE).ok()?;
        Some((
            (high % MAX_SHARDS) as usize,
            (low / KEY_SCALE) as usize,
            secret,
        ))
    }
}

/// The shard any node's socket id names (this node's or not), if it is
/// one this server could have written.
pub(crate) fn shard_named(id: &str) -> Option<usize> {
    SocketId::parse(id).map(|id| (id.high % MAX_SHARDS) as usize)
}

/// Draws a socket's secret: a keyed hash of a counter, so each is
/// unpredictable without a system call per connection.
pub(crate) struct Secrets {
    keyed: std::collections::hash_map::RandomState,
    next: u64,
}

impl Secrets {
    pub fn new() -> Secrets {
        Secrets {
            keyed: std::collections::hash_map::RandomState::new(),
            next: 0,
        }
    }

    /// The next secret, never 0 (0 marks a connection without a Pusher
    /// socket: `SocketState::tag`).
    pub fn draw(&mut self) -> u32 {
        self.next += 1;
        let mut h = self.keyed.build_hasher();
        h.write_u64(self.next);
        (h.finish() as u32).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_says_where_its_socket_is() {
        let ids = Ids::new();
        let text = ids.of(3, 123_456, 4_000_000_000);
        let id = text.as_str();
        assert!(id.bytes().all(|b| b.is_ascii_digit() || b == b'.'), "{id}");
        assert_eq!(ids.locate(id), Some((3, 123_456, 4_000_000_000)));
        assert_eq!(Ids { tag: ids.tag + 1 }.locate(id), None, "another node's");
        assert_eq!(ids.locate("1.2"), None);
        assert_eq!(shard_named(id), Some(3));
        assert_eq!(shard_named("1002.5"), Some(2));
        assert_eq!(shard_named("x"), None);
        let mut s = Secrets::new();
        assert_ne!(s.draw(), s.draw());
    }
}
