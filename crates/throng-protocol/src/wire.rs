//! [`Wire`]: the encoding a socket speaks, which picks the bytes of a
//! broadcast it is sent. A broadcast is encoded once per wire its topic's
//! subscribers may speak, and every subscriber gets the shared bytes of its
//! own wire.

use crate::message::Vsn;

/// The encoding a socket speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    /// Phoenix Channels with serializer `Vsn` (1.0.0 or 2.0.0).
    Phoenix(Vsn),
    /// The Pusher Channels protocol.
    Pusher,
}

/// The prefix of the engine's topic of a Pusher channel:
/// `pusher/<app id>/<channel>`. Pusher and Phoenix names are separate: a
/// Phoenix client cannot join a topic with this prefix, and a Pusher
/// channel name cannot hold a `/`.
pub const PUSHER_TOPIC_PREFIX: &str = "pusher/";

/// The wires a topic's subscribers speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Phoenix Channels, both serializers.
    Phoenix,
    /// Pusher Channels.
    Pusher,
}

impl Family {
    /// The family of the engine's topic `topic`.
    #[inline]
    pub fn of_topic(topic: &str) -> Family {
        if topic.starts_with(PUSHER_TOPIC_PREFIX) {
            Family::Pusher
        } else {
            Family::Phoenix
        }
    }
}

impl Wire {
    /// How many wires there are: the size of a table indexed by [`Wire::index`].
    pub const COUNT: usize = 3;

    /// Every wire, in [`Wire::index`] order.
    pub const ALL: [Wire; Wire::COUNT] =
        [Wire::Phoenix(Vsn::V1), Wire::Phoenix(Vsn::V2), Wire::Pusher];

    /// Its place in a table of one entry per wire.
    #[inline]
    pub fn index(self) -> usize {
        match self {
            Wire::Phoenix(vsn) => vsn.index(),
            Wire::Pusher => 2,
        }
    }

    /// The Phoenix serializer, for a Phoenix socket.
    #[inline]
    pub fn vsn(self) -> Option<Vsn> {
        match self {
            Wire::Phoenix(vsn) => Some(vsn),
            Wire::Pusher => None,
        }
    }
}

impl From<Vsn> for Wire {
    fn from(vsn: Vsn) -> Wire {
        Wire::Phoenix(vsn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_are_the_table_order() {
        for (i, w) in Wire::ALL.iter().enumerate() {
            assert_eq!(w.index(), i);
        }
        assert_eq!(std::mem::size_of::<Wire>(), 1);
    }
}
