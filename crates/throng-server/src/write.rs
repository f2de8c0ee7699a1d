//! The one nonblocking socket write under every outlet: the plain
//! WebSocket path (`conns/output.rs`) and TLS's records (`tls.rs`) both
//! write through it, so it sits below both.

use std::io::{self, IoSlice, Write};

use mio::net::TcpStream;

/// One `write`, mapping `WouldBlock` to zero bytes.
pub(crate) fn write_some(sock: &mut TcpStream, bytes: &[u8]) -> io::Result<usize> {
    retrying(|| sock.write(bytes))
}

/// One vectored `write` of `parts`, mapping `WouldBlock` to zero bytes.
pub(crate) fn write_some_vectored(
    sock: &mut TcpStream,
    parts: &[IoSlice<'_>],
) -> io::Result<usize> {
    retrying(|| sock.write_vectored(parts))
}

/// `write` until it is not interrupted; `WouldBlock` is zero bytes.
fn retrying(mut write: impl FnMut() -> io::Result<usize>) -> io::Result<usize> {
    loop {
        match write() {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}
