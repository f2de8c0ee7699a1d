//! The Phoenix socket of an [`Outlet`], whatever carries it: the dispatch
//! on the carrier (a connection in the slab, or a long-poll session) that
//! the rest of the shard goes through to reach a socket's state
//! ([`Conns::socket_mut`]) or its serializer ([`Conns::vsn_of`]). The
//! outlet and the state themselves are `transport/outlet.rs`'s.

use throng_protocol::Vsn;

use super::Conns;
use crate::engine::conn::Kind;
use crate::engine::outlet::{Outlet, SocketState};

/// The socket of an outlet, lent by [`Conns::socket_mut`].
pub(crate) struct SocketMut<'a> {
    pub state: &'a mut SocketState,
    /// The control budget (`--control-rate`), kept beside the state by
    /// each carrier (in a `Conn`, in the room its alignment left).
    pub control_tat: &'a mut u32,
}

impl Conns {
    /// The Phoenix socket state of `outlet`, whatever its stage.
    pub(crate) fn socket_mut(&mut self, outlet: Outlet) -> Option<SocketMut<'_>> {
        match outlet {
            Outlet::Ws(key) => {
                let conn = self.slab.get_mut(key)?;
                Some(SocketMut {
                    state: &mut conn.socket,
                    control_tat: &mut conn.control_tat,
                })
            }
            Outlet::LongPoll(idx) => {
                let s = self.lp.sessions.get_mut(idx)?;
                Some(SocketMut {
                    state: &mut s.socket,
                    control_tat: &mut s.control_tat,
                })
            }
        }
    }

    /// The serializer of `outlet` while its socket is live (a connection
    /// upgraded and not closing, a session not ending).
    pub(crate) fn vsn_of(&self, outlet: Outlet) -> Option<Vsn> {
        match outlet {
            Outlet::Ws(key) => match self.slab.get(key).filter(|c| !c.dead)?.kind {
                Kind::Ws { vsn, .. } => Some(vsn),
                _ => None,
            },
            Outlet::LongPoll(idx) => {
                let s = self.lp.sessions.get(idx)?;
                (!s.dead).then_some(s.vsn)
            }
        }
    }
}
