//! One Phoenix socket's way in, over tokio, for the closed-loop scenarios
//! (the hooks joiner and the storm clients): a TCP connect from a chosen
//! source address, the WebSocket upgrade, `phx_join` and its reply, and
//! the two socket loops they use (write everything, read what is there).
//!
//! Owned once here so that both scenarios connect, upgrade and read a join
//! reply the same way. Each step is its own function so a caller can note
//! how far a socket got (the hooks joiner names the step that timed out).
//! The agents' engine has its own non-tokio path (`engine`), sized for a
//! million sockets.

use std::io;
use std::net::{IpAddr, SocketAddr};

use serde::de::IgnoredAny;
use serde::Deserialize;
use socket2::{Domain, Protocol, Socket, Type};
use throng_protocol::frame::{decode_frame, encode_frame, Opcode, Role};
use throng_protocol::handshake::{parse_client_response, write_client_request};
use tokio::net::TcpStream;

use crate::sys;

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

/// The WebSocket upgrade to `/socket/websocket?vsn=2.0.0`, up to its 101;
/// what the server sent after the 101 stays in `buf`.
pub async fn upgrade(stream: &TcpStream, target: SocketAddr, buf: &mut Vec<u8>) -> io::Result<()> {
    upgrade_to(stream, target, "/socket/websocket?vsn=2.0.0", buf).await
}

/// [`upgrade`] to `path` (socket params in its query).
pub async fn upgrade_to(
    stream: &TcpStream,
    target: SocketAddr,
    path: &str,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    let mut out = Vec::with_capacity(256);
    let accept = write_client_request(&mut out, &target.to_string(), path, [7; 16]);
    write_all(stream, &out).await?;
    loop {
        read_more(stream, buf).await?;
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
pub async fn phx_join(
    stream: &TcpStream,
    buf: &mut Vec<u8>,
    topic: &str,
    jr: &str,
    since: Option<&str>,
) -> io::Result<Option<bool>> {
    let params = match since {
        Some(s) => serde_json::json!({ "since": s }),
        None => serde_json::json!({}),
    };
    let msg = serde_json::json!([jr, jr, topic, "phx_join", params]).to_string();
    let mut out = Vec::with_capacity(msg.len() + 14);
    encode_frame(&mut out, Opcode::Text, msg.as_bytes(), Some([1, 2, 3, 4]));
    write_all(stream, &out).await?;
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
        read_more(stream, buf).await?;
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
