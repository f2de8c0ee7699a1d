//! The floor writer process (`throng agent --floor-writer`): the minimal
//! writers that measure the machine's floor (see [`crate::floor`]). It
//! links to the controller as an agent does, accepts the agents' floor
//! sockets on a loopback port, and on the controller's word writes each
//! round's frame to every one of them from as many threads (`thread.rs`)
//! as the server has shards per process.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use socket2::{Domain, Socket, Type};

use crate::error::BenchError;
use crate::wire::{self, Role, ToAgent, ToController};

mod thread;

/// `throng agent --floor-writer`: links to the controller, listens on a
/// loopback port, accepts the agents' floor sockets and writes each round's
/// frame to every one of them when told, until `finish`.
pub fn run_writer(controller: SocketAddr, token: &str) -> Result<(), BenchError> {
    crate::sys::raise_fd_limit();
    let (mut out, mut input) = crate::agent::link(controller, token, Role::FloorWriter)?;
    let order = loop {
        match wire::recv::<ToAgent>(&mut input, wire::MAX_LINE)? {
            Some(ToAgent::FloorWrite(o)) => break o,
            Some(ToAgent::Ping) => {}
            Some(other) => {
                return Err(BenchError::Protocol(format!(
                    "a floor writer expected its orders, got {other:?}"
                )))
            }
            None => return Ok(()),
        }
    };
    let listener = listen()?;
    wire::send(
        &mut out,
        &ToController::Listening {
            addr: listener.local_addr()?,
        },
    )?;
    // From here on the link's writer thread sends (and says `alive` while a
    // round keeps this thread busy: a round at 1,000,000 sockets on a slow
    // machine took minutes). A failed write ends the link: the reader below
    // sees it closed and this loop ends.
    let out = crate::agent::Writer::spawn(out, |why| {
        tracing::warn!("floor writer: link to the controller lost ({why})");
    });
    let reply: Arc<[u8]> = order.frame.heartbeat_reply()?.into();
    let (done_tx, done) = mpsc::channel();
    let threads = (0..order.threads.max(1))
        .map(|_| thread::Handle::spawn(Arc::clone(&reply), done_tx.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let accepted = Arc::new(AtomicU64::new(0));
    {
        let (threads, accepted, expect) = (threads.clone(), Arc::clone(&accepted), order.expect);
        std::thread::spawn(move || {
            let mut n = 0usize;
            while accepted.load(Ordering::Relaxed) < expect {
                let Ok((s, _)) = listener.accept() else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                // Round-robin over the threads, as the server spreads its
                // connections over its shards.
                threads[n % threads.len()].send(thread::Cmd::Adopt(s));
                n += 1;
                accepted.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        match wire::recv::<ToAgent>(&mut input, wire::MAX_LINE) {
            Ok(Some(ToAgent::Ping)) => {}
            Ok(Some(m)) => {
                if tx.send(Some(m)).is_err() {
                    break;
                }
            }
            _ => {
                let _ = tx.send(None);
                break;
            }
        }
    });
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Some(ToAgent::Fire { round, stamp_ns })) => {
                let frame = order.frame.render(round, stamp_ns)?;
                let (write_secs, failed) = thread::round(&threads, &done, &frame);
                out.send(ToController::Fired {
                    round,
                    write_secs,
                    failed,
                });
            }
            Ok(Some(ToAgent::Finish)) | Ok(None) => return out.finish(),
            Ok(Some(other)) => {
                return Err(BenchError::Protocol(format!(
                    "a floor writer got {other:?}"
                )))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return out.finish(),
        }
        out.send(ToController::Accepted {
            sockets: accepted.load(Ordering::Relaxed),
        });
    }
}

/// A loopback listener with the longest backlog the kernel allows
/// (`net.core.somaxconn` caps it), so the agents' connects queue rather
/// than being dropped.
fn listen() -> Result<TcpListener, BenchError> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
    s.listen(65_535)?;
    Ok(s.into())
}
