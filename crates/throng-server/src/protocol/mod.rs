//! The wire protocols the engine serves, one folder each: `phoenix/`
//! (Phoenix Channels, with its long-poll transport) and `pusher/` (Pusher
//! Channels). A protocol is what implements
//! [`Protocol`](crate::engine::Protocol) over the engine; [`Protocols`] is
//! every one of them at once, which the shards are built with: it routes a
//! request to the protocol whose path it is, a socket's messages and end to
//! the protocol its wire is, and the rest to each. A third protocol is a
//! folder here, a member of [`Protocols`], and a variant of its
//! [`Open`] and [`Request`].

pub(crate) mod phoenix;
pub(crate) mod pusher;

use throng_protocol::{Family, Opcode, Wire};
use throng_pubsub::Broadcast;

use crate::config::Config;
use crate::engine::conn::Conn;
use crate::engine::http::{Head, Route, Upgrade};
use crate::engine::outlet::{Closed, SessionWork};
use crate::engine::{Cx, Protocol};
use crate::node::{Node, ShardMsg};
use phoenix::Phoenix;
use pusher::Pusher;

/// Every protocol the server speaks.
pub(crate) struct Protocols {
    pub phoenix: Phoenix,
    pub pusher: Pusher,
}

/// What each protocol keeps on a shard.
pub(crate) struct Shard {
    phoenix: phoenix::State,
    pusher: pusher::State,
}

/// An upgrade, to the protocol whose socket it opens.
pub(crate) enum Open {
    Phoenix(phoenix::upgrade::Open),
    Pusher(pusher::Open),
}

/// A request a protocol answers itself.
pub(crate) enum Request {
    Phoenix(phoenix::longpoll::http::LongPoll),
    Pusher(pusher::Request),
}

/// The view of one protocol's shard state.
fn phx<'a>(cx: &'a mut Cx<'_, Shard>) -> Cx<'a, phoenix::State> {
    Cx {
        node: cx.node,
        conns: &mut *cx.conns,
        me: &mut cx.me.phoenix,
    }
}

fn psh<'a>(cx: &'a mut Cx<'_, Shard>) -> Cx<'a, pusher::State> {
    Cx {
        node: cx.node,
        conns: &mut *cx.conns,
        me: &mut cx.me.pusher,
    }
}

fn wrap<O, R, O2, R2>(
    route: Route<O, R>,
    open: impl FnOnce(O) -> O2,
    request: impl FnOnce(R) -> R2,
) -> Route<O2, R2> {
    match route {
        Route::Upgrade(u) => Route::Upgrade(Box::new(Upgrade {
            response: u.response,
            wire: u.wire,
            deflate: u.deflate,
            open: open(u.open),
        })),
        Route::Request(used, r) => Route::Request(used, Box::new(request(*r))),
        Route::Error(e) => Route::Error(e),
        Route::Incomplete => Route::Incomplete,
    }
}

impl Protocol for Protocols {
    type Shard = Shard;
    type Open = Open;
    type Request = Request;

    fn shard(&self, node: &Node, id: usize) -> Shard {
        Shard {
            phoenix: self.phoenix.shard(node, id),
            pusher: self.pusher.shard(node, id),
        }
    }

    fn route(&self, head: &Head<'_, '_>, config: &Config) -> Option<Route<Open, Request>> {
        if let Some(r) = self.phoenix.route(head, config) {
            return Some(wrap(r, Open::Phoenix, Request::Phoenix));
        }
        let r = self.pusher.route(head, config)?;
        Some(wrap(r, Open::Pusher, Request::Pusher))
    }

    fn upgraded(&self, cx: &mut Cx<'_, Shard>, key: usize, up: Upgrade<Open>) {
        let Upgrade {
            response,
            wire,
            deflate,
            open,
        } = up;
        match open {
            Open::Phoenix(open) => {
                let up = Upgrade {
                    response,
                    wire,
                    deflate,
                    open,
                };
                self.phoenix.upgraded(&mut phx(cx), key, up)
            }
            Open::Pusher(open) => {
                let up = Upgrade {
                    response,
                    wire,
                    deflate,
                    open,
                };
                self.pusher.upgraded(&mut psh(cx), key, up)
            }
        }
    }

    fn request(&self, cx: &mut Cx<'_, Shard>, key: usize, req: Request) {
        match req {
            Request::Phoenix(r) => self.phoenix.request(&mut phx(cx), key, r),
            Request::Pusher(r) => self.pusher.request(&mut psh(cx), key, r),
        }
    }

    fn message(&self, cx: &mut Cx<'_, Shard>, key: usize, wire: Wire, op: Opcode, data: &[u8]) {
        match wire {
            Wire::Pusher => self.pusher.message(&mut psh(cx), key, wire, op, data),
            Wire::Phoenix(_) => self.phoenix.message(&mut phx(cx), key, wire, op, data),
        }
    }

    fn closed(&self, cx: &mut Cx<'_, Shard>, closed: Closed) {
        match closed.socket {
            Some((Wire::Pusher, _)) => self.pusher.closed(&mut psh(cx), closed),
            // A connection that was no socket: a request either may hold.
            None => {
                let (key, code) = (closed.key, closed.code);
                self.phoenix.closed(&mut phx(cx), closed);
                let pusher = Closed {
                    key,
                    socket: None,
                    code,
                };
                self.pusher.closed(&mut psh(cx), pusher);
            }
            Some(_) => self.phoenix.closed(&mut phx(cx), closed),
        }
    }

    fn holds(&self, me: &Shard, key: usize) -> Option<usize> {
        self.phoenix
            .holds(&me.phoenix, key)
            .or_else(|| self.pusher.holds(&me.pusher, key))
    }

    fn answering(&self, me: &Shard, key: usize) -> bool {
        self.phoenix.answering(&me.phoenix, key) || self.pusher.answering(&me.pusher, key)
    }

    fn session(&self, cx: &mut Cx<'_, Shard>, work: SessionWork) {
        self.phoenix.session(&mut phx(cx), work)
    }

    fn inbox(&self, cx: &mut Cx<'_, Shard>, msg: ShardMsg) {
        match msg {
            ShardMsg::Pusher(_) => self.pusher.inbox(&mut psh(cx), msg),
            // A Pusher cache channel's read of its last event.
            ShardMsg::Replay(a) if Family::of_topic(&a.topic) == Family::Pusher => {
                self.pusher.inbox(&mut psh(cx), ShardMsg::Replay(a))
            }
            msg => self.phoenix.inbox(&mut phx(cx), msg),
        }
    }

    fn delivers(&self, conn: &Conn, topic: u32, b: &Broadcast) -> bool {
        match Family::of_topic(&b.topic) {
            Family::Pusher => self.pusher.delivers(conn, topic, b),
            Family::Phoenix => self.phoenix.delivers(conn, topic, b),
        }
    }

    fn turn_end(&self, cx: &mut Cx<'_, Shard>) {
        self.phoenix.turn_end(&mut phx(cx));
    }

    fn sweep(&self, cx: &mut Cx<'_, Shard>) {
        self.phoenix.sweep(&mut phx(cx));
        self.pusher.sweep(&mut psh(cx));
    }

    fn sizes(&self, me: &Shard, sizes: &mut crate::metrics::TableSizes) {
        self.phoenix.sizes(&me.phoenix, sizes);
        self.pusher.sizes(&me.pusher, sizes);
    }

    fn idle_after(&self, wire: Wire) -> Option<u32> {
        match wire {
            Wire::Pusher => self.pusher.idle_after(wire),
            Wire::Phoenix(_) => self.phoenix.idle_after(wire),
        }
    }

    fn idle(&self, cx: &mut Cx<'_, Shard>, key: usize, wire: Wire, quiet: u32) -> bool {
        match wire {
            Wire::Pusher => self.pusher.idle(&mut psh(cx), key, wire, quiet),
            Wire::Phoenix(_) => self.phoenix.idle(&mut phx(cx), key, wire, quiet),
        }
    }

    fn behind(&self, me: &Shard) -> bool {
        self.phoenix.behind(&me.phoenix)
    }
}
