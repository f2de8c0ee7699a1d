//! One Phoenix socket's way in, over tokio, for the closed-loop scenarios
//! (the hooks joiner, the storm clients, the soak's and the handshake
//! rounds'): a TCP connect from a chosen source address, TLS over it when
//! the run has it ([`tls`]), the WebSocket upgrade, `phx_join` and its
//! reply, and the two socket loops they use (write everything, read what
//! is there).
//!
//! Owned once here so that every scenario connects, upgrades and reads a
//! join reply the same way. Each step is its own function so a caller can
//! note how far a socket got (the hooks joiner names the step that timed
//! out). The upgrade and the join take any tokio stream: a [`Stream`]
//! (plain or TLS) or a bare `TcpStream`. The agents' engine has its own
//! non-tokio path (`engine`), sized for a million sockets.

pub mod tls;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::de::IgnoredAny;
use serde::Deserialize;
use socket2::{Domain, Protocol, Socket, Type};
use throng_protocol::frame::{decode_frame, encode_frame, Opcode, Role};
use throng_protocol::handshake::{parse_client_response, write_client_request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::sys;

/// A socket of the closed-loop clients: plain TCP, or TLS over it
/// ([`tls::Connector`]). Both variants are `Unpin`, so each poll goes
/// straight to the one inside.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The largest frame a joining socket reads.
pub const MAX_FRAME: u64 = 1 << 20;

/// A non-blocking TCP connect from `src` (any port) to `target`.
pub async fn connect(target: SocketAddr, src: IpAddr) -> io::Result<TcpStream> {
    let sock = Socket::new(
        Domain::IPV4,
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    sock.set_nodelay(true)?;
    let _ = sys::set_bind_no_port(&sock);
    sock.bind(&SocketAddr::new(src, 0).into())?;
    match sock.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(sock))?;
    stream.writable().await?;
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    Ok(stream)
}

/// The path of a Phoenix v2 socket.
pub const SOCKET_PATH: &str = "/socket/websocket?vsn=2.0.0";

/// The WebSocket upgrade to [`SOCKET_PATH`], up to its 101; what the
/// server sent after the 101 stays in `buf`.
pub async fn upgrade<S>(stream: &mut S, target: SocketAddr, buf: &mut Vec<u8>) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    upgrade_to(stream, target, SOCKET_PATH, buf).await
}

/// [`upgrade`] to `path` (socket params in its query). A refusal's error
/// text starts with `upgrade refused: ` and has the server's status line.
pub async fn upgrade_to<S>(
    stream: &mut S,
    target: SocketAddr,
    path: &str,
    buf: &mut Vec<u8>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(256 + path.len());
    let accept = write_client_request(&mut out, &target.to_string(), path, [7; 16]);
    send(stream, &out).await?;
    loop {
        receive(stream, buf).await?;
        match parse_client_response(buf, &accept) {
            Ok(Some(n)) => {
                buf.drain(..n);
                return Ok(());
            }
            Ok(None) => {}
            Err(e) => return Err(io::Error::other(format!("upgrade refused: {e}"))),
        }
    }
}

/// Sends `phx_join` to `topic` with join ref and ref `jr` (and `since` in
/// its params when there is one) and reads up to its reply: an `ok` reply
/// returns its response's `recovered`, anything else an error with the
/// reply's text. What came after the reply stays in `buf`.
pub async fn phx_join<S>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    topic: &str,
    jr: &str,
    since: Option<&str>,
) -> io::Result<Option<bool>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let params = match since {
        Some(s) => serde_json::json!({ "since": s }),
        None => serde_json::json!({}),
    };
    let msg = serde_json::json!([jr, jr, topic, "phx_join", params]).to_string();
    let mut out = Vec::with_capacity(msg.len() + 14);
    encode_frame(&mut out, Opcode::Text, msg.as_bytes(), Some([1, 2, 3, 4]));
    send(stream, &out).await?;
    loop {
        let mut at = 0;
        loop {
            let f = match decode_frame(&mut buf[at..], Role::Client, MAX_FRAME) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(io::Error::other(format!("a frame I cannot read: {e}"))),
            };
            let payload = at + f.payload.start..at + f.payload.end;
            at += f.consumed;
            if f.opcode == Opcode::Close {
                return Err(io::Error::other("the server closed the socket"));
            }
            let Ok(Reply(_, r, _, event, body)) =
                serde_json::from_slice::<Reply>(&buf[payload.clone()])
            else {
                continue;
            };
            if event == "phx_reply" && r == Some(jr) {
                if body.status.as_deref() != Some("ok") {
                    let reply = String::from_utf8_lossy(&buf[payload]).into_owned();
                    return Err(io::Error::other(format!("join refused: {reply}")));
                }
                buf.drain(..at);
                return Ok(body.response.and_then(|r| r.recovered));
            }
        }
        buf.drain(..at);
        receive(stream, buf).await?;
    }
}

/// Writes all of `data` to any stream and flushes it (TLS holds records
/// until flushed).
pub async fn send<S: AsyncWrite + Unpin>(stream: &mut S, data: &[u8]) -> io::Result<()> {
    stream.write_all(data).await?;
    stream.flush().await
}

/// Reads what is there (at least one byte) onto the end of `buf`, from
/// any stream. Cancel-safe (`read_buf`'s promise): a `select!` may drop it.
pub async fn receive<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.reserve(2048);
    match stream.read_buf(buf).await? {
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection",
        )),
        _ => Ok(()),
    }
}

/// The parts of a Phoenix v2 message a join reads: its ref, its event and
/// its payload.
#[derive(Deserialize)]
struct Reply<'a>(
    IgnoredAny,
    #[serde(borrow)] Option<&'a str>,
    IgnoredAny,
    &'a str,
    ReplyBody,
);

#[derive(Deserialize, Default)]
#[serde(default)]
struct ReplyBody {
    status: Option<String>,
    response: Option<Response>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Response {
    recovered: Option<bool>,
}

/// Writes all of `data`, waiting for the socket as needed.
pub async fn write_all(stream: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        stream.writable().await?;
        match stream.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what is there (at least one byte) onto the end of `buf`, into its
/// spare capacity (no buffer of its own held while waiting).
pub async fn read_more(stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    loop {
        stream.readable().await?;
        buf.reserve(2048);
        match stream.try_read_buf(buf) {
            Ok(0) => return Err(io::Error::other("the server closed the connection")),
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_join_replies() {
        let m: Reply = serde_json::from_slice(
            br#"["2","2","storm:3","phx_reply",{"status":"ok","response":{"recovered":true}}]"#,
        )
        .unwrap();
        assert_eq!((m.1, m.3), (Some("2"), "phx_reply"));
        assert_eq!(m.4.status.as_deref(), Some("ok"));
        assert_eq!(m.4.response.and_then(|r| r.recovered), Some(true));
        let m: Reply = serde_json::from_slice(
            br#"["1","1","storm:0","phx_reply",{"status":"ok","response":{}}]"#,
        )
        .unwrap();
        assert_eq!(m.4.response.and_then(|r| r.recovered), None);
        let m: Reply = serde_json::from_slice(br#"[null,"00ab.7","storm:3","n",{"n":7}]"#).unwrap();
        assert_eq!((m.1, m.3, m.4.status), (Some("00ab.7"), "n", None));
    }
}
