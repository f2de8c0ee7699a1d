//! The handshake rounds' clients (`throng bench --tls`, and both runs of
//! `--compare-plain`): what a connect costs the server, for a new client
//! and for a returning one. A round is `n` clients each connecting
//! (over TLS with `--tls`), upgrading (with its own token under `--auth
//! jwt`) and joining a topic, `window` at a time, every socket held open
//! until the round is over; the controller reads the server's CPU around
//! it (`controller/handshakes.rs`).
//!
//! Each client keeps its TLS session ticket between rounds
//! (`join::tls::Ticket`): [`Clients::forget`] makes the next round's
//! clients new (full handshakes); a round after one that joined is the
//! same clients returning, each offering the ticket the server sent it.
//!
//! Why tokio tasks on one thread rather than the agents' engine: a round
//! is a few thousand sockets in a closed loop, after the run's load is
//! gone, and needs a ticket per client across rounds, which the engine's
//! million-socket design leaves out on purpose (`engine/tls.rs`).

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::join::tls::{Connector, Ticket, TlsPlan};
use crate::join::{self, Stream};
use crate::jwt::Signer;

/// What one round did.
#[derive(Default)]
pub struct Round {
    /// Clients joined (an `ok` reply), and those that failed.
    pub ok: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    /// TLS handshakes that resumed the client's session.
    pub resumed: u64,
    /// From the first connect to the last join reply.
    pub elapsed: Duration,
    /// The joined sockets, held open until dropped.
    pub sockets: Vec<Stream>,
}

/// The rounds' clients: their TLS (each with its own ticket) and tokens.
pub struct Clients {
    inner: Rc<Inner>,
}

struct Inner {
    connector: Option<Connector>,
    tickets: RefCell<Vec<Arc<Ticket>>>,
    /// `--auth jwt`: the tokens' signer; client `i` is user `first_user + i`.
    signer: Option<RefCell<Signer>>,
    first_user: u64,
}

impl Clients {
    /// `n` clients, over TLS trusting `tls` if given, each with its own
    /// token signed with `jwt_secret` if given (users `first_user..`).
    pub fn new(
        tls: Option<&TlsPlan>,
        jwt_secret: Option<&str>,
        n: usize,
        first_user: u64,
    ) -> io::Result<Clients> {
        Ok(Clients {
            inner: Rc::new(Inner {
                connector: tls.map(Connector::new).transpose()?,
                tickets: RefCell::new((0..n).map(|_| Arc::default()).collect()),
                signer: jwt_secret.map(|s| RefCell::new(Signer::new(s))),
                first_user,
            }),
        })
    }

    /// The next round's clients are new: no ticket to offer.
    pub fn forget(&mut self) {
        for t in self.inner.tickets.borrow_mut().iter_mut() {
            *t = Arc::default();
        }
    }

    /// One round: every client connects from `src` to `target` and joins
    /// `topic`, `window` at a time, each within `timeout`.
    pub fn round(
        &self,
        target: SocketAddr,
        src: IpAddr,
        topic: &str,
        window: usize,
        timeout: Duration,
    ) -> io::Result<Round> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let local = tokio::task::LocalSet::new();
        let n = self.inner.tickets.borrow().len();
        let round = Rc::new(RefCell::new(Round::default()));
        let next = Rc::new(Cell::new(0usize));
        let topic: Rc<str> = topic.into();
        let started = Instant::now();
        local.block_on(&rt, async {
            let mut tasks = Vec::new();
            for _ in 0..window.clamp(1, n.max(1)) {
                let (inner, round, next, topic) = (
                    Rc::clone(&self.inner),
                    Rc::clone(&round),
                    Rc::clone(&next),
                    Rc::clone(&topic),
                );
                tasks.push(tokio::task::spawn_local(async move {
                    loop {
                        let i = next.get();
                        if i >= n {
                            return;
                        }
                        next.set(i + 1);
                        let one = tokio::time::timeout(timeout, inner.one(i, target, src, &topic));
                        let r = one.await;
                        let mut round = round.borrow_mut();
                        match r {
                            Ok(Ok((stream, resumed))) => {
                                round.ok += 1;
                                round.resumed += u64::from(resumed);
                                round.elapsed = started.elapsed();
                                round.sockets.push(stream);
                            }
                            Ok(Err(e)) => round.fail(e.to_string()),
                            Err(_) => round.fail(format!("no join reply within {timeout:?}")),
                        }
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        });
        let round = std::mem::take(&mut *round.borrow_mut());
        Ok(round)
    }
}

impl Round {
    fn fail(&mut self, why: String) {
        self.failed += 1;
        self.first_error.get_or_insert(why);
    }
}

impl Inner {
    /// Client `i`: TCP connect, TLS with its ticket, the upgrade (with its
    /// token), `phx_join` and its `ok` reply; the socket, and whether its
    /// TLS handshake resumed.
    async fn one(
        &self,
        i: usize,
        target: SocketAddr,
        src: IpAddr,
        topic: &str,
    ) -> io::Result<(Stream, bool)> {
        let tcp = join::connect(target, src).await?;
        let ticket = Arc::clone(&self.tickets.borrow()[i]);
        let (mut stream, resumed) = match &self.connector {
            Some(c) => c.connect(tcp, &ticket).await?,
            None => (Stream::Plain(tcp), false),
        };
        let path = match &self.signer {
            Some(s) => {
                let user = (self.first_user + i as u64) as u32;
                s.borrow_mut().path(join::SOCKET_PATH, user).to_string()
            }
            None => join::SOCKET_PATH.to_string(),
        };
        let mut buf = Vec::with_capacity(512);
        join::upgrade_to(&mut stream, target, &path, &mut buf).await?;
        join::phx_join(&mut stream, &mut buf, topic, "1", None).await?;
        Ok((stream, resumed))
    }
}
