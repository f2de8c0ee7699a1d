//! How a store carries presences between nodes: the message published on
//! a topic's presence channel, and the value of one presence in the
//! owner's hash. Fixed binary layouts, big-endian, versioned like the
//! backplane's [envelope](crate::backplane::envelope); a reader drops (and
//! counts) what it cannot read, and never panics.
//!
//! A presence's value (the hash field is its sequence number, 8 bytes):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | `prev`: the sequence it replaced, 0 if none |
//! | 4 + n | key length, key (UTF-8) |
//! | rest | the meta's fields, JSON text (see [`Meta::fields`]) |
//!
//! A message (the topic is the channel's):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version, [`VERSION`] (1) |
//! | 1 | kind: 1 changes, 2 the owner's whole set (replace) |
//! | 8 | owner |
//! | 4 | joins (or entries), then each: seq (8), value length (4), value |
//! | 4 | leaves, then each: seq (8), key length (4), key |

use std::sync::Arc;

use super::entry::Meta;
use super::Delta;
use crate::fields::{put, Reader, Truncated};

/// The version this build writes and reads.
pub const VERSION: u8 = 1;
const KIND_DELTA: u8 = 1;
const KIND_REPLACE: u8 = 2;

/// A decoded message.
#[derive(Debug, PartialEq, Eq)]
pub enum Message {
    /// An owner's changes (the delta's metas carry the owner).
    Delta(Delta),
    /// An owner's presences on the topic are exactly these.
    Replace {
        owner: u64,
        entries: Vec<(Arc<str>, Meta)>,
    },
}

/// Why bytes could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("presence message version {0}, this node reads version {VERSION}")]
    Version(u8),
    #[error("unknown presence message kind {0}")]
    Kind(u8),
    #[error("truncated presence message")]
    Truncated,
    #[error("a presence key or meta is not UTF-8")]
    Utf8,
    #[error("{0} bytes after a presence message")]
    Trailing(usize),
    /// A presence's meta that is not the members of a JSON object: it is
    /// written into every client's `presence_state` and `presence_diff` as
    /// it is, so it must be JSON there.
    #[error("a presence meta is not a JSON object's members")]
    Meta,
    #[error("a replace message with leaves")]
    ReplaceWithLeaves,
}

impl From<Truncated> for DecodeError {
    fn from(_: Truncated) -> DecodeError {
        DecodeError::Truncated
    }
}

/// The hash value of a presence.
pub fn value(key: &str, meta: &Meta) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + key.len() + meta.fields.len());
    put_value(&mut out, key, meta);
    out
}

fn put_value(out: &mut Vec<u8>, key: &str, meta: &Meta) {
    out.extend_from_slice(&meta.prev.to_be_bytes());
    put(out, key.as_bytes());
    out.extend_from_slice(meta.fields.as_bytes());
}

/// Reads a hash entry of `owner` back: the field (8-byte seq) and value.
pub fn read_value(owner: u64, field: &[u8], value: &[u8]) -> Result<(Arc<str>, Meta), DecodeError> {
    let seq = u64::from_be_bytes(field.try_into().map_err(|_| DecodeError::Truncated)?);
    let mut r = Reader::new(value);
    let prev = r.u64()?;
    let key = str(&mut r)?;
    let fields = std::str::from_utf8(r.rest()).map_err(|_| DecodeError::Utf8)?;
    if !fields.is_empty()
        && serde_json::from_str::<serde::de::IgnoredAny>(&format!("{{{fields}}}")).is_err()
    {
        return Err(DecodeError::Meta);
    }
    Ok((
        key.into(),
        Meta {
            owner,
            seq,
            prev,
            fields: fields.into(),
        },
    ))
}

/// The hash field of a presence: its sequence number.
pub fn field(meta: &Meta) -> [u8; 8] {
    meta.seq.to_be_bytes()
}

fn header(out: &mut Vec<u8>, kind: u8, owner: u64) {
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&owner.to_be_bytes());
}

fn put_joins(out: &mut Vec<u8>, joins: &[(Arc<str>, Meta)]) {
    out.extend_from_slice(&(joins.len() as u32).to_be_bytes());
    for (k, m) in joins {
        out.extend_from_slice(&m.seq.to_be_bytes());
        put(out, &value(k, m));
    }
}

/// `owner`'s changes.
pub fn delta(owner: u64, d: &Delta) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    header(&mut out, KIND_DELTA, owner);
    put_joins(&mut out, &d.joins);
    out.extend_from_slice(&(d.leaves.len() as u32).to_be_bytes());
    for (k, m) in &d.leaves {
        out.extend_from_slice(&m.seq.to_be_bytes());
        put(&mut out, k.as_bytes());
    }
    out
}

/// `owner`'s whole set on a topic.
pub fn replace(owner: u64, entries: &[(Arc<str>, Meta)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    header(&mut out, KIND_REPLACE, owner);
    put_joins(&mut out, entries);
    out.extend_from_slice(&0u32.to_be_bytes());
    out
}

/// Reads a message; checks every length against what is there.
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader::new(bytes);
    let version = r.u8()?;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let kind = r.u8()?;
    if kind != KIND_DELTA && kind != KIND_REPLACE {
        return Err(DecodeError::Kind(kind));
    }
    let owner = r.u64()?;
    let n = r.u32()?;
    let mut joins = Vec::with_capacity((n as usize).min(bytes.len() / 12));
    for _ in 0..n {
        let seq = r.u64()?;
        let v = r.field()?;
        joins.push(read_value(owner, &seq.to_be_bytes(), v)?);
    }
    let n = r.u32()?;
    if kind == KIND_REPLACE && n != 0 {
        return Err(DecodeError::ReplaceWithLeaves);
    }
    let mut leaves = Vec::with_capacity((n as usize).min(bytes.len() / 12));
    for _ in 0..n {
        let seq = r.u64()?;
        let key = str(&mut r)?;
        leaves.push((
            key.into(),
            Meta {
                owner,
                seq,
                prev: 0,
                fields: "".into(),
            },
        ));
    }
    if !r.rest().is_empty() {
        return Err(DecodeError::Trailing(r.rest().len()));
    }
    Ok(match kind {
        KIND_REPLACE => Message::Replace {
            owner,
            entries: joins,
        },
        _ => Message::Delta(Delta { joins, leaves }),
    })
}

/// A length-prefixed UTF-8 field.
fn str<'a>(r: &mut Reader<'a>) -> Result<&'a str, DecodeError> {
    std::str::from_utf8(r.field()?).map_err(|_| DecodeError::Utf8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn meta(owner: u64, seq: u64, prev: u64, fields: &str) -> Meta {
        Meta {
            owner,
            seq,
            prev,
            fields: fields.into(),
        }
    }

    #[test]
    fn round_trips_and_refuses() {
        let d = Delta {
            joins: vec![("alice".into(), meta(9, 2, 1, r#""a":1"#))],
            leaves: vec![("bob".into(), meta(9, 7, 0, ""))],
        };
        let bytes = delta(9, &d);
        assert_eq!(decode(&bytes), Ok(Message::Delta(d)));
        let entries = vec![("c".into(), meta(3, 1, 0, ""))];
        assert_eq!(
            decode(&replace(3, &entries)),
            Ok(Message::Replace { owner: 3, entries })
        );
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "{n}");
        }
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert_eq!(decode(&v2), Err(DecodeError::Version(2)));
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(DecodeError::Trailing(1)));
        let m = meta(4, 5, 3, r#""x":"y""#);
        assert_eq!(
            read_value(4, &field(&m), &value("k", &m)),
            Ok(("k".into(), m))
        );
    }

    /// What Redis hands a node must be what clients can read, and what
    /// the node would write back (the `redis_messages` fuzz target checks
    /// both): a meta that is no JSON, a replace with leaves it would drop.
    #[test]
    fn refuses_a_meta_that_is_not_json_and_a_replace_with_leaves() {
        let bad = meta(4, 5, 0, r#""x":"y"}],"a"#);
        assert_eq!(
            read_value(4, &field(&bad), &value("k", &bad)),
            Err(DecodeError::Meta)
        );
        let entries = vec![("c".into(), bad)];
        assert_eq!(decode(&replace(3, &entries)), Err(DecodeError::Meta));
        let good = vec![("c".into(), meta(3, 1, 0, r#""a":[1,{"b":2}]"#))];
        let mut with_leaves = replace(3, &good);
        let n = with_leaves.len();
        with_leaves[n - 4..].copy_from_slice(&1u32.to_be_bytes());
        with_leaves.extend_from_slice(&7u64.to_be_bytes());
        put(&mut with_leaves, b"bob");
        assert_eq!(decode(&with_leaves), Err(DecodeError::ReplaceWithLeaves));
        assert!(decode(&replace(3, &good)).is_ok());
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
            let mut v = bytes.clone();
            if v.len() > 1 { v[0] = VERSION; v[1] = KIND_DELTA; }
            let _ = decode(&v);
            let _ = read_value(1, &bytes[..bytes.len().min(8)], &bytes);
        }
    }
}
