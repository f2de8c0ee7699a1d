//! Every refusal says why where the user looks (issue 38, item 3): a
//! refused join is logged at info with its topic, what refused it (the
//! rule, the channel, the limit) and the fix, one line per reason a second
//! with a count of the rest, so a client refused thousands of times a
//! second makes a few lines; rules over the chat channel's topics open
//! them (and `check-config` says how those topics differ).

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Client, Server};

/// The server's stderr, line by line, as it comes.
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn of(server: &mut Server) -> Log {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let err = server.child.stderr.take().expect("stderr piped");
        let into = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                into.lock().unwrap().push(line);
            }
        });
        Log(lines)
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Waits (10 s at most) for a line containing every one of `parts`.
    fn line_with(&self, parts: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self
                .lines()
                .into_iter()
                .find(|l| parts.iter().all(|p| l.contains(p)));
            if let Some(line) = found {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no line with {parts:?} in:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("throng-refusals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Joins `topic` and returns the reply's payload.
fn join(c: &mut Client, topic: &str) -> String {
    c.push(topic, "phx_join", "{}");
    loop {
        let (t, event, payload) = c.next_message();
        if t == topic && event == "phx_reply" {
            return payload;
        }
    }
}

const RULES: &str = r#"
[[topics]]
pattern = "admin:*"
join = "nobody"
[[topics]]
pattern = "private:{user}"
join = "users"
[[topics]]
pattern = "rooms:*"
join = "anyone"
push = ["typing"]
"#;

#[test]
fn each_refused_join_is_logged_with_its_rule_and_fix() {
    let path = config("rules.toml", RULES);
    let mut server = Server::start_with(
        &[
            "--config",
            path.to_str().unwrap(),
            "--max-channels-per-socket",
            "2",
        ],
        Stdio::piped(),
    );
    let log = Log::of(&mut server);
    let mut c = Client::connect(server.addr);

    assert!(join(&mut c, "nowhere:1").contains("unmatched topic"));
    let line = log.line_with(&["join refused", "\"nowhere:1\""]);
    assert!(line.contains(" INFO "), "{line}");
    assert!(line.contains("no channel serves it"), "{line}");
    assert!(line.contains("add a [[topics]] rule"), "{line}");

    assert!(join(&mut c, "admin:x").contains("unauthorized"));
    let line = log.line_with(&["join refused", "\"admin:x\""]);
    assert!(
        line.contains(r#"[[topics]] pattern = "admin:*" has join = "nobody""#),
        "{line}"
    );

    // The chat channel's topics open under a rule that admits them (the
    // chat channel takes only rooms:lobby without rules).
    assert!(join(&mut c, "rooms:general").contains(r#""status":"ok""#));
    assert!(join(&mut c, "rooms:other").contains(r#""status":"ok""#));
    assert!(join(&mut c, "rooms:third").contains("too many channels joined"));
    let line = log.line_with(&["join refused", "\"rooms:third\""]);
    assert!(
        line.contains("--max-channels-per-socket allows (2)"),
        "{line}"
    );
    assert!(line.contains("raise --max-channels-per-socket"), "{line}");
}

#[test]
fn a_client_refused_thousands_of_times_makes_a_few_lines() {
    let path = config("flood.toml", RULES);
    // No control budget: every join reaches the rules.
    let args = ["--config", path.to_str().unwrap(), "--control-rate", "0"];
    let mut server = Server::start_with(&args, Stdio::piped());
    let log = Log::of(&mut server);
    let mut c = Client::connect(server.addr);
    let started = Instant::now();
    let mut refused = 0u64;
    // Refused joins until the second line of their reason, which counts
    // those in between (one line a second), for 10 s at most.
    let counted = loop {
        for _ in 0..200 {
            assert!(join(&mut c, "admin:x").contains("unauthorized"));
            refused += 1;
        }
        let lines = log.lines();
        if let Some(l) = lines.iter().find(|l| l.contains("more refused for this")) {
            break l.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no second line after {refused} refusals:\n{}",
            lines.join("\n")
        );
    };
    let elapsed = started.elapsed().as_secs();
    let lines = log
        .lines()
        .into_iter()
        .filter(|l| l.contains("\"admin:x\""))
        .count() as u64;
    eprintln!("{refused} refused joins in {elapsed} s: {lines} log lines; the second: {counted}");
    assert!(
        lines >= 2 && lines <= elapsed + 2,
        "{lines} lines in {elapsed} s"
    );
    let more: u64 = counted
        .split(" more refused for this")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in {counted}"));
    assert!(
        more >= 1 && more < refused,
        "{more} of {refused}: {counted}"
    );
    assert!(counted.contains("one line per 1 s"), "{counted}");
    assert!(refused > 100 * lines, "{refused} refusals, {lines} lines");
}

#[test]
fn without_rules_the_chat_channel_names_itself_when_it_refuses() {
    let mut server = Server::start_with(&[], Stdio::piped());
    let log = Log::of(&mut server);
    let mut c = Client::connect(server.addr);
    assert!(join(&mut c, "rooms:secret").contains("unauthorized"));
    let line = log.line_with(&["join refused", "\"rooms:secret\""]);
    assert!(
        line.contains(r#"the channel serving "rooms:*" refused it"#),
        "{line}"
    );
    assert!(line.contains("rooms:lobby only"), "{line}");
}
