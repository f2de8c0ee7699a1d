//! The process's outbound memory is bounded (issue 12, item 9): with
//! `--max-outbound-total-bytes` far below what the per-connection bound
//! would allow for a few stalled readers, the readers that are behind are
//! cut with 1013 once the process holds more than the budget for its
//! clients, and a reader that keeps up gets every broadcast.

mod common;

use common::{small_buffer_socket, Client, End, Server};

#[test]
fn stalled_readers_are_cut_when_the_process_passes_its_outbound_budget() {
    const BUDGET: u64 = 2 << 20;
    let server = Server::start(&[
        "--shards",
        "1",
        "--max-outbound-total-bytes",
        &BUDGET.to_string(),
        "--max-outbound-bytes",
        "16777216",
        // The fast client pushes as fast as it reads: no push budget here.
        "--push-rate",
        "0",
    ]);
    // Readers that never read, each able to hold 16 MiB by itself.
    let mut stalled: Vec<Client> = (0..6)
        .map(|_| {
            let mut c = Client::over(small_buffer_socket(server.addr, 4096));
            c.join_lobby();
            c
        })
        .collect();
    let mut fast = Client::connect(server.addr);
    fast.join_lobby();
    let body = "x".repeat(30_000);
    let mut sent = 0;
    while server.metric("throng_websockets") > 1 {
        assert!(
            sent < 400,
            "stalled readers still connected after {sent} broadcasts"
        );
        fast.push(
            "rooms:lobby",
            "new:msg",
            &format!(r#"{{"user":"f","body":"{body}"}}"#),
        );
        sent += 1;
        // The reader that keeps up gets its broadcast and its reply every time.
        let (mut broadcasts, mut replies) = (0, 0);
        while broadcasts + replies < 2 {
            match fast.next_message().1.as_str() {
                "new:msg" => broadcasts += 1,
                "phx_reply" => replies += 1,
                _ => {}
            }
        }
        assert_eq!((broadcasts, replies), (1, 1));
    }
    assert_eq!(server.metric("throng_slow_reader_closes_total"), 0);
    assert_eq!(server.metric("throng_outbound_budget_closes_total"), 6);
    // 6 readers x 16 MiB were allowed each; the process held at most about
    // the budget (each broadcast is held once, however many queues share it).
    eprintln!("{sent} broadcasts of 30 KB before the 6 stalled readers were cut");
    assert!(sent * 30_000 * 3 <= BUDGET as usize * 2, "{sent}");
    let held = server.metric("throng_outbound_memory_bytes");
    assert!(held < BUDGET, "{held} bytes still held");
    // A stalled reader that reads now gets what was in flight, then 1013.
    assert_eq!(stalled[0].read_to_end(), End::Close(Some(1013)));
    stalled.clear();
    fast.push("phoenix", "heartbeat", "{}");
    assert_eq!(fast.next_message().1, "phx_reply");
}
