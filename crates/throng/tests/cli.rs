//! What a new user meets first on the command line (issue 27, items 6, 7
//! and 13): `serve --help` grouped under headings with one help per flag,
//! clear errors for negative numbers and a Redis address without its
//! scheme, `--bind` taking a host name, and a start-up that prints the page
//! to open with no Rust debug formatting in the log; and (issue 21, item 4)
//! the flag and limit tables of `docs/configuration.md` list exactly the
//! flags `serve --help` lists.

mod common;

use std::process::{Command, Stdio};

use common::throng_bin;

fn throng(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(throng_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run throng");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn serve_help_is_grouped_and_each_flag_has_its_own_text() {
    let (ok, help, _) = throng(&["serve", "--help"]);
    assert!(ok);
    for heading in [
        "Listening:",
        "Connections and messages:",
        "Limits:",
        "Cluster (Redis):",
        "Presence:",
        "Authentication:",
        "Server API:",
        "App backend hooks:",
    ] {
        assert!(help.contains(heading), "no heading {heading}");
    }
    // Every flag sits under a heading of its own group, none under clap's
    // catch-all "Options:" (which keeps only --help).
    let ungrouped: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Options:")
        .skip(1)
        .take_while(|l| l.starts_with(' ') || l.is_empty())
        .filter(|l| l.trim_start().starts_with("--") && !l.contains("--help"))
        .collect();
    assert!(
        ungrouped.is_empty(),
        "flags without a heading: {ungrouped:?}"
    );
    // One help text per flag: the first line under each flag, all different.
    let lines: Vec<&str> = help.lines().collect();
    let mut texts = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("--") && i + 1 < lines.len() {
            texts.push(lines[i + 1].trim());
        }
    }
    let mut unique = texts.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), texts.len(), "a help text is repeated");
    assert!(!help.contains("Serve a WebSocket echo endpoint at /echo\n"));
    assert!(
        help.contains("[auth] table"),
        "--config names the [auth] table"
    );
}

#[test]
fn bad_values_get_clear_errors() {
    let (ok, _, err) = throng(&["serve", "--idle-timeout", "-5"]);
    assert!(!ok);
    assert!(
        err.contains("'-5'") && err.contains("must be 0 or more"),
        "{err}"
    );
    let (ok, _, err) = throng(&["serve", "--port", "0", "--redis", "127.0.0.1:6379"]);
    assert!(!ok);
    assert!(err.contains("redis://127.0.0.1:6379"), "{err}");
    assert_eq!(err.matches("error").count(), 1, "printed once: {err}");
}

#[test]
fn bind_takes_a_host_name_and_start_up_prints_a_url() {
    use std::io::{BufRead, BufReader, Read};
    let mut child = Command::new(throng_bin())
        .args(["serve", "--bind", "localhost", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start throng");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening on ").map(str::to_string))
        .expect("a listening line");
    let addr: std::net::SocketAddr = listening.parse().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    let open = lines.next().expect("a line after listening").unwrap();
    let url = format!("http://{addr}/");
    assert!(open.starts_with(&format!("open {url} ")), "{open}");
    #[allow(unsafe_code)]
    // SAFETY: kill(2) on the child this test started and has not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        log.contains("api=") && !log.contains("Some("),
        "debug formatting: {log}"
    );
}

/// The flags in `serve --help` (a line starting `--name`, or `-x, --name`),
/// without `--help` and `--version`.
fn help_flags() -> std::collections::BTreeSet<String> {
    let (ok, help, _) = throng(&["serve", "--help"]);
    assert!(ok);
    help.lines()
        .map(str::trim_start)
        .filter_map(|l| {
            let long = match l.split_once(", --") {
                Some((short, rest)) if short.starts_with('-') && !short.starts_with("--") => rest,
                _ => l.strip_prefix("--")?,
            };
            let name: String = long
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            Some(format!("--{name}"))
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// The flags a docs table's rows start with (the first cell, backquoted),
/// and every backquoted flag of the "the bounds" row, between `start` and
/// the next `## ` heading.
fn docs_table_flags(doc: &str, start: &str) -> std::collections::BTreeSet<String> {
    let section = doc
        .split_once(start)
        .unwrap_or_else(|| panic!("docs/configuration.md has no {start:?}"))
        .1;
    let section = section.split("\n## ").next().unwrap();
    let mut flags = std::collections::BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let first = row.split('|').nth(1).unwrap_or("");
        let cells = if first.trim() == "the bounds" {
            row
        } else {
            first
        };
        for quoted in cells.split('`').skip(1).step_by(2) {
            if let Some(name) = quoted.strip_prefix("--") {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                flags.insert(format!("--{name}"));
            }
        }
    }
    flags
}

/// The flag and limit tables of `docs/configuration.md` ("Every flag",
/// "Limits and defaults") list exactly the flags `serve --help` lists: a
/// new flag without a row, or a row for a flag that is gone, fails here
/// (issue 21, item 4; the tables moved from the README, issue 38).
#[test]
fn readme_tables_list_exactly_the_serve_flags() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let doc = std::fs::read_to_string(path).expect("read docs/configuration.md");
    let help = help_flags();
    assert!(help.len() > 40, "too few flags read from --help: {help:?}");
    let mut listed = docs_table_flags(&doc, "\n## Every flag\n");
    listed.extend(docs_table_flags(&doc, "\n## Limits and defaults\n"));
    let missing: Vec<_> = help.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&help).collect();
    assert!(
        missing.is_empty(),
        "flags of serve --help without a row in docs/configuration.md (Every flag, or Limits and defaults): {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/configuration.md's tables list flags serve --help does not: {stale:?}"
    );
}
