//! Sockets: opening a non-blocking TCP connect from one of the agent's
//! loopback source addresses, and what a failed one is called.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

use crate::sys;

/// Why a connection failed, as finely as the report tells errors apart
/// (see [`crate::stats::ErrorDetail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ErrKind {
    Refused,
    /// No SYN-ACK within the connect timeout (or the kernel's ETIMEDOUT).
    TimeoutTcp,
    /// Connected, but no 101 within the connect timeout.
    TimeoutUpgrade,
    /// No reply to a tracked push within the reply timeout.
    TimeoutReply,
    /// A close frame with this code (1005: none given).
    CloseFrame(u16),
    /// Reset (ECONNRESET, EPIPE, ECONNABORTED).
    Reset,
    /// The stream ended without a close frame.
    Eof,
    /// The upgrade was answered with this HTTP status instead of 101 (0:
    /// no status: a malformed or oversized answer, or a wrong
    /// Sec-WebSocket-Accept).
    Handshake(u16),
    Ports,
    Fds,
    Buffers,
    /// The agent already holds its capacity.
    Capacity,
    Other,
}

pub(super) fn classify(e: &io::Error) -> ErrKind {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => ErrKind::Refused,
        Some(libc::ETIMEDOUT) => ErrKind::TimeoutTcp,
        Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => ErrKind::Reset,
        Some(libc::EADDRNOTAVAIL | libc::EADDRINUSE) => ErrKind::Ports,
        Some(libc::EMFILE | libc::ENFILE) => ErrKind::Fds,
        Some(libc::ENOBUFS | libc::ENOMEM) => ErrKind::Buffers,
        _ => ErrKind::Other,
    }
}

/// The `n`th loopback source address: 127.0.0.2, 127.0.0.3, ... 127.0.0.254,
/// 127.0.1.2, ... (each third octet's .0, .1 and .255 left out).
pub(super) fn source_addr(n: u32) -> IpAddr {
    let (hi, lo) = (n / 253, n % 253);
    IpAddr::V4(Ipv4Addr::new(127, (hi >> 8) as u8, hi as u8, 2 + lo as u8))
}

/// A non-blocking TCP socket, bound to `src` (port picked at connect) and
/// connecting to `target`; with `reset`, closing it resets it (SO_LINGER
/// 0: no TIME_WAIT left behind, for the floor's throwaway sockets).
pub(super) fn open_socket(
    target: SocketAddr,
    src: Option<IpAddr>,
    reset: bool,
) -> io::Result<Socket> {
    let domain = if target.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let sock = Socket::new(domain, Type::STREAM.nonblocking(), Some(Protocol::TCP))?;
    sock.set_nodelay(true)?;
    if reset {
        sock.set_linger(Some(std::time::Duration::ZERO))?;
    }
    if let Some(ip) = src {
        // Best effort: without it, bind picks a port per source address.
        let _ = sys::set_bind_no_port(&sock);
        sock.bind(&SocketAddr::new(ip, 0).into())?;
    }
    match sock.connect(&target.into()) {
        Ok(()) => Ok(sock),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(sock),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_addresses_start_at_127_0_0_2() {
        assert_eq!(source_addr(0), "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(source_addr(7), "127.0.0.9".parse::<IpAddr>().unwrap());
        assert_eq!(source_addr(252), "127.0.0.254".parse::<IpAddr>().unwrap());
        assert_eq!(source_addr(253), "127.0.1.2".parse::<IpAddr>().unwrap());
    }
}
