//! A socket's memory is bounded (issue 12, item 4): a fragmented message
//! and a half-received frame count together against the message limit, a
//! join_ref or ref over `--max-ref-bytes` closes the socket with 1008, and
//! what joins store counts against `--max-socket-bytes`. Sockets trying to
//! pin megabytes are closed, and the server's memory comes back.

mod common;

use std::time::{Duration, Instant};

use common::{Client, End, Server};
use throng_protocol::frame::Opcode;

const HOSTILE: usize = 20;

/// A continuation frame's masked header for a `len`-byte payload, and
/// the first `part` bytes of that payload: the frame is left half-sent.
fn half_continuation(len: usize, part: usize) -> Vec<u8> {
    let mut out = Vec::new();
    throng_protocol::frame::encode_frame(
        &mut out,
        Opcode::Continuation,
        &vec![b'x'; len],
        Some([1, 2, 3, 4]),
    );
    out.truncate(out.len() - len + part);
    out
}

#[test]
fn sockets_pinning_megabytes_are_closed_and_memory_returns() {
    // 1 MiB messages allowed, so each socket could pin megabytes before.
    let server = Server::start(&["--max-message-bytes", "1048576", "--shards", "2"]);
    let mut normal = Client::connect(server.addr);
    normal.join_lobby();
    let before = server.metric("throng_process_resident_memory_bytes");

    let mut hostile = Vec::new();
    for i in 0..HOSTILE {
        let mut c = Client::connect(server.addr);
        if i % 2 == 0 {
            // A join whose join_ref is 900 KB: stored for the channel's life.
            let join_ref = "r".repeat(900_000);
            c.send_text(&format!(
                r#"["{join_ref}","1","rooms:lobby","phx_join",{{}}]"#
            ));
        } else {
            // 800 KB kept as a fragment, then a continuation announcing
            // 800 KB more, of which 300 KB arrive.
            c.send_frame(Opcode::Text, false, &vec![b'['; 800_000]);
            use std::io::Write;
            c.sock
                .write_all(&half_continuation(800_000, 300_000))
                .unwrap();
        }
        hostile.push(c);
    }
    // Once the server has read it all (or closed the sockets that sent it):
    let sent = (HOSTILE as u64 / 2) * (900_000 + 1_100_000);
    let read = server.await_metric("throng_bytes_in_total", 10, |v| {
        v >= sent || server.metric("throng_websockets") == 1
    });
    let peak = server.metric("throng_process_resident_memory_bytes");
    eprintln!(
        "RSS {} KiB before, {} KiB once the server had read {} KB from {HOSTILE} hostile sockets",
        before >> 10,
        peak >> 10,
        read / 1000
    );
    for (i, c) in hostile.iter_mut().enumerate() {
        let want = if i % 2 == 0 { 1008 } else { 1009 };
        assert_eq!(
            c.read_to_end(),
            End::Close(Some(want)),
            "hostile socket {i}"
        );
    }
    server.await_metric("throng_websockets", 10, |v| v == 1);
    // Memory comes back once they are gone (allowing the allocator a
    // moment); the hostile sockets sent 34 MB in all.
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let rss = server.metric("throng_process_resident_memory_bytes");
        if rss <= before + (4 << 20) || Instant::now() > deadline {
            break rss;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("RSS {} KiB after they were closed", after >> 10);
    assert!(
        after <= before + (4 << 20),
        "RSS {} KiB after, {} KiB before",
        after >> 10,
        before >> 10
    );
    assert_eq!(
        server.metric("throng_ref_too_long_closes_total"),
        HOSTILE as u64 / 2
    );
    // Everyone else was served throughout.
    normal.push("phoenix", "heartbeat", "{}");
    assert_eq!(normal.next_message().1, "phx_reply");
}

#[test]
fn joins_past_the_socket_budget_are_refused_with_a_reply() {
    // The budget leaves 1,500 bytes for joins beyond a message in progress
    // (128,000 bytes and 155 of frame headers): a 2,000-byte join_ref
    // passes the ref bound (raised here) but does not fit.
    let server = Server::start(&[
        "--max-message-bytes",
        "128000",
        "--max-socket-bytes",
        "129655",
        "--max-ref-bytes",
        "4096",
    ]);
    let mut c = Client::connect(server.addr);
    let join_ref = "r".repeat(2000);
    c.send_text(&format!(
        r#"["{join_ref}","1","rooms:lobby","phx_join",{{}}]"#
    ));
    let (_, event, payload) = c.next_message();
    assert_eq!(event, "phx_reply");
    assert!(
        payload.contains(r#""reason":"socket memory budget exceeded""#),
        "{payload}"
    );
    // A short one is fine.
    c.join_lobby();
    assert_eq!(server.metric("throng_socket_budget_refusals_total"), 1);
}
