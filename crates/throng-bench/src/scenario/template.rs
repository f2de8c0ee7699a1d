//! Message templates: a message's text split once, at compile time, into
//! literal pieces and `%%name%%` substitutions, so that rendering one per
//! send is a few copies and number writes; and the broadcast stamp
//! (`%%stamp%%`) that receivers find in a payload and time.

use crate::error::BenchError;

/// The marker a `%%stamp%%` expands to: `throng:<user>:<ref>:<realtime ns>`.
pub const STAMP_PREFIX: &str = "throng:";

/// One piece of a message template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Lit(Box<str>),
    /// `%%user_id%%`, `%%ts_user_server:get_unique_id%%`: the user's unique id (1-based).
    UserId,
    /// `%%now_ns%%`: CLOCK_REALTIME nanoseconds.
    NowNs,
    /// `%%ref%%`: this message's ref.
    Ref,
    /// `%%join_ref%%`: the ref of the connection's last join.
    JoinRef,
    /// `%%stamp%%`: `throng:<user>:<ref>:<now_ns>`, a broadcast receivers time.
    Stamp,
    /// `%%auth%%`: a Pusher private channel's signature for this socket
    /// (`KEY:HMAC`), computed as the op is sent.
    Auth,
}

/// A message with its substitutions, split once at compile time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub segs: Vec<Seg>,
}

/// What a template needs at render time.
pub struct Vars<'a> {
    pub user_id: u64,
    pub msg_ref: u32,
    pub join_ref: u32,
    pub now_ns: u64,
    /// `%%auth%%`'s text (empty when the template has none).
    pub auth: &'a str,
}

impl Template {
    /// Splits `%%name%%` substitutions out of `text`.
    pub fn parse(text: &str) -> Result<Template, BenchError> {
        let mut segs = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find("%%") {
            let Some(j) = rest[i + 2..].find("%%") else {
                break;
            };
            let name = &rest[i + 2..i + 2 + j];
            let seg = match name {
                "user_id" | "ts_user_server:get_unique_id" | "unique_id" => Seg::UserId,
                "now_ns" => Seg::NowNs,
                "ref" => Seg::Ref,
                "join_ref" => Seg::JoinRef,
                "stamp" => Seg::Stamp,
                "auth" => Seg::Auth,
                other => {
                    return Err(BenchError::Scenario(format!(
                        "unknown substitution %%{other}%% (known: user_id, ts_user_server:get_unique_id, now_ns, ref, join_ref, stamp, auth)"
                    )))
                }
            };
            if i > 0 {
                segs.push(Seg::Lit(rest[..i].into()));
            }
            segs.push(seg);
            rest = &rest[i + 2 + j + 2..];
        }
        if !rest.is_empty() {
            segs.push(Seg::Lit(rest.into()));
        }
        Ok(Template { segs })
    }

    /// Whether rendering it produces a broadcast stamp.
    pub fn has_stamp(&self) -> bool {
        self.segs.contains(&Seg::Stamp)
    }

    /// Appends the rendered text to `out`.
    pub fn render(&self, out: &mut Vec<u8>, v: &Vars) {
        let num = |out: &mut Vec<u8>, n: u64| {
            let mut b = itoa_buf(n);
            out.extend_from_slice(b.as_bytes_mut());
        };
        for s in &self.segs {
            match s {
                Seg::Lit(t) => out.extend_from_slice(t.as_bytes()),
                Seg::UserId => num(out, v.user_id),
                Seg::NowNs => num(out, v.now_ns),
                Seg::Ref => num(out, v.msg_ref as u64),
                Seg::JoinRef => num(out, v.join_ref as u64),
                Seg::Auth => out.extend_from_slice(v.auth.as_bytes()),
                Seg::Stamp => {
                    out.extend_from_slice(STAMP_PREFIX.as_bytes());
                    num(out, v.user_id);
                    out.push(b':');
                    num(out, v.msg_ref as u64);
                    out.push(b':');
                    num(out, v.now_ns);
                }
            }
        }
    }

    /// Renders with sample values, for checks and tests.
    pub fn sample(&self) -> String {
        let mut out = Vec::new();
        self.render(
            &mut out,
            &Vars {
                user_id: 1,
                msg_ref: 2,
                join_ref: 1,
                now_ns: 3,
                auth: "key:signature",
            },
        );
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// A tiny stack buffer for decimal numbers (no allocation per message).
struct NumBuf {
    buf: [u8; 20],
    start: usize,
}

impl NumBuf {
    fn as_bytes_mut(&mut self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn itoa_buf(mut n: u64) -> NumBuf {
    let mut buf = [0u8; 20];
    let mut i = 20;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    NumBuf { buf, start: i }
}

/// Parses a stamp (`throng:<user>:<ref>:<ns>`) out of a payload.
/// Returns the broadcast's key (user << 32 | ref) and its send time.
pub fn find_stamp(payload: &[u8]) -> Option<(u64, u64)> {
    let p = STAMP_PREFIX.as_bytes();
    let at = payload.windows(p.len()).position(|w| w == p)?;
    let mut nums = [0u64; 3];
    let mut idx = 0;
    let mut digits = 0;
    for &b in &payload[at + p.len()..] {
        match b {
            b'0'..=b'9' => {
                nums[idx] = nums[idx].checked_mul(10)?.checked_add((b - b'0') as u64)?;
                digits += 1;
            }
            b':' if idx < 2 && digits > 0 => {
                idx += 1;
                digits = 0;
            }
            _ => break,
        }
    }
    if idx != 2 || digits == 0 {
        return None;
    }
    Some(((nums[0] << 32) | (nums[1] & 0xFFFF_FFFF), nums[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_substitute() {
        let t =
            Template::parse(r#"{"user":"%%ts_user_server:get_unique_id%%","r":%%ref%%}"#).unwrap();
        assert_eq!(t.segs.len(), 5);
        let mut out = Vec::new();
        t.render(
            &mut out,
            &Vars {
                user_id: 42,
                msg_ref: 7,
                join_ref: 1,
                now_ns: 0,
                auth: "",
            },
        );
        assert_eq!(out, br#"{"user":"42","r":7}"#);
        assert!(Template::parse("%%nope%%").is_err());
        assert_eq!(
            Template::parse("100%% sure").unwrap().sample(),
            "100%% sure"
        );
    }

    #[test]
    fn stamps_round_trip() {
        let t = Template::parse(r#"{"body":"%%stamp%%"}"#).unwrap();
        let mut out = Vec::new();
        t.render(
            &mut out,
            &Vars {
                user_id: 5,
                msg_ref: 9,
                join_ref: 1,
                now_ns: 1_700_000_000_123_456_789,
                auth: "",
            },
        );
        assert_eq!(
            find_stamp(&out),
            Some(((5 << 32) | 9, 1_700_000_000_123_456_789))
        );
        assert_eq!(find_stamp(b"throng:1:2"), None);
        assert_eq!(find_stamp(b"nothing"), None);
    }
}
