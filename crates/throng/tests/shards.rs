//! Shards past 64 (issue 12, item 2). The topic-to-shards map was a 64-bit
//! mask indexed `shard % 64` while up to 256 shards were allowed: shard 70
//! and shard 6 shared a bit, so when one of them lost its last subscriber
//! the other's subscribers silently stopped getting broadcasts (and shards
//! 64 and up only got broadcasts through their alias). Fixed by
//! `throng_pubsub::ShardSet`; this runs the real binary with 130 shards.

mod common;

use std::time::Duration;

use common::{Client, Server};

/// A fixed pseudo-random sequence (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn every_subscriber_on_130_shards_gets_broadcasts_as_others_leave() {
    const CLIENTS: usize = 650;
    let server = Server::start(&["--shards", "130", "--idle-timeout", "0"]);
    // ~5 per shard: SO_REUSEPORT spreads them over all 130 listeners, so
    // shards 64-129 and their aliases 0-65 all have subscribers.
    let mut clients: Vec<Option<Client>> = (0..CLIENTS)
        .map(|_| Some(Client::connect(server.addr)))
        .collect();
    for c in clients.iter_mut().flatten() {
        c.join_lobby();
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut left = CLIENTS;
    for round in 0..4 {
        // Some leave (a third of those left, chosen at random), emptying
        // some shards while their alias keeps subscribers.
        for _ in 0..left / 3 {
            let live: Vec<usize> = (0..CLIENTS).filter(|&i| clients[i].is_some()).collect();
            let i = live[(rng.next() % live.len() as u64) as usize];
            clients[i] = None;
            left -= 1;
        }
        server.await_metric("throng_channels_joined", 10, |v| v == left as u64);
        let body = format!("round {round}");
        let sender = clients.iter().position(Option::is_some).unwrap();
        clients[sender].as_mut().unwrap().push(
            "rooms:lobby",
            "new:msg",
            &format!(r#"{{"user":"u","body":"{body}"}}"#),
        );
        let mut missed = Vec::new();
        for (i, c) in clients.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            if !missed.is_empty() {
                // Everyone else has had it by now: do not wait long per miss.
                c.sock
                    .set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
            }
            loop {
                let Some((_, data)) = c.next_frame() else {
                    missed.push(i);
                    break;
                };
                let text = String::from_utf8_lossy(&data);
                if text.contains("new:msg") && text.contains(&body) {
                    break;
                }
            }
        }
        assert!(
            missed.is_empty(),
            "round {round}: {} of {left} subscribers missed the broadcast: {missed:?}",
            missed.len()
        );
    }
}
