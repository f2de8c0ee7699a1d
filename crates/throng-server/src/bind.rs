//! Binding the listeners, and who may share a port.
//!
//! Each shard has its own listener on the public port (`SO_REUSEPORT`, so
//! the kernel spreads connections over the shards without a lock), and
//! `--workers` runs several processes on that port the same way. But
//! `SO_REUSEPORT` lets *any* process of the same user join the group: a
//! second `throng serve --port 4000` (or a second one on another port
//! with the default API port 4001) would start silently and take half the
//! traffic. So before binding a port this process claims it:
//!
//! 1. a short lock per port number (an abstract Unix socket
//!    `throng-port-PORT`, in the network namespace like the port, gone
//!    with the process) serializes two throngs starting at the same
//!    instant, so neither can pass step 2 before the other has bound;
//! 2. a probe binds the address with `SO_REUSEADDR` (so a previous run's
//!    `TIME_WAIT` sockets do not count) but *without* `SO_REUSEPORT`: the
//!    kernel refuses it with `EADDRINUSE` if any socket holds the port,
//!    listening or bound, whoever owns it. The probe is closed and the
//!    shard listeners bind with `SO_REUSEPORT` while the lock is held.
//!
//! The claim is skipped for port 0 (the kernel picks a free port), for
//! `--reuse-port` (the documented opt-in to share the public port, e.g. to
//! start a replacement before draining the old process), and in a worker
//! of `--workers` (its supervisor claimed the ports and holds them, see
//! [`reserve`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use socket2::{Domain, Protocol, Socket, Type};

use crate::Error;

/// What a listener is for, to name it in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The public port (`--port`, `--bind`).
    Public,
    /// The server API (`--api-bind`).
    Api,
}

/// Whether a port may be held by another process already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// No: fail with [`Error::PortInUse`] if anything holds it.
    Exclusive,
    /// Yes: `--reuse-port`, or a worker whose supervisor claimed the port.
    Shared,
}

/// How long a claim waits for another throng's claim of the same port.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Binds `n` `SO_REUSEPORT` listeners on `addr` (the shards'); the first
/// picks the port when `addr`'s is 0.
pub fn public_listeners(
    addr: SocketAddr,
    n: usize,
    share: Share,
) -> Result<Vec<TcpListener>, Error> {
    let _lock = claim(addr, share, Purpose::Public)?;
    let mut out = Vec::with_capacity(n);
    let mut addr = addr;
    for _ in 0..n {
        let sock = reuse_port_socket(addr, true)
            .and_then(|s| {
                s.set_nonblocking(true)?;
                // Linux copies TCP_NODELAY from the listener to every socket
                // it accepts (the child is a clone of the listening sock):
                // set once here, it saves a setsockopt per connection.
                s.set_nodelay(true)?;
                s.listen(65535)?;
                Ok(s)
            })
            .map_err(|source| bind_error(addr, Purpose::Public, source))?;
        let l = TcpListener::from_std(sock.into());
        addr = l.local_addr()?;
        out.push(l);
    }
    Ok(out)
}

/// Binds the server API's listener (non-blocking). `SO_REUSEPORT` as the
/// public listeners: in a rolling restart of `--workers` a worker's
/// replacement binds its API port while the old process drains.
pub fn api_listener(addr: SocketAddr, share: Share) -> Result<std::net::TcpListener, Error> {
    let _lock = claim(addr, share, Purpose::Api)?;
    let sock = reuse_port_socket(addr, true)
        .and_then(|s| {
            s.listen(1024)?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .map_err(|source| bind_error(addr, Purpose::Api, source))?;
    Ok(sock.into())
}

/// For the supervisor of `--workers`: claims `addr` and holds it with a
/// `SO_REUSEPORT` socket that is bound but never listens (so it takes no
/// connection), picking the port when `addr`'s is 0. Its workers bind the
/// port beside it; anyone else's claim fails while it is open. Without
/// `SO_REUSEADDR`, or a probe passing [`claim`]'s step 2 would not see it.
pub fn reserve(addr: SocketAddr, share: Share, purpose: Purpose) -> Result<Socket, Error> {
    let _lock = claim(addr, share, purpose)?;
    reuse_port_socket(addr, false).map_err(|source| bind_error(addr, purpose, source))
}

/// A TCP socket with `SO_REUSEPORT` (and `SO_REUSEADDR` if `reuse_addr`)
/// bound to `addr`.
fn reuse_port_socket(addr: SocketAddr, reuse_addr: bool) -> std::io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if reuse_addr {
        sock.set_reuse_address(true)?;
    }
    sock.set_reuse_port(true)?;
    sock.bind(&addr.into())?;
    Ok(sock)
}

/// Checks that nothing holds `addr`'s port (see the module docs); returns
/// the lock, to keep until this process has bound the port.
fn claim(addr: SocketAddr, share: Share, purpose: Purpose) -> Result<Option<PortLock>, Error> {
    if addr.port() == 0 || share == Share::Shared {
        return Ok(None);
    }
    let lock = PortLock::acquire(addr.port());
    let probe =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).and_then(|s| {
            s.set_reuse_address(true)?;
            s.bind(&addr.into())
        });
    match probe {
        Ok(()) => Ok(lock),
        Err(source) => Err(bind_error(addr, purpose, source)),
    }
}

/// `Error::PortInUse` with its hint for `EADDRINUSE`, else `Error::Bind`.
fn bind_error(addr: SocketAddr, purpose: Purpose, source: std::io::Error) -> Error {
    if source.kind() != std::io::ErrorKind::AddrInUse {
        return Error::Bind { addr, source };
    }
    let hint = match purpose {
        Purpose::Public => format!(
            "stop it, choose another --port (0 picks a free one), or pass --reuse-port \
             to share port {} with it on purpose",
            addr.port()
        ),
        Purpose::Api => format!(
            "choose another --api-bind (such as 127.0.0.1:{}), or --api-bind none",
            addr.port().wrapping_add(100)
        ),
    };
    Error::PortInUse {
        addr,
        what: match purpose {
            Purpose::Public => "",
            Purpose::Api => " (the server API)",
        },
        hint,
    }
}

/// A lock on a port number among throng processes of this network
/// namespace: an abstract Unix socket, released when dropped or when the
/// process ends, however it ends.
struct PortLock {
    _sock: std::os::unix::net::UnixListener,
}

impl PortLock {
    /// Waits up to [`LOCK_WAIT`] for the lock; `None` if it is still held
    /// then (the probe still guards the port) or the platform has no
    /// abstract sockets.
    fn acquire(port: u16) -> Option<PortLock> {
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("throng-port-{port}");
            let at = std::os::unix::net::SocketAddr::from_abstract_name(name).ok()?;
            let deadline = Instant::now() + LOCK_WAIT;
            loop {
                match std::os::unix::net::UnixListener::bind_addr(&at) {
                    Ok(sock) => return Some(PortLock { _sock: sock }),
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                        if Instant::now() >= deadline {
                            return None;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => return None,
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (port, Instant::now());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn accepted_sockets_inherit_nodelay() {
        let l = public_listeners(loopback(0), 1, Share::Exclusive).unwrap();
        let addr = l[0].local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let mut accepted = None;
        for _ in 0..5000 {
            match l[0].accept() {
                Ok((s, _)) => {
                    accepted = Some(s);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
        let accepted = accepted.expect("the connection within 5 s");
        assert!(accepted.nodelay().unwrap(), "the accept path relies on it");
    }

    #[test]
    fn a_held_port_is_refused_unless_shared() {
        let first = public_listeners(loopback(0), 2, Share::Exclusive).unwrap();
        let addr = first[0].local_addr().unwrap();
        // Both shard listeners share the port within this process.
        assert_eq!(first[1].local_addr().unwrap(), addr);
        let err = public_listeners(addr, 1, Share::Exclusive).unwrap_err();
        assert!(matches!(err, Error::PortInUse { .. }), "{err}");
        assert!(err.to_string().contains("--reuse-port"), "{err}");
        let err = api_listener(addr, Share::Exclusive).unwrap_err();
        assert!(err.to_string().contains("--api-bind"), "{err}");
        // The opt-in shares it.
        assert_eq!(
            public_listeners(addr, 1, Share::Shared).unwrap()[0]
                .local_addr()
                .unwrap(),
            addr
        );
    }

    #[test]
    fn a_reservation_holds_the_port_for_workers_only() {
        let held = reserve(loopback(0), Share::Exclusive, Purpose::Public).unwrap();
        let addr = held.local_addr().unwrap().as_socket().unwrap();
        assert!(public_listeners(addr, 1, Share::Exclusive).is_err());
        // A worker (its supervisor claimed the port) binds beside it.
        assert!(public_listeners(addr, 1, Share::Shared).is_ok());
    }
}
