//! What the integration tests share: the real `throng` binary on 127.0.0.1
//! port 0 ([`Server`]), and a small blocking WebSocket client built on
//! `throng-protocol` ([`Client`]), speaking v2.
//!
//! `THRONG_TEST_BIN=/path/to/throng` runs the tests against another build
//! (e.g. an older commit's, to check that a new test fails there).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use throng_protocol::frame::{decode_frame, encode_frame, parse_close, Opcode, Role};
use throng_protocol::handshake::{parse_client_response, write_client_request};
use throng_protocol::serializer::{decode, Sender};
use throng_protocol::Vsn;

/// The binary under test.
pub fn throng_bin() -> String {
    std::env::var("THRONG_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_throng").to_string())
}

pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// The server API listener, where `/metrics` is (unless `--public-metrics`).
    pub api: Option<SocketAddr>,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        Server::start_with(args, Stdio::null())
    }

    /// Starts the server with its stderr sent to `stderr`.
    pub fn start_with(args: &[&str], stderr: Stdio) -> Server {
        let mut all = vec!["--port", "0", "--bind", "127.0.0.1"];
        all.extend_from_slice(args);
        Server::start_exact(&all, stderr)
    }

    /// `throng serve ARGS`, without the `--port 0 --bind 127.0.0.1` of [`Server::start`].
    pub fn start_exact(args: &[&str], stderr: Stdio) -> Server {
        Server::start_exact_env(args, &[], stderr)
    }

    /// [`Server::start_exact`] with these environment variables.
    pub fn start_exact_env(args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Server {
        let mut cmd = Command::new(throng_bin());
        cmd.arg("serve").args(args).envs(env.iter().copied());
        Server::spawn(cmd, stderr)
    }

    /// Starts `cmd` (which ends in `exec throng serve ...`, or is it) and
    /// waits for its listening line.
    pub fn spawn(mut cmd: Command, stderr: Stdio) -> Server {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start throng");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut api = None;
        let addr = loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "no listening line");
            if let Some(a) = line.trim().strip_prefix("api at ") {
                api = Some(a.parse().unwrap());
            }
            if let Some(a) = line.trim().strip_prefix("listening on ") {
                break a.parse().unwrap();
            }
        };
        Server { child, addr, api }
    }

    /// The whole `/metrics` page.
    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.api.unwrap_or(self.addr)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    pub fn metric(&self, name: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or_else(|| panic!("no metric {name}"))
    }

    /// Polls a metric until `pred` holds; panics after `secs`.
    pub fn await_metric(&self, name: &str, secs: u64, pred: impl Fn(u64) -> bool) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.metric(name);
            if pred(v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{name} stayed at {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The server's resident memory in KiB, from /proc.
    #[allow(dead_code)]
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Sends `sig` to the server.
    #[allow(dead_code)]
    pub fn signal(&self, sig: i32) {
        #[allow(unsafe_code)]
        // SAFETY: kill(2) on the child this test started and has not reaped.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP socket to `addr` with a receive buffer of `rcvbuf` bytes (set
/// before connecting, so the window is sized for it) and an Ethernet-sized
/// segment. Loopback's 64 KiB segments make the server's kernel start a
/// connection with a send buffer of over a megabyte, which hides any
/// queueing in the server; with 1,400-byte segments it starts small, as on
/// a real network.
pub fn small_buffer_socket(addr: SocketAddr, rcvbuf: usize) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(rcvbuf).unwrap();
    sock.set_mss(1400).unwrap();
    sock.connect(&addr.into()).unwrap();
    sock.into()
}

/// A blocking WebSocket client speaking v2.
pub struct Client {
    pub sock: TcpStream,
    pub buf: Vec<u8>,
    pub next_ref: u64,
}

/// How a connection ended, as the client saw it.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// A close frame with this code (`None`: no code), then EOF.
    Close(Option<u16>),
    /// EOF or a reset with no close frame: what browsers report as 1006.
    Abnormal(String),
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        Client::over(TcpStream::connect(addr).unwrap())
    }

    /// Upgrades an open TCP connection.
    pub fn over(sock: TcpStream) -> Client {
        Client::try_over(sock).unwrap_or_else(|e| panic!("upgrade refused: {e}"))
    }

    /// Upgrades an open TCP connection; the server's answer if it refuses.
    pub fn try_over(sock: TcpStream) -> Result<Client, String> {
        Client::try_over_path(sock, "/socket/websocket?vsn=2.0.0")
    }

    /// Upgrades an open TCP connection at `path`.
    pub fn try_over_path(mut sock: TcpStream, path: &str) -> Result<Client, String> {
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut req = Vec::new();
        let accept = write_client_request(&mut req, "t", path, [7; 16]);
        let _ = sock.write_all(&req);
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = sock.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!(
                    "closed during the handshake after {:?}",
                    String::from_utf8_lossy(&buf)
                ));
            }
            buf.extend_from_slice(&chunk[..n]);
            match parse_client_response(&buf, &accept) {
                Ok(Some(used)) => {
                    buf.drain(..used);
                    break;
                }
                Ok(None) => {}
                Err(_) if buf.windows(4).any(|w| w == b"\r\n\r\n") => {
                    return Err(String::from_utf8_lossy(&buf).into_owned())
                }
                Err(_) => {}
            }
        }
        Ok(Client {
            sock,
            buf,
            next_ref: 0,
        })
    }

    pub fn send_frame(&mut self, op: Opcode, fin: bool, data: &[u8]) {
        let mut out = Vec::new();
        encode_frame(&mut out, op, data, Some([1, 2, 3, 4]));
        if !fin {
            out[0] &= 0x7f;
        }
        self.sock.write_all(&out).unwrap();
    }

    pub fn send_text(&mut self, text: &str) {
        self.send_frame(Opcode::Text, true, text.as_bytes());
    }

    pub fn push(&mut self, topic: &str, event: &str, payload: &str) -> String {
        self.next_ref += 1;
        let r = self.next_ref.to_string();
        self.send_text(&format!(r#"["1","{r}","{topic}","{event}",{payload}]"#));
        r
    }

    /// The next frame: (opcode, payload). `None` when the server closed.
    pub fn next_frame(&mut self) -> Option<(Opcode, Vec<u8>)> {
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(f) = decode_frame(&mut self.buf, Role::Client, 1 << 24).unwrap() {
                let payload = self.buf[f.payload.clone()].to_vec();
                self.buf.drain(..f.consumed);
                return Some((f.opcode, payload));
            }
            match self.sock.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next text message's (topic, event, payload JSON).
    pub fn next_message(&mut self) -> (String, String, String) {
        let (op, data) = self.next_frame().expect("connection closed");
        assert_ne!(op, Opcode::Close, "closed: {:?}", parse_close(&data));
        let m = decode(Vsn::V2, op, &data, Sender::Server).unwrap();
        let throng_protocol::Payload::Json(p) = m.payload else {
            panic!("binary")
        };
        (m.topic.into_owned(), m.event.into_owned(), p.to_string())
    }

    pub fn join_lobby(&mut self) {
        self.push("rooms:lobby", "phx_join", "{}");
        let (_, event, payload) = self.next_message();
        assert_eq!(event, "phx_reply");
        assert!(payload.contains(r#""status":"ok""#), "{payload}");
    }

    /// Reads until the server ends the connection, skipping messages;
    /// answers a close frame with one, as a browser does.
    pub fn read_to_end(&mut self) -> End {
        loop {
            let mut chunk = [0u8; 65536];
            match decode_frame(&mut self.buf, Role::Client, 1 << 24) {
                Ok(Some(f)) => {
                    let (op, payload) = (f.opcode, self.buf[f.payload.clone()].to_vec());
                    self.buf.drain(..f.consumed);
                    if op == Opcode::Close {
                        let code = parse_close(&payload).unwrap_or(None);
                        let mut out = Vec::new();
                        throng_protocol::frame::encode_close(
                            &mut out,
                            code.unwrap_or(1000),
                            "",
                            Some([1, 2, 3, 4]),
                        );
                        let _ = self.sock.write_all(&out);
                        return match self.sock.read(&mut chunk) {
                            Ok(0) => End::Close(code),
                            Ok(n) => End::Abnormal(format!("{n} bytes after the close frame")),
                            Err(e) => End::Abnormal(format!("after the close frame: {e}")),
                        };
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => return End::Abnormal(format!("bad frame: {e}")),
            }
            match self.sock.read(&mut chunk) {
                Ok(0) => return End::Abnormal("EOF without a close frame".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return End::Abnormal(e.to_string()),
            }
        }
    }
}

/// The close frame's (code, reason) in a frame payload.
pub fn close_of(payload: &[u8]) -> (u16, String) {
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    (code, String::from_utf8_lossy(&payload[2..]).into_owned())
}
