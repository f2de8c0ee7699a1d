//! Target `inflate`: permessage-deflate's inflating side as a shard runs
//! it (`engine/shard/inflate.rs`): one `Inflater` and one output buffer
//! for every message, reset per message, each bounded by
//! `--max-message-bytes`; and the extension's negotiation
//! (`deflate::negotiate`), which reads the client's header.
//!
//! Input: records `[bound] [len u16] [len bytes]`, one compressed message
//! each; bound picks the message limit. The first record's data is also
//! read as a `Sec-WebSocket-Extensions` value.
//!
//! Asserts, beside no panic:
//! - bounded memory: a message inflates to at most its bound, and the
//!   buffer grows for it to at most about twice the bound plus one step,
//!   whatever the data claims (a decompression bomb stops at the bound);
//! - a message inflates (or fails) the same with the shard's reused
//!   inflater as with a fresh one, and to the same bytes as an unbounded
//!   inflate when it fits: no state leaks from one message to the next;
//! - what the inflater gives back, compressed again, inflates to itself;
//! - an agreement, written as the server's answer and read again as an
//!   offer, is the same agreement.

use throng_protocol::deflate::{compress_always, inflate_once, negotiate, InflateError, Inflater};

/// The message limits a record picks from (the smallest the server takes,
/// the default, more).
const BOUNDS: [usize; 4] = [125, 4096, 65_536, 1 << 20];

/// Feeds `data` as compressed messages; panics if an invariant breaks.
pub fn inflate(data: &[u8]) {
    if let Some(offer) = data.get(3..).and_then(|d| std::str::from_utf8(d).ok()) {
        if let Some(agreed) = negotiate([offer]) {
            let answer = agreed.response();
            assert_eq!(negotiate([answer.as_str()]), Some(agreed), "{answer}");
        }
    }
    let mut inflater = Inflater::default();
    let mut out = Vec::new();
    let mut rest = data;
    while let [bound, hi, lo, tail @ ..] = rest {
        let n = (usize::from(*hi) << 8 | usize::from(*lo)).min(tail.len());
        let (message, next) = tail.split_at(n);
        rest = next;
        let max = BOUNDS[usize::from(bound & 3)];
        let before = out.capacity();
        let got = inflater.inflate(message, max, &mut out);
        assert!(out.len() <= max + 1, "{} inflated past {max}", out.len());
        // The buffer grows for this message to about twice its bound at
        // most (it may hold more, kept from an earlier message).
        let held = out.capacity();
        let grown = 2 * (max + 1) + 16 * 1024;
        assert!(held <= before.max(grown), "{held} bytes held for {max}");
        let fresh = inflate_once(message, max);
        match (&got, &fresh) {
            (Ok(()), Ok(f)) => assert_eq!(&out, f, "a reused inflater differs"),
            (Err(a), Err(b)) => assert_eq!(a, b),
            _ => panic!("reused {got:?}, fresh {fresh:?}"),
        }
        check_unbounded(message, max, &got, &out);
        if got.is_ok() {
            let mut again = Vec::new();
            if compress_always(&out, 15, &mut again) {
                assert_eq!(inflate_once(&again, max).as_ref(), Ok(&out));
            }
        }
        // The shard's buffer after a message: kept up to 256 KiB
        // (`KEEP`, `engine/conns/deflate.rs`), larger ones freed.
        out.clear();
        if out.capacity() > 256 << 10 {
            out = Vec::new();
        }
    }
}

/// The bound changes where inflating stops, not what it gives: with room
/// to spare, the same bytes; past it, too big.
fn check_unbounded(message: &[u8], max: usize, got: &Result<(), InflateError>, out: &[u8]) {
    let Ok(all) = inflate_once(message, 2 << 20) else {
        return;
    };
    if all.len() <= max {
        assert_eq!(got.as_ref(), Ok(&()), "fits in {max}, yet {got:?}");
        assert_eq!(out, &all[..]);
    } else {
        assert_eq!(
            got.as_ref(),
            Err(&InflateError::TooBig),
            "{} past {max}",
            all.len()
        );
    }
}
