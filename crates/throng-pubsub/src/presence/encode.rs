//! The JSON clients get: `presence_state` (`{key: {"metas": [...]}}`),
//! `presence_diff` (`{"joins": {...}, "leaves": {...}}`) and, for topics
//! that send counts only, `presence_count` (`{"count": N}`). Written by hand
//! into one buffer: a state is the largest message presence makes, encoded
//! once per interval, and this keeps it one pass with no value tree.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::entry::Meta;

/// The event a joiner gets in list mode, and its payload's shape.
pub const STATE: &str = "presence_state";
/// The event broadcast with each interval's joins and leaves (list mode).
pub const DIFF: &str = "presence_diff";
/// The event of count mode, pushed on join and broadcast when the count
/// changes. A name of its own: phoenix.js `Presence` would throw on a
/// `presence_diff` without `joins`/`leaves`.
pub const COUNT: &str = "presence_count";

fn key(out: &mut Vec<u8>, key: &str) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
}

fn group<'a>(out: &mut Vec<u8>, key_text: &str, metas: impl Iterator<Item = &'a Meta>) {
    key(out, key_text);
    out.extend_from_slice(b":{\"metas\":[");
    for (i, m) in metas.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        m.write_json(out);
    }
    out.extend_from_slice(b"]}");
}

/// `{key: {"metas": [...]}, ...}` for every key and its metas in `keys`
/// (`len` metas in all, to size the buffer); see `Flushed::state_json`.
pub fn state<'a>(keys: impl Iterator<Item = (&'a Arc<str>, &'a [Meta])>, len: usize) -> String {
    let mut out = Vec::with_capacity(16 + len * 48);
    out.push(b'{');
    for (i, (k, metas)) in keys.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        group(&mut out, k, metas.iter());
    }
    out.push(b'}');
    // Keys are valid UTF-8 (escaped by serde_json), metas are JSON text.
    String::from_utf8(out).unwrap_or_default()
}

fn grouped<'a>(out: &mut Vec<u8>, entries: impl Iterator<Item = &'a (Arc<str>, Meta)>) {
    let mut by_key: BTreeMap<&str, Vec<&Meta>> = BTreeMap::new();
    for (k, m) in entries {
        by_key.entry(k).or_default().push(m);
    }
    out.push(b'{');
    for (i, (k, metas)) in by_key.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut ordered = metas;
        ordered.sort_by_key(|m| m.id());
        group(out, k, ordered.into_iter());
    }
    out.push(b'}');
}

/// `{"joins": {...}, "leaves": {...}}`, keys in order (a diff is small).
pub fn diff<'a>(
    joins: impl Iterator<Item = &'a (Arc<str>, Meta)>,
    leaves: impl Iterator<Item = &'a (Arc<str>, Meta)>,
) -> String {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"joins\":");
    grouped(&mut out, joins);
    out.extend_from_slice(b",\"leaves\":");
    grouped(&mut out, leaves);
    out.push(b'}');
    String::from_utf8(out).unwrap_or_default()
}

/// `{"count": n}`.
pub fn count(n: usize) -> String {
    format!("{{\"count\":{n}}}")
}
