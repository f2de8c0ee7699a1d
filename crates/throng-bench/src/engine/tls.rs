//! `throng bench --tls`: the engine's connections over TLS (`wss://`),
//! with rustls's buffered client connection in a side table indexed like
//! the slab, so [`super::conn::Conn`] keeps its size. The client's memory
//! is not what a run measures (the server's is), so no effort goes into
//! its buffers; its CPU per handshake is counted with the agents'.
//! Every user is a new client: resumption is off, so each connect is a
//! full handshake (rustls's default cache is keyed by server name alone,
//! and would hand one user's ticket to the next user's first connect).
//! Returning clients, who resume, are the handshake rounds' (`join::tls`).

use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

pub use crate::plan::TlsPlan;

pub(super) struct ClientTls {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    sessions: Vec<Option<Box<ClientConnection>>>,
}

impl ClientTls {
    pub fn new(plan: &TlsPlan) -> io::Result<ClientTls> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut plan.ca_pem.as_bytes()) {
            roots.add(cert?).map_err(io::Error::other)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.resumption = Resumption::disabled();
        let name = ServerName::try_from(plan.server_name.clone()).map_err(io::Error::other)?;
        Ok(ClientTls {
            config: Arc::new(config),
            name,
            sessions: Vec::new(),
        })
    }

    /// Starts the session of connection `token` (its TCP connect is done).
    pub fn open(&mut self, token: usize) -> io::Result<()> {
        let conn = ClientConnection::new(self.config.clone(), self.name.clone())
            .map_err(io::Error::other)?;
        if self.sessions.len() <= token {
            self.sessions.resize_with(token + 1, || None);
        }
        self.sessions[token] = Some(Box::new(conn));
        Ok(())
    }

    /// Takes the session of `token`, being dropped.
    pub fn take(&mut self, token: usize) -> Option<Box<ClientConnection>> {
        self.sessions.get_mut(token).and_then(Option::take)
    }

    /// Whether `token` has a session.
    pub fn has(&self, token: usize) -> bool {
        self.sessions.get(token).is_some_and(|s| s.is_some())
    }

    /// Encrypts `plain` for `token` (rustls holds it until the handshake is
    /// done) and writes what the socket takes; the rest waits in rustls
    /// for the next writable event ([`ClientTls::flush`]).
    pub fn write(&mut self, token: usize, sock: &mut TcpStream, plain: &[u8]) -> io::Result<()> {
        let Some(s) = self.sessions.get_mut(token).and_then(|s| s.as_deref_mut()) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        s.writer().write_all(plain)?;
        flush(s, sock)
    }

    pub fn flush(&mut self, token: usize, sock: &mut TcpStream) -> io::Result<()> {
        match self.sessions.get_mut(token).and_then(|s| s.as_deref_mut()) {
            Some(s) => flush(s, sock),
            None => Ok(()),
        }
    }

    /// Reads plaintext for `token` into `buf`: `Ok(0)` at the end,
    /// `WouldBlock` when the socket has nothing more.
    pub fn read(
        &mut self,
        token: usize,
        sock: &mut TcpStream,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        let Some(s) = self.sessions.get_mut(token).and_then(|s| s.as_deref_mut()) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        loop {
            match s.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if s.read_tls(sock)? == 0 {
                return Ok(0);
            }
            s.process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            flush(s, sock)?;
        }
    }
}

/// Writes a session's last bytes (a close frame), best effort.
pub(super) fn send_last(s: &mut ClientConnection, sock: &mut TcpStream, plain: &[u8]) {
    if s.writer().write_all(plain).is_ok() {
        let _ = flush(s, sock);
    }
}

fn flush(s: &mut ClientConnection, sock: &mut TcpStream) -> io::Result<()> {
    while s.wants_write() {
        match s.write_tls(sock) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
