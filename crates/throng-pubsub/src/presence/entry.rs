//! [`Meta`]: one presence of a key, as a node keeps it and as clients see
//! it (`{...meta, "phx_ref": ..., "phx_ref_prev": ...}`), and its `phx_ref`.
//!
//! A presence is named by its owner (the node that tracked it) and a
//! sequence number the owner gave it; the pair is unique in the cluster and
//! is never reused, which is what makes replaying a change harmless (a
//! join of a presence already there, or a leave of one already gone, does
//! nothing). Clients see the pair as the opaque `phx_ref`: the owner's 8
//! bytes and the sequence's (at least 4, big-endian) in URL-safe base64,
//! 16 characters for the first 4 billion tracks of a node, like Phoenix's
//! 16-character refs (`Phoenix.Tracker.Shard.random_ref/0`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// A presence's name: (owner node, sequence number).
pub type Ref = (u64, u64);

/// One presence of a key: its name, the presence it replaced (an update),
/// and the app's meta.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The node that tracked it (it alone may change or remove it).
    pub owner: u64,
    /// The owner's number for it, from 1.
    pub seq: u64,
    /// The `seq` of the presence this one replaced (`phx_ref_prev`), 0 if none.
    pub prev: u64,
    /// The members of the meta object as JSON text, without the braces
    /// (`""` for `{}`): spliced into `{...,"phx_ref":..}` when encoded.
    pub fields: Box<str>,
}

impl Meta {
    /// Its name.
    pub fn id(&self) -> Ref {
        (self.owner, self.seq)
    }

    /// Writes the meta as clients see it: the app's fields, then `phx_ref`
    /// (and `phx_ref_prev`) last, so that they win over app fields of the
    /// same name as Phoenix's `Map.put` does.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        if !self.fields.is_empty() {
            out.extend_from_slice(self.fields.as_bytes());
            out.push(b',');
        }
        out.extend_from_slice(b"\"phx_ref\":\"");
        write_ref(out, self.owner, self.seq);
        out.push(b'"');
        if self.prev != 0 {
            out.extend_from_slice(b",\"phx_ref_prev\":\"");
            write_ref(out, self.owner, self.prev);
            out.push(b'"');
        }
        out.push(b'}');
    }
}

/// Appends the `phx_ref` of (`owner`, `seq`).
pub fn write_ref(out: &mut Vec<u8>, owner: u64, seq: u64) {
    // The sequence's leading zero bytes are left out, keeping at least 4.
    let skip = (seq.leading_zeros() / 8).min(4) as usize;
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&owner.to_be_bytes());
    let len = 16 - skip;
    raw[8..len].copy_from_slice(&seq.to_be_bytes()[skip..]);
    let mut text = [0u8; 24];
    if let Ok(n) = URL_SAFE_NO_PAD.encode_slice(&raw[..len], &mut text) {
        out.extend_from_slice(&text[..n]);
    }
}

/// The `phx_ref` of (`owner`, `seq`) as a string.
pub fn phx_ref(owner: u64, seq: u64) -> String {
    let mut out = Vec::with_capacity(22);
    write_ref(&mut out, owner, seq);
    String::from_utf8(out).unwrap_or_default()
}

/// Why a meta was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("a presence meta must be a JSON object")]
    NotAnObject,
}

/// The fields of a meta given as JSON text: it must be an object; its
/// members are kept as written, without the braces.
pub fn meta_fields(json: &str) -> Result<Box<str>, MetaError> {
    let trimmed = json.trim();
    if !trimmed.starts_with('{')
        || serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(trimmed).is_err()
    {
        return Err(MetaError::NotAnObject);
    }
    // An object's text starts with '{' and ends with '}' (whitespace trimmed).
    Ok(trimmed[1..trimmed.len() - 1].trim().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_opaque_unique_and_short() {
        let a = phx_ref(0x0102030405060708, 1);
        assert_eq!(a.len(), 16, "{a}");
        assert_ne!(a, phx_ref(0x0102030405060708, 2));
        assert_ne!(a, phx_ref(0x0102030405060709, 1));
        assert_eq!(phx_ref(1, u64::MAX).len(), 22);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }

    #[test]
    fn meta_json_puts_phx_ref_last() {
        let m = Meta {
            owner: 7,
            seq: 2,
            prev: 1,
            fields: meta_fields(r#" { "status": "away", "phx_ref": "mine" } "#).unwrap(),
        };
        let mut out = Vec::new();
        m.write_json(&mut out);
        let text = String::from_utf8(out).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "away");
        assert_eq!(v["phx_ref"], phx_ref(7, 2), "ours wins: {text}");
        assert_eq!(v["phx_ref_prev"], phx_ref(7, 1));
        let empty = Meta {
            owner: 7,
            seq: 3,
            prev: 0,
            fields: meta_fields("{}").unwrap(),
        };
        let mut out = Vec::new();
        empty.write_json(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(r#"{{"phx_ref":"{}"}}"#, phx_ref(7, 3))
        );
        assert_eq!(meta_fields("[1]"), Err(MetaError::NotAnObject));
        assert_eq!(meta_fields("{"), Err(MetaError::NotAnObject));
        assert_eq!(meta_fields("\"x\""), Err(MetaError::NotAnObject));
    }
}
