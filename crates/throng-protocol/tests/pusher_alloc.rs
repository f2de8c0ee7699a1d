//! The Pusher server frames allocate nothing beyond the caller's buffer:
//! into a buffer with room, encoding an event (once per broadcast), a
//! presence subscription's member list, `member_added`, `pusher:error` or
//! `connection_established` makes no allocation at all; and decoding a
//! client frame whose strings have no escapes allocates nothing either.
//! Counted per thread by a counting global allocator (this test binary's
//! only).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use throng_protocol::pusher::{client, server, Data};

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// Counts, then hands every call to the system allocator unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

#[test]
fn the_counter_counts() {
    assert_eq!(
        allocations(|| drop(std::hint::black_box(String::from("x")))),
        1
    );
    let mut small = Vec::with_capacity(8);
    assert!(
        allocations(|| server::ping(&mut small)) >= 1,
        "a full buffer grows"
    );
}

#[test]
fn server_frames_allocate_nothing_but_the_buffer() {
    let mut out = Vec::with_capacity(4096);
    let literal = r#""{\"text\":\"hi ü \\\"you\\\"\",\"n\":1}""#;
    let members = [("1", Some(r#"{"name":"Ann"}"#)), ("ü \"3\"", None)];
    let n = allocations(|| {
        server::event(
            &mut out,
            "new-message",
            "my-channel",
            Some(Data::Literal(literal)),
            None,
        );
        server::event(
            &mut out,
            "client-t",
            "presence-a",
            Some(Data::Text(r#"{"a":"\"b"}"#)),
            Some("u\"1"),
        );
        server::presence_subscription_succeeded(&mut out, "presence-a", members);
        server::member_added(&mut out, "presence-a", "u\"1", Some(r#"{"name":"A"}"#));
        server::member_removed(&mut out, "presence-a", "u\"1");
        server::error(&mut out, Some(4300), "bad \"frame\"");
        server::connection_established(&mut out, "123.456", 120);
        server::subscription_succeeded(&mut out, "my-channel");
    });
    assert!(
        out.len() > 500 && out.capacity() == 4096,
        "all in the buffer"
    );
    assert_eq!(n, 0, "allocations while encoding");
}

#[test]
fn client_frames_without_escapes_decode_without_allocating() {
    let frames: [&[u8]; 4] = [
        br#"{"event":"pusher:subscribe","data":{"auth":"k:5f","channel_data":"{}","channel":"presence-a"}}"#,
        br#"{"event":"client-typing","data":{"typing":true},"channel":"private-a"}"#,
        br#"{"event":"pusher:ping","data":{}}"#,
        br#"{"event":"pusher:unsubscribe","data":{"channel":"news"}}"#,
    ];
    for frame in frames {
        let mut decoded = None;
        let n = allocations(|| decoded = Some(client::decode(frame, 10 * 1024)));
        assert!(decoded.unwrap().is_ok());
        assert_eq!(n, 0, "{}", String::from_utf8_lossy(frame));
    }
}
