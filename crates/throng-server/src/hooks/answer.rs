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
        // What goes on to clients must be JSON every client reads: a raw
        // value is only scanned, so a number such as 1e999 (out of a
        // double's range: Go's and serde's readers refuse it) would pass.
        let passed_on = [
            ("reply", a.reply.as_deref()),
            ("error", a.error.as_deref()),
            ("assigns", a.assigns.as_deref()),
            (
                "broadcast.payload",
                a.broadcast.as_ref().and_then(|b| b.payload.as_deref()),
            ),
        ];
        for (name, v) in passed_on {
            if let Some(v) = v {
                if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(v.get())
                    .and_then(|_| serde_json::from_str::<serde_json::Value>(v.get()))
                {
                    return Err(format!("{name} is JSON that clients cannot read: {e}"));
                }
            }
        }
        Ok(a)
    }
}

/// A connect refusal's reason as a person reads it: of `{"error": E}` (or
/// a 401/403 body), E's `reason` when it is a string, E itself when it is
/// one, else E's JSON; a body that is no JSON, its text. At most
/// `crate::refusals::MAX_QUOTED` bytes (a reason is a sentence, not
/// a page), on one line.
pub fn reason_text(json_or_text: &[u8]) -> String {
    use serde_json::Value;
    let text = String::from_utf8_lossy(json_or_text);
    let said = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(mut o)) => {
            let inner = o.remove("error").unwrap_or(Value::Object(o));
            match inner {
                Value::String(s) => s,
                Value::Object(mut e) => match e.remove("reason") {
                    Some(Value::String(s)) => s,
                    _ if e.is_empty() => String::new(),
                    _ => Value::Object(e).to_string(),
                },
                Value::Null => String::new(),
                other => other.to_string(),
            }
        }
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => text.into_owned(),
    };
    let one_line: String = said
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    crate::refusals::quoted(&one_line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_clients_cannot_read_are_refused() {
        assert!(Answer::parse(br#"{"reply":{"n":1e999}}"#).is_err());
        assert!(Answer::parse(br#"{"broadcast":{"event":"e","payload":[-1e400]}}"#).is_err());
        assert!(Answer::parse(br#"{"reply":{"n":1e300}}"#).is_ok());
        // A field nobody reads may hold one (found by the hook_answer fuzz target).
        assert!(Answer::parse(br#"{"use-r":42555533333333333333e555}"#).is_ok());
    }

    #[test]
    fn reasons_read_as_sentences() {
        assert_eq!(
            reason_text(br#"{"error":{"reason":"not logged in"}}"#),
            "not logged in"
        );
        assert_eq!(reason_text(br#"{"error":"banned"}"#), "banned");
        assert_eq!(reason_text(br#"{"reason":"banned"}"#), "banned");
        assert_eq!(reason_text(br#"{"error":{"code":7}}"#), r#"{"code":7}"#);
        assert_eq!(reason_text(b"Forbidden\r\n\tgo away"), "Forbidden go away");
        assert_eq!(reason_text(b""), "");
        assert_eq!(reason_text(br#"{}"#), "");
        let long = format!(r#"{{"error":{{"reason":"{}"}}}}"#, "x".repeat(5000));
        assert!(reason_text(long.as_bytes()).len() <= crate::refusals::MAX_QUOTED + 3);
    }

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
