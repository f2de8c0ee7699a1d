//! The Phoenix socket as one entity, whatever carries it: an [`Outlet`]
//! names it (a WebSocket connection, or a long-poll session), and
//! [`SocketState`] is what every Phoenix socket holds the same way (its
//! channels, what it connected with, its user, its push budget), kept once
//! in a [`Conn`](super::conn::Conn) or a [`Session`](crate::protocol::phoenix::longpoll::Session)
//! instead of copied field by field. The dispatch on the carrier, which
//! the rest of the shard goes through to reach the socket of an outlet, is
//! [`Conns`](super::Conns)'s, as it owns both carriers: `conns/socket.rs`.
//!
//! An outlet is a registry key (a `u32`, what the topic registry and a
//! broadcast's exclude key hold) with a long-poll session's index above
//! [`SESSION_BIT`]; the bit is read and written only by [`Outlet::of`] and
//! [`Outlet::key`]. Connection keys stay far below it (one per open file).

use throng_protocol::Vsn;

pub(crate) use crate::protocol::phoenix::socket::SocketState;

/// Set in a registry key that names a long-poll session.
const SESSION_BIT: usize = 1 << 31;

/// What carries a Phoenix socket of this shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Outlet {
    /// A WebSocket connection: its key in the shard's connections.
    Ws(usize),
    /// A long-poll session: its index in the shard's sessions.
    LongPoll(usize),
}

impl Outlet {
    /// Sessions a shard may index (their keys must stay below `u32::MAX`).
    pub const MAX_SESSIONS: usize = SESSION_BIT;

    /// The outlet a registry key names.
    #[inline]
    pub fn of(key: usize) -> Outlet {
        if key & SESSION_BIT != 0 {
            Outlet::LongPoll(key & !SESSION_BIT)
        } else {
            Outlet::Ws(key)
        }
    }

    /// Its registry key (what subscriptions, users and hooks hold).
    #[inline]
    pub fn key(self) -> usize {
        match self {
            Outlet::Ws(key) => key,
            Outlet::LongPoll(idx) => SESSION_BIT | idx,
        }
    }
}

/// A Phoenix socket's state, taken out of its connection (or session)
/// when it ends.
pub(crate) struct Ended {
    pub vsn: Vsn,
    pub socket: SocketState,
}

/// What a socket (or long-poll session) keeps of its connect info once
/// `found` is authenticated; returns the user's id. The verified token is
/// not kept (it is the largest thing an idle socket would hold), and the
/// user's id lives in the shard's `Users` table: the connect info stays only
/// when the client sent other params or the token limits its channels.
pub(crate) fn authenticated(
    connect: &mut Option<crate::channel::ConnectInfo>,
    found: crate::auth::User,
) -> String {
    if let Some(c) = connect.as_mut() {
        c.auth_token = None;
        c.params.retain(|(k, _)| k != "token");
    }
    if found.channels.is_some() {
        connect.get_or_insert_with(Default::default).channels = found.channels;
    }
    if let Some(c) = connect.as_mut() {
        if c.params.is_empty() && c.channels.is_none() {
            *connect = None;
        } else {
            c.params.shrink_to_fit();
            c.user_id = Some(found.id.clone());
        }
    }
    found.id
}
