//! The control lane: the nodes' own messages to each other (the server's
//! cluster-wide questions and their answers, user disconnects,
//! revocations, forwarded long-poll requests), apart from the broadcast
//! lane. A control message is addressed to a node or to every node
//! ([`Route`]), never to a topic, so no client topic can collide with it
//! and no subscription decides whether it arrives. Its body is opaque to
//! the backplane: the server gives it its own typed, versioned encoding.
//!
//! A control message may also be **retained** ([`Backplane::retain_control`]):
//! sent to every node now and kept, under a key and until an expiry, for
//! nodes that attach later or come back after an outage (a revocation must
//! reach a node started tomorrow). A later message under the same key
//! replaces the earlier one. A node may get a retained message twice (live,
//! and again when it reconnects), so its body must say something that
//! bears repeating (a revocation does).
//!
//! On the wire (the Redis backplane) a control message is an envelope of
//! its own, big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version, [`CONTROL_VERSION`] (1) |
//! | 8 | sender node id |
//! | n | body (the rest) |
//!
//! A reader drops (and counts) another version or a truncated envelope.
//!
//! [`Backplane::retain_control`]: super::Backplane::retain_control

/// The control envelope version this build writes and reads.
pub const CONTROL_VERSION: u8 = 1;

/// Where a control message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// The node with this [`Backplane::node_id`](super::Backplane::node_id).
    Node(u64),
    /// Every other node of the cluster (never the sender).
    Cluster,
}

/// `body` from node `from`, as it travels.
pub fn encode(from: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + body.len());
    out.push(CONTROL_VERSION);
    out.extend_from_slice(&from.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The sender and the body of a control envelope, or why it is unreadable.
pub fn decode(bytes: &[u8]) -> Result<(u64, &[u8]), String> {
    match bytes.split_first() {
        Some((&CONTROL_VERSION, rest)) if rest.len() >= 8 => {
            let (id, body) = rest.split_at(8);
            let mut from = [0; 8];
            from.copy_from_slice(id);
            Ok((u64::from_be_bytes(from), body))
        }
        Some((&CONTROL_VERSION, _)) => Err("truncated control envelope".into()),
        Some((v, _)) => Err(format!(
            "control envelope version {v}, this node reads version {CONTROL_VERSION}"
        )),
        None => Err("empty control envelope".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_the_unreadable() {
        let e = encode(0x0102_0304_0506_0708, b"hi");
        assert_eq!(e[0], CONTROL_VERSION);
        assert_eq!(decode(&e), Ok((0x0102_0304_0506_0708, &b"hi"[..])));
        assert_eq!(decode(&encode(7, b"")), Ok((7, &b""[..])));
        assert!(decode(&[]).is_err());
        assert!(decode(&[CONTROL_VERSION, 1, 2]).is_err());
        assert!(decode(&[2, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
