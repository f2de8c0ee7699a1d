//! Which of Redis Cluster's 16,384 hash slots a key or a sharded channel
//! lives in, and the hash tag that puts every key and channel of one topic
//! in the same slot.
//!
//! The slot is CRC16 (XMODEM) of the key, or of its hash tag (the text
//! between the first `{` and the next `}`, when not empty), modulo 16,384:
//! the Redis Cluster specification's `HASH_SLOT`. Hand-written (twelve
//! lines) because the redis crate keeps its own copy private.

use std::borrow::Cow;
use std::hash::Hasher;

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= (*b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key` (a key or a sharded pub/sub channel).
pub fn slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|b| *b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|b| *b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % SLOTS
}

/// The hash tag of `topic`, with its braces: what every key and channel of
/// the topic carries so that they share one slot (and a Lua script touching
/// them stays on one shard).
///
/// A topic made of anything but braces, not empty and not starting with
/// `#`, is its own tag: `{rooms:lobby}`. Any other topic (one with a brace
/// would cut the tag short, an empty one would make no tag at all) gets
/// `{#` and 16 hex digits of a fixed hash of it, then `}`: still one slot
/// per topic, and [`topic_after_tag`] tells the two forms apart.
///
/// Topic history's keys and channels use this same tag, so its script can
/// SPUBLISH the topic's channel from the slot of its keys.
pub fn topic_tag(topic: &str) -> Cow<'static, str> {
    let plain = !topic.is_empty() && !topic.starts_with('#') && !topic.contains(['{', '}']);
    if plain {
        let mut t = String::with_capacity(topic.len() + 2);
        t.push('{');
        t.push_str(topic);
        t.push('}');
        Cow::Owned(t)
    } else {
        Cow::Owned(format!("{{#{:016x}}}", fixed_hash(topic.as_bytes())))
    }
}

/// `tag + topic` reversed: the topic in a name that ends with the topic's
/// tagged form (`{topic}`, or `{#hash}topic`), or `None`.
pub fn topic_after_tag(tagged: &str) -> Option<&str> {
    if let Some(rest) = tagged.strip_prefix("{#") {
        // `{#` + 16 hex digits + `}`, then the topic itself.
        let topic = rest.get(17..)?;
        (rest.as_bytes().get(16) == Some(&b'}')).then_some(topic)
    } else {
        tagged.strip_prefix('{')?.strip_suffix('}')
    }
}

/// A channel or key: `prefix`, the topic's tag, and, for a topic whose tag
/// is a hash, the topic after it (so the topic can be read back).
pub fn tagged(prefix: &str, topic: &str) -> String {
    let tag = topic_tag(topic);
    let mut s = String::with_capacity(prefix.len() + tag.len() + topic.len());
    s.push_str(prefix);
    s.push_str(&tag);
    if tag.starts_with("{#") {
        s.push_str(topic);
    }
    s
}

/// FNV-1a, 64 bits: the same on every node and every version (std's
/// hashers are seeded per process).
fn fixed_hash(bytes: &[u8]) -> u64 {
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 ^= *b as u64;
                self.0 = self.0.wrapping_mul(0x100000001b3);
            }
        }
    }
    let mut h = Fnv(0xcbf29ce484222325);
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_redis_cluster_specification() {
        // The specification's test vector, and slots redis-cli reports.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn a_topics_names_share_its_slot_and_give_it_back() {
        for topic in ["rooms:lobby", "", "#x", "a}b", "}", "{x}", "ü:1"] {
            let a = tagged("throng:t:", topic);
            let b = tagged("throng:p:", topic);
            let key = format!("throng:p:{}:e:00ff", topic_tag(topic));
            assert_eq!(slot(a.as_bytes()), slot(b.as_bytes()), "{topic:?}");
            assert_eq!(slot(a.as_bytes()), slot(key.as_bytes()), "{topic:?}");
            assert_eq!(topic_after_tag(&a["throng:t:".len()..]), Some(topic));
        }
        assert_eq!(tagged("throng:t:", "rooms:1"), "throng:t:{rooms:1}");
    }
}
