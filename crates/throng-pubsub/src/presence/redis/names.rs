//! Presence's key and channel names, on one Redis and on a Redis Cluster.
//!
//! On one Redis they are `scripts.rs`'s. On a cluster every key and the
//! channel of a topic carry its hash tag (`P {T}:e:N`, `P {T}:n`, channel
//! `P {T}`), so a topic's script touches one slot; a node's own keys are
//! tagged by its id (`P a:{N}`, `P t:{N}`), so they share a slot too.

use super::PREFIX;
use crate::link::{tagged, topic_after_tag, topic_tag};

/// The names, for one Redis (`cluster: false`) or a cluster.
#[derive(Clone, Copy, Debug)]
pub(super) struct Names {
    pub cluster: bool,
}

impl Names {
    /// Node `n` is alive.
    pub fn alive(&self, n: &str) -> String {
        if self.cluster {
            format!("{PREFIX}a:{{{n}}}")
        } else {
            format!("{PREFIX}a:{n}")
        }
    }

    /// The topics `n` has presences on.
    pub fn topics_of(&self, n: &str) -> String {
        if self.cluster {
            format!("{PREFIX}t:{{{n}}}")
        } else {
            format!("{PREFIX}t:{n}")
        }
    }

    /// `n`'s presences on `topic`.
    pub fn entries(&self, n: &str, topic: &str) -> String {
        if self.cluster {
            format!("{PREFIX}{}:e:{n}", topic_tag(topic))
        } else {
            format!("{PREFIX}e:{n}:{topic}")
        }
    }

    /// The nodes with presences on `topic`.
    pub fn owners_of(&self, topic: &str) -> String {
        if self.cluster {
            format!("{PREFIX}{}:n", topic_tag(topic))
        } else {
            format!("{PREFIX}n:{topic}")
        }
    }

    /// Every node that wrote presence.
    pub fn nodes(&self) -> String {
        format!("{PREFIX}nodes")
    }

    /// The channel of `topic`'s changes.
    pub fn channel(&self, topic: &str) -> String {
        if self.cluster {
            tagged(PREFIX, topic)
        } else {
            format!("{PREFIX}{topic}")
        }
    }

    /// The topic of a channel.
    pub fn topic_of<'a>(&self, channel: &'a str) -> Option<&'a str> {
        let rest = channel.strip_prefix(PREFIX)?;
        if self.cluster {
            topic_after_tag(rest)
        } else {
            Some(rest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::cluster::slot::slot;

    #[test]
    fn a_topics_keys_and_channel_share_a_slot_on_a_cluster() {
        let n = Names { cluster: true };
        for topic in ["rooms:1", "a}b", ""] {
            let s = slot(n.channel(topic).as_bytes());
            assert_eq!(slot(n.entries("00ab", topic).as_bytes()), s);
            assert_eq!(slot(n.owners_of(topic).as_bytes()), s);
            assert_eq!(n.topic_of(&n.channel(topic)), Some(topic));
        }
        assert_eq!(
            slot(n.alive("00ab").as_bytes()),
            slot(n.topics_of("00ab").as_bytes())
        );
        let one = Names { cluster: false };
        assert_eq!(one.entries("00ab", "t"), "throng:p:e:00ab:t");
        assert_eq!(one.topic_of("throng:p:t"), Some("t"));
    }
}
