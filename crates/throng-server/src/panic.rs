//! What a panic does: it ends the process.
//!
//! A shard thread that panics would otherwise die alone and leave a
//! half-alive process: its connections unanswered but open, its
//! subscriptions still counted in the node's topic set (so the node keeps
//! its Redis subscriptions for subscribers that no longer get anything),
//! and nothing to tell a supervisor. Aborting instead lets the supervisor
//! (`serve --workers`), systemd or the container runtime start a clean
//! process, and every client of the dead one reconnects. The hook runs
//! before any unwinding, so this holds in every build profile.
//!
//! Never panicking on peer input is the first defence; this is the second.

/// Makes any panic, on any thread, log its message and abort the process.
pub fn abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            "a thread panicked: aborting the process so that it is restarted clean \
             (a supervisor restarts a worker; run a single process under systemd or similar)"
        );
        std::process::abort();
    }));
}

/// Test only (the `test-hooks` feature, and the hidden
/// `--test-panic-message`): a panic on a shard thread when an /echo
/// message equals the text, to test that a panic ends the process.
#[cfg(feature = "test-hooks")]
pub(crate) fn test_panic(node: &crate::Node, data: &[u8]) {
    if let Some(m) = &node.config.limits.test_panic_message {
        if m.as_bytes() == data {
            panic!("--test-panic-message received on /echo");
        }
    }
}
