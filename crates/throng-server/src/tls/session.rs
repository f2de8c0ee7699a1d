//! TLS on a shard's connections (`--tls-cert`, `--tls-key`): the bytes
//! below HTTP and WebSocket. The input path reads ciphertext and hands on
//! plaintext; the output path encrypts what it writes; nothing above sees
//! TLS.
//!
//! Why hand-driven, with rustls's unbuffered API
//! (`rustls::server::UnbufferedServerConnection`, the API where the caller
//! owns every buffer: rustls's src/conn/unbuffered.rs) rather than a
//! `rustls::ServerConnection`: a buffered connection keeps its own
//! incoming and outgoing buffers for its whole life, 20-40 KB an idle
//! socket (rustls issue 794), which is 100 times what an idle throng
//! socket costs. Here a session holds only its keys and state; ciphertext
//! is read into the shard's one buffer and decrypted while there, and
//! encrypted into another of the shard's buffers and written at once. A
//! connection keeps bytes of its own only while a record is incomplete
//! (the start of a record the kernel split) or while the kernel refuses
//! ciphertext; both are freed when empty, as [`super::conn::Extra`] is.
//!
//! Sessions live in a side table indexed like the slab (as
//! `Conns::peer_ips`), so [`super::conn::Conn`] keeps its size and a shard
//! without TLS pays one `None` test per read and write.
//!
//! Once a handshake is done, the session keeps only its record layer
//! (`records.rs`): its keys and sequence numbers, ~1.3 KB, not the
//! ~4.8 KB a rustls connection holds after its handshake.
//!
//! kTLS (the kernel's record layer, `tcp_available_ulp` listing `tls`) is
//! not used: this project's machines do not offer it; see `docs/tls.md`.

use std::io::{self, Read};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError};
use rustls::{HandshakeKind, ServerConfig};

use crate::metrics::ShardStats;
use crate::write::write_some;

use super::records;
use records::Records;

/// Plaintext encrypted by one write: what the kernel refuses of its
/// ciphertext is kept until the socket has room, so this bounds what a
/// connection holds (the rest stays plaintext in the output queue, shared
/// broadcasts as references).
const WRITE_MAX: usize = 32 * 1024;

/// What a plaintext HTTP request to the TLS port is answered with.
const PLAINTEXT_REFUSAL: &[u8] = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 79\r\n\r\nThis port speaks TLS: use https:// or wss:// instead of http:// or ws:// here.\n";

/// A shard's TLS: the config new connections use and its sessions.
pub(crate) struct Tls {
    node: Arc<crate::tls::Tls>,
    /// Sessions by slab key; `None` for a free key.
    sessions: Vec<Option<Box<Session>>>,
    /// Ciphertext read, decrypted in place.
    cbuf: Vec<u8>,
    /// Ciphertext to write.
    obuf: Vec<u8>,
    /// A vectored write's plaintext, gathered for one encryption.
    pbuf: Vec<u8>,
    stats: Arc<ShardStats>,
}

/// One connection's TLS session.
struct Session {
    stage: Stage,
    /// The start of a record not complete yet.
    inq: Vec<u8>,
    /// Ciphertext the kernel refused, from `out_at`.
    outq: Vec<u8>,
    out_at: usize,
    /// Set once the handshake completed (and was counted).
    open: bool,
    /// Set once the first bytes were looked at.
    started: bool,
}

/// A session's stage: shaking hands (rustls's connection), then its
/// record layer alone.
enum Stage {
    Handshake(Box<UnbufferedServerConnection>),
    Records(Records),
    /// Between the two (only while one becomes the other), or failed.
    Ended,
}

/// What a read got.
pub(crate) struct Got {
    /// Plaintext bytes put in the caller's buffer.
    pub plain: usize,
    /// The socket may have more: its read filled the buffer.
    pub more: bool,
}

impl Tls {
    pub fn new(node: Arc<crate::tls::Tls>, read_buf: usize, stats: Arc<ShardStats>) -> Tls {
        Tls {
            node,
            sessions: Vec::new(),
            cbuf: vec![0; read_buf],
            obuf: Vec::new(),
            pbuf: Vec::new(),
            stats,
        }
    }

    /// Starts the session of the connection accepted as `key`.
    pub fn open(&mut self, key: usize) -> bool {
        let config: Arc<ServerConfig> = self.node.config.clone();
        let Ok(conn) = UnbufferedServerConnection::new(config) else {
            return false;
        };
        if self.sessions.len() <= key {
            self.sessions.resize_with(key + 1, || None);
        }
        self.sessions[key] = Some(Box::new(Session {
            stage: Stage::Handshake(Box::new(conn)),
            inq: Vec::new(),
            outq: Vec::new(),
            out_at: 0,
            open: false,
            started: false,
        }));
        true
    }

    /// Ends the session of connection `key`, being removed.
    pub fn close(&mut self, key: usize) {
        if let Some(s) = self.sessions.get_mut(key) {
            *s = None;
        }
    }

    /// Whether connection `key` has ciphertext the kernel refused.
    pub fn backlogged(&self, key: usize) -> bool {
        self.sessions
            .get(key)
            .and_then(|s| s.as_ref())
            .is_some_and(|s| !s.outq.is_empty())
    }

    /// Reads `sock` and decrypts into `out` (at least as long as the
    /// shard's read buffer), answering the handshake on the way. `Ok` with
    /// no plaintext is the peer's end (FIN or close_notify); `WouldBlock`
    /// when the socket has nothing more; another error (a failed handshake,
    /// a plaintext request, a bad record) ends the connection.
    pub fn read(&mut self, key: usize, sock: &mut TcpStream, out: &mut [u8]) -> io::Result<Got> {
        let Some(s) = self.sessions.get_mut(key).and_then(|s| s.as_deref_mut()) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        loop {
            let kept = s.inq.len();
            self.cbuf[..kept].copy_from_slice(&s.inq);
            let n = match sock.read(&mut self.cbuf[kept..]) {
                Ok(0) => {
                    return Ok(Got {
                        plain: 0,
                        more: false,
                    })
                }
                Ok(n) => n,
                Err(e) => return Err(e),
            };
            s.inq = Vec::new();
            let more = kept + n == self.cbuf.len();
            if !s.started {
                s.started = true;
                // A TLS connection opens with a handshake record (22); an
                // HTTP request with a method's letters.
                if self.cbuf[0] != 22 {
                    if self.cbuf[0].is_ascii_uppercase() {
                        let _ = write_some(sock, PLAINTEXT_REFUSAL);
                    }
                    ShardStats::add(&self.stats.tls_plaintext_refusals, 1);
                    return Err(io::ErrorKind::InvalidData.into());
                }
            }
            self.obuf.clear();
            let len = kept + n;
            let conn = match &mut s.stage {
                Stage::Handshake(conn) => conn,
                Stage::Records(r) => {
                    let opened = r
                        .open(&mut self.cbuf[..len], out)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    if opened.used < len {
                        s.inq = self.cbuf[opened.used..len].to_vec();
                    }
                    if opened.closed && opened.plain == 0 {
                        return Ok(Got {
                            plain: 0,
                            more: false,
                        });
                    }
                    if opened.plain > 0 {
                        return Ok(Got {
                            plain: opened.plain,
                            more,
                        });
                    }
                    continue;
                }
                Stage::Ended => return Err(io::ErrorKind::InvalidData.into()),
            };
            let mut pos = 0;
            let mut plain = 0;
            let mut failed = None;
            let mut peer_closed = false;
            let mut idle = false;
            loop {
                let status = conn.process_tls_records(&mut self.cbuf[pos..len]);
                let discard = status.discard;
                match status.state {
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                    Ok(ConnectionState::ReadTraffic(mut r)) => {
                        while let Some(rec) = r.next_record() {
                            let rec = rec.map_err(io::Error::other)?;
                            let end = plain + rec.payload.len();
                            if end > out.len() {
                                // Plaintext is never longer than its
                                // ciphertext: out is as long as cbuf.
                                return Err(io::ErrorKind::InvalidData.into());
                            }
                            out[plain..end].copy_from_slice(rec.payload);
                            plain = end;
                        }
                    }
                    Ok(ConnectionState::EncodeTlsData(mut e)) => {
                        if !encode(&mut self.obuf, |b| e.encode(b)) {
                            failed = Some(rustls::Error::General("encode".into()));
                            break;
                        }
                    }
                    Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                    Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                        peer_closed = true;
                        pos += discard;
                        break;
                    }
                    Ok(state) => {
                        idle = matches!(state, ConnectionState::WriteTraffic(_));
                        pos += discard;
                        break;
                    }
                }
                pos += discard;
            }
            if let Some(e) = failed {
                // The fatal alert rustls queued, if any, then the end.
                if let Ok(ConnectionState::EncodeTlsData(mut e)) =
                    conn.process_tls_records(&mut []).state
                {
                    encode(&mut self.obuf, |b| e.encode(b));
                }
                let _ = write_some(sock, &self.obuf);
                ShardStats::add(&self.stats.tls_handshake_failures, !s.open as u64);
                tracing::debug!(key, "TLS failed: {e}");
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            if pos < len {
                s.inq = self.cbuf[pos..len].to_vec();
            }
            if !s.open && !conn.is_handshaking() {
                s.open = true;
                ShardStats::add(&self.stats.tls_handshakes, 1);
                if conn.handshake_kind() == Some(HandshakeKind::Resumed) {
                    ShardStats::add(&self.stats.tls_resumptions, 1);
                }
            }
            if !self.obuf.is_empty() {
                s.send(sock, &self.obuf)?;
            }
            if s.open && idle && !peer_closed {
                // Handshake and ticket done, nothing pending: keep only
                // the record layer (`records.rs`).
                if let Stage::Handshake(conn) = std::mem::replace(&mut s.stage, Stage::Ended) {
                    s.stage = Stage::Records(
                        Records::take(*conn)
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
                    );
                }
            }
            if peer_closed && plain == 0 {
                return Ok(Got {
                    plain: 0,
                    more: false,
                });
            }
            if plain > 0 {
                return Ok(Got { plain, more });
            }
            // No plaintext yet (a handshake flight, a record's start):
            // read again, until the socket has nothing more.
        }
    }

    /// Encrypts and writes `parts` (one plaintext, in order) to connection
    /// `key`; returns the plaintext bytes taken (at most [`WRITE_MAX`]).
    /// Ciphertext the kernel refuses stays in the session (see
    /// [`Tls::backlogged`]); with some there already, nothing is taken
    /// (`WouldBlock`). Before the handshake completes, plaintext is
    /// dropped (a timeout's 408 to a client still shaking hands).
    pub fn write(
        &mut self,
        key: usize,
        sock: &mut TcpStream,
        parts: &[&[u8]],
    ) -> io::Result<usize> {
        let Some(s) = self.sessions.get_mut(key).and_then(|s| s.as_deref_mut()) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        if !s.flush(sock)? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if !s.open || total == 0 {
            return Ok(total);
        }
        let plain: &[u8] = match parts {
            [one] => &one[..one.len().min(WRITE_MAX)],
            _ => {
                self.pbuf.clear();
                for p in parts {
                    let room = WRITE_MAX - self.pbuf.len();
                    self.pbuf.extend_from_slice(&p[..p.len().min(room)]);
                }
                &self.pbuf
            }
        };
        self.obuf.clear();
        let conn = match &mut s.stage {
            Stage::Records(r) => {
                r.seal(plain, &mut self.obuf).map_err(io::Error::other)?;
                s.send(sock, &self.obuf)?;
                return Ok(plain.len());
            }
            Stage::Handshake(conn) => conn,
            Stage::Ended => return Err(io::ErrorKind::InvalidData.into()),
        };
        loop {
            match conn.process_tls_records(&mut []).state {
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    encode(&mut self.obuf, |b| e.encode(b));
                }
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    let at = self.obuf.len();
                    // Records of 16 KiB, each with at most 64 bytes more.
                    self.obuf
                        .resize(at + plain.len() + 64 * (plain.len() / 16384 + 1), 0);
                    match w.encrypt(plain, &mut self.obuf[at..]) {
                        Ok(n) => self.obuf.truncate(at + n),
                        Err(EncryptError::InsufficientSize(e)) => {
                            self.obuf.resize(at + e.required_size, 0);
                            let n = w
                                .encrypt(plain, &mut self.obuf[at..])
                                .map_err(io::Error::other)?;
                            self.obuf.truncate(at + n);
                        }
                        Err(e) => return Err(io::Error::other(e)),
                    }
                    break;
                }
                // Closed, or an error: the connection is ending.
                Ok(_) => return Ok(total),
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        s.send(sock, &self.obuf)?;
        Ok(plain.len())
    }

    /// Writes connection `key`'s refused ciphertext; true once none is left.
    pub fn flush(&mut self, key: usize, sock: &mut TcpStream) -> io::Result<bool> {
        match self.sessions.get_mut(key).and_then(|s| s.as_deref_mut()) {
            Some(s) => s.flush(sock),
            None => Ok(true),
        }
    }

    /// Queues close_notify before the half-close of a closing connection.
    pub fn close_notify(&mut self, key: usize, sock: &mut TcpStream) {
        let Some(s) = self.sessions.get_mut(key).and_then(|s| s.as_deref_mut()) else {
            return;
        };
        if !s.open || !s.outq.is_empty() {
            return;
        }
        match &mut s.stage {
            Stage::Records(r) => {
                self.obuf.clear();
                if r.close_notify(&mut self.obuf).is_ok() {
                    let _ = write_some(sock, &self.obuf);
                }
            }
            Stage::Handshake(conn) => {
                if let Ok(ConnectionState::WriteTraffic(mut w)) =
                    conn.process_tls_records(&mut []).state
                {
                    let mut alert = [0u8; 64];
                    if let Ok(n) = w.queue_close_notify(&mut alert) {
                        let _ = write_some(sock, &alert[..n]);
                    }
                }
            }
            Stage::Ended => {}
        }
    }
}

impl Session {
    /// Writes `bytes` of ciphertext; keeps what the kernel refuses.
    fn send(&mut self, sock: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
        let n = if self.outq.is_empty() {
            write_some(sock, bytes)?
        } else {
            0
        };
        if n < bytes.len() {
            self.outq.extend_from_slice(&bytes[n..]);
        }
        Ok(())
    }

    fn flush(&mut self, sock: &mut TcpStream) -> io::Result<bool> {
        while self.out_at < self.outq.len() {
            let n = write_some(sock, &self.outq[self.out_at..])?;
            if n == 0 {
                return Ok(false);
            }
            self.out_at += n;
        }
        self.outq = Vec::new();
        self.out_at = 0;
        Ok(true)
    }
}

/// Appends what `f` encodes to `out`, growing it as rustls asks.
fn encode(out: &mut Vec<u8>, mut f: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>) -> bool {
    let at = out.len();
    out.resize(at + 4096, 0);
    loop {
        match f(&mut out[at..]) {
            Ok(n) => {
                out.truncate(at + n);
                return true;
            }
            Err(EncodeError::InsufficientSize(e)) => out.resize(at + e.required_size, 0),
            Err(_) => {
                out.truncate(at);
                return false;
            }
        }
    }
}
