//! One writing thread of a floor writer: it owns its share of the floor
//! sockets, writes each round's frame to every one of them when told, and
//! answers each message an agent sends on them (the heartbeats of the run,
//! see `engine/floor.rs`) with one fixed reply frame, so that the floor is
//! measured over the same heartbeat background the broadcasts run over.
//!
//! The least a server can do for a heartbeat is read it and write a reply:
//! that is all this does. Frames are found by their headers alone (no
//! unmasking, no JSON), and the reply is encoded once for the whole run.

use std::io::{ErrorKind, Read};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;
use throng_protocol::frame::frame_len_hint;

use crate::sys::write_until_blocked;

/// What the thread is told.
pub(super) enum Cmd {
    /// A socket the writer accepted, now this thread's.
    Adopt(std::net::TcpStream),
    /// Write this frame to every socket, then say so.
    Write(Arc<[u8]>),
}

/// A round written by one thread.
pub(super) struct Written {
    pub failed: u64,
}

/// The way to a running thread (its orders and its waker).
#[derive(Clone)]
pub(super) struct Handle {
    tx: mpsc::Sender<Cmd>,
    waker: Arc<Waker>,
}

const WAKER: Token = Token(usize::MAX);
/// A frame longer than this on a floor socket is no heartbeat: the socket
/// is dropped.
const MAX_FRAME: usize = 64 * 1024;

impl Handle {
    /// Starts a thread that answers each message with `reply` and reports
    /// each round on `done`.
    pub fn spawn(reply: Arc<[u8]>, done: mpsc::Sender<Written>) -> std::io::Result<Handle> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("floor-writer".into())
            .spawn(move || {
                Thread {
                    poll,
                    socks: Slab::new(),
                    reply,
                    failed: 0,
                }
                .run(rx, done)
            })?;
        Ok(Handle { tx, waker })
    }

    /// Hands the thread `cmd`; false when it is gone.
    pub fn send(&self, cmd: Cmd) -> bool {
        self.tx.send(cmd).is_ok() && self.waker.wake().is_ok()
    }
}

struct Sock {
    s: TcpStream,
    /// Part of a frame read and not yet whole (empty, unallocated, mostly).
    rx: Vec<u8>,
    /// What the socket would not take yet (empty, unallocated, mostly).
    tx: Vec<u8>,
}

struct Thread {
    poll: Poll,
    socks: Slab<Sock>,
    reply: Arc<[u8]>,
    /// Sockets dropped on a failed write since the last round was reported.
    failed: u64,
}

impl Thread {
    fn run(mut self, rx: mpsc::Receiver<Cmd>, done: mpsc::Sender<Written>) {
        let mut events = Events::with_capacity(1024);
        loop {
            loop {
                match rx.try_recv() {
                    Ok(Cmd::Adopt(s)) => self.adopt(s),
                    Ok(Cmd::Write(frame)) => {
                        self.write_round(&frame);
                        let failed = std::mem::take(&mut self.failed);
                        if done.send(Written { failed }).is_err() {
                            return;
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            match self.poll.poll(&mut events, None) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
            for ev in events.iter() {
                if ev.token() == WAKER {
                    continue;
                }
                let k = ev.token().0;
                if ev.is_writable() {
                    self.flush(k);
                }
                if ev.is_readable() || ev.is_read_closed() {
                    self.read(k);
                }
            }
        }
    }

    fn adopt(&mut self, s: std::net::TcpStream) {
        if s.set_nonblocking(true).is_err() {
            return;
        }
        let mut s = TcpStream::from_std(s);
        let entry = self.socks.vacant_entry();
        if self
            .poll
            .registry()
            .register(&mut s, Token(entry.key()), Interest::READABLE)
            .is_ok()
        {
            entry.insert(Sock {
                s,
                rx: Vec::new(),
                tx: Vec::new(),
            });
        }
    }

    /// The round: `frame` to every socket, one `write` each.
    fn write_round(&mut self, frame: &[u8]) {
        let keys: Vec<usize> = self.socks.iter().map(|(k, _)| k).collect();
        for k in keys {
            self.send(k, frame);
        }
    }

    /// Writes `data` to socket `k`, keeping what it will not take (and
    /// asking to hear when it will); drops the socket on an error.
    fn send(&mut self, k: usize, data: &[u8]) {
        let Some(sock) = self.socks.get_mut(k) else {
            return;
        };
        if !sock.tx.is_empty() {
            sock.tx.extend_from_slice(data);
            return;
        }
        let Ok(written) = write_until_blocked(&mut sock.s, data) else {
            return self.drop_sock(k);
        };
        if written < data.len() {
            sock.tx.extend_from_slice(&data[written..]);
            let interest = Interest::READABLE | Interest::WRITABLE;
            let _ = self
                .poll
                .registry()
                .reregister(&mut sock.s, Token(k), interest);
        }
    }

    fn flush(&mut self, k: usize) {
        let Some(sock) = self.socks.get_mut(k) else {
            return;
        };
        let Ok(written) = write_until_blocked(&mut sock.s, &sock.tx) else {
            return self.drop_sock(k);
        };
        sock.tx.drain(..written);
        if sock.tx.is_empty() {
            sock.tx = Vec::new();
            let _ = self
                .poll
                .registry()
                .reregister(&mut sock.s, Token(k), Interest::READABLE);
        }
    }

    /// Reads what socket `k` has and answers each whole message with the reply.
    fn read(&mut self, k: usize) {
        let mut buf = [0u8; 4096];
        let mut replies = 0u32;
        loop {
            let Some(sock) = self.socks.get_mut(k) else {
                return;
            };
            let n = match sock.s.read(&mut buf) {
                Ok(0) => return self.drop_sock(k),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => return self.drop_sock(k),
            };
            let scan = if sock.rx.is_empty() {
                let s = scan(&buf[..n]);
                sock.rx.extend_from_slice(&buf[s.consumed..n]);
                s
            } else {
                sock.rx.extend_from_slice(&buf[..n]);
                let s = scan(&sock.rx);
                sock.rx.drain(..s.consumed);
                s
            };
            if sock.rx.is_empty() {
                sock.rx = Vec::new();
            }
            replies += scan.messages;
            if scan.close || sock.rx.len() > MAX_FRAME {
                return self.drop_sock(k);
            }
            // A short read drained the socket (edge-triggered epoll reports
            // new data): no second `read` to hear WouldBlock, as the server.
            if n < buf.len() {
                break;
            }
        }
        let reply = Arc::clone(&self.reply);
        for _ in 0..replies {
            self.send(k, &reply);
        }
    }

    fn drop_sock(&mut self, k: usize) {
        if let Some(mut sock) = self.socks.try_remove(k) {
            let _ = self.poll.registry().deregister(&mut sock.s);
            self.failed += 1;
        }
    }
}

/// Whole frames at the front of a buffer: how many bytes, how many
/// messages (text or binary frames), and whether one was a close.
#[derive(Debug, PartialEq)]
struct Scan {
    consumed: usize,
    messages: u32,
    close: bool,
}

fn scan(buf: &[u8]) -> Scan {
    let mut s = Scan {
        consumed: 0,
        messages: 0,
        close: false,
    };
    while let Some(len) = frame_len_hint(&buf[s.consumed..]) {
        if len > MAX_FRAME {
            s.close = true;
            break;
        }
        if buf.len() - s.consumed < len {
            break;
        }
        match buf[s.consumed] & 0x0F {
            1 | 2 => s.messages += 1,
            8 => s.close = true,
            _ => {}
        }
        s.consumed += len;
    }
    s
}

/// Time for `threads` to write a round: sends each its `frame`, waits for
/// every one's word on `done`; the slowest's seconds and the failures.
pub(super) fn round(
    handles: &[Handle],
    done: &mpsc::Receiver<Written>,
    frame: &[u8],
) -> (f64, u64) {
    let frame: Arc<[u8]> = frame.into();
    let start = Instant::now();
    let sent = handles
        .iter()
        .filter(|h| h.send(Cmd::Write(Arc::clone(&frame))))
        .count();
    let mut failed = 0;
    for _ in 0..sent {
        match done.recv() {
            Ok(w) => failed += w.failed,
            Err(_) => break,
        }
    }
    (start.elapsed().as_secs_f64(), failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use throng_protocol::frame::{encode_frame, Opcode};

    #[test]
    fn scan_counts_whole_messages_and_keeps_a_partial_one() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, Opcode::Text, b"[null,\"1\"]", Some([1, 2, 3, 4]));
        encode_frame(&mut buf, Opcode::Ping, b"", Some([1, 2, 3, 4]));
        encode_frame(&mut buf, Opcode::Binary, &[7; 300], Some([1, 2, 3, 4]));
        let whole = buf.len();
        encode_frame(&mut buf, Opcode::Text, b"half", Some([1, 2, 3, 4]));
        let s = scan(&buf[..buf.len() - 2]);
        assert_eq!(
            s,
            Scan {
                consumed: whole,
                messages: 2,
                close: false
            }
        );
        let mut close = Vec::new();
        encode_frame(&mut close, Opcode::Close, &[3, 232], Some([1, 2, 3, 4]));
        assert!(scan(&close).close);
    }

    #[test]
    fn answers_each_message_and_writes_rounds() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (done_tx, done) = mpsc::channel();
        let h = Handle::spawn(Arc::from(&b"R"[..]), done_tx).unwrap();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        assert!(h.send(Cmd::Adopt(l.accept().unwrap().0)));
        // Two messages, the second split over two writes: two replies.
        let mut two = Vec::new();
        encode_frame(&mut two, Opcode::Text, b"hb", Some([9, 9, 9, 9]));
        encode_frame(&mut two, Opcode::Text, b"hb2", Some([9, 9, 9, 9]));
        c.write_all(&two[..10]).unwrap();
        let mut got = [0u8; 1];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"R");
        c.write_all(&two[10..]).unwrap();
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"R");
        let (secs, failed) = round(&[h], &done, b"frame");
        assert!(secs >= 0.0);
        assert_eq!(failed, 0);
        let mut f = [0u8; 5];
        c.read_exact(&mut f).unwrap();
        assert_eq!(&f, b"frame");
    }
}
