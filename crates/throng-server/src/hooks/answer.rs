//! The backend's answers to join and push, checked off the event loop (on
//! the hook thread) so a shard only applies them.
//!
//! - join: `{"reply": any, "assigns": {...}}` joins, `{"error": any}` refuses;
//! - push: `{"reply": any}` answers, with an optional
//!   `"broadcast": {"event", "payload", "exclude_sender"}`; `{"error": any}`
//!   answers with an error reply.
//!
//! A missing or null `reply` is `{}`. Other fields are ignored (room to
//! grow); a field of the wrong type makes a bad answer.

use serde::Deserialize;
use serde_json::value::RawValue;

/// A 2xx answer, parsed.
#[derive(Debug, Deserialize)]
pub struct Answer {
    #[serde(default)]
    pub reply: Option<Box<RawValue>>,
    #[serde(default)]
    pub error: Option<Box<RawValue>>,
    /// Kept with the join and sent with its pushes: an object.
    #[serde(default)]
    pub assigns: Option<Box<RawValue>>,
    #[serde(default)]
    pub broadcast: Option<BroadcastAnswer>,
    /// A connect answer's user id: a string or a number (`null`: anonymous).
    #[serde(default)]
    pub user: Option<UserId>,
}

/// A user id as a backend may write it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum UserId {
    Text(String),
    Number(serde_json::Number),
}

impl UserId {
    pub fn into_string(self) -> String {
        match self {
            UserId::Text(s) => s,
            UserId::Number(n) => n.to_string(),
        }
    }
}

/// A push answer's broadcast to the topic, cluster-wide.
#[derive(Debug, Deserialize)]
pub struct BroadcastAnswer {
    pub event: String,
    #[serde(default)]
    pub payload: Option<Box<RawValue>>,
    /// Not to the socket that pushed (Phoenix's `broadcast_from!/3`).
    #[serde(default)]
    pub exclude_sender: bool,
}

impl Answer {
    /// Parses and checks a body; `Err` names what was wrong, for the log.
    pub fn parse(body: &[u8]) -> Result<Answer, String> {
        // serde would read a struct from an array too: only an object is one.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err("not a JSON object".into());
        }
        // UTF-8 throughout: serde_json checks it only where it reads, not
        // in the fields it skips.
        let text = std::str::from_utf8(body).map_err(|_| "not UTF-8".to_string())?;
        let a: Answer = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let is_object = |v: &RawValue| v.get().trim_start().starts_with('{');
        if a.assigns.as_deref().is_some_and(|v| !is_object(v)) {
            return Err("assigns is not an object".into());
        }
        if let Some(b) = &a.broadcast {
            if b.event.is_empty() {
                return Err("broadcast.event is empty".into());
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let a = Answer::parse(br#"{"reply":{"n":1},"assigns":{"u":2}}"#).unwrap();
        assert_eq!(a.reply.unwrap().get(), r#"{"n":1}"#);
        assert!(a.error.is_none());
        let a = Answer::parse(br#"{"error":{"reason":"banned"}}"#).unwrap();
        assert!(a.error.is_some());
        let a = Answer::parse(
            br#"{"reply":null,"broadcast":{"event":"new:msg","payload":{"b":1},"exclude_sender":true}}"#,
        )
        .unwrap();
        assert!(a.reply.is_none() && a.broadcast.unwrap().exclude_sender);
        for bad in [
            &b"not json"[..],
            b"[1]",
            b"\"ok\"",
            br#"{"assigns":[1]}"#,
            br#"{"broadcast":{"payload":{}}}"#,
            br#"{"broadcast":{"event":""}}"#,
            // Found by the `hook_answer` fuzz target: invalid UTF-8 in a
            // field the answer does not read was accepted.
            b"{\"reply\":null,\"other\":{\"pa\x82load\":1}}",
        ] {
            assert!(
                Answer::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
