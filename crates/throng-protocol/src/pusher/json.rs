//! JSON helpers the Pusher frames share: a quoted string, text escaped into
//! an enclosing JSON string (Pusher's double encoding of `data`), a string
//! read without copying when it has no escapes, and the decoded length of a
//! string literal (the HTTP API bounds `data` by its decoded size).

use std::borrow::Cow;
use std::io;

use serde_json::value::RawValue;

/// Appends `s` as a JSON string, quotes included.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Appends `n` in decimal.
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    use io::Write;
    let _ = write!(out, "{n}");
}

/// A writer that escapes what it is given as the inside of a JSON string:
/// the inner JSON of a double-encoded `data` goes through it straight into
/// the frame, with no intermediate buffer. Hand-written because serde_json
/// only escapes whole strings it quotes itself; the rules are JSON's (quote,
/// backslash and control characters; UTF-8 passes through).
pub(crate) struct Escaped<'a>(pub(crate) &'a mut Vec<u8>);

impl io::Write for Escaped<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        push_escaped(self.0, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Appends `bytes` (UTF-8) escaped as the inside of a JSON string.
pub(crate) fn push_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// Appends a JSON string whose content is `text` (used to write JSON text
/// as a string: `{"a":1}` becomes `"{\"a\":1}"`).
pub(crate) fn push_as_string(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'"');
    push_escaped(out, text);
    out.push(b'"');
}

/// A JSON value that must be a string: its text, borrowed from the input
/// when it has no escapes (serde copies every `Option<Cow<str>>`), `None` if
/// the value is not a string.
pub(crate) fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    if !text.starts_with('"') {
        return None;
    }
    if !text.contains('\\') {
        // The parser checked the literal: without escapes its text is what
        // is between the quotes.
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

/// Whether JSON text is an object (serde reads a struct from an array too,
/// field by field, which no Pusher message is).
pub(crate) fn is_object(text: &[u8]) -> bool {
    text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Whether a JSON value is `null`.
pub(crate) fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

/// The length in bytes of the text a valid JSON string literal (quotes
/// included) decodes to, without decoding it.
pub(crate) fn decoded_len(literal: &str) -> usize {
    let inner = literal
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(literal)
        .as_bytes();
    let (mut len, mut i) = (0, 0);
    while i < inner.len() {
        if inner[i] != b'\\' {
            len += 1;
            i += 1;
            continue;
        }
        if inner.get(i + 1) != Some(&b'u') {
            len += 1;
            i += 2;
            continue;
        }
        let unit = hex4(inner.get(i + 2..).unwrap_or_default());
        i += 6;
        let pair = (0xD800..0xDC00).contains(&unit)
            && inner.get(i) == Some(&b'\\')
            && inner.get(i + 1) == Some(&b'u')
            && (0xDC00..0xE000).contains(&hex4(inner.get(i + 2..).unwrap_or_default()));
        len += match unit {
            _ if pair => {
                i += 6;
                4
            }
            0..=0x7f => 1,
            0x80..=0x7ff => 2,
            _ => 3,
        };
    }
    len
}

/// Four hex digits as a number (0 if they are not; the parser checked them).
fn hex4(bytes: &[u8]) -> u32 {
    bytes
        .get(..4)
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn as_string(s: &str) -> String {
        let mut out = Vec::new();
        push_as_string(&mut out, s.as_bytes());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_like_json() {
        assert_eq!(as_string(r#"{"a":"b\c"}"#), r#""{\"a\":\"b\\c\"}""#);
        assert_eq!(as_string("\u{1}\n\té"), r#""\u0001\n\té""#);
    }

    #[test]
    fn raw_strings_borrow_without_escapes() {
        let raw: &RawValue = serde_json::from_str(r#""plain""#).unwrap();
        assert!(matches!(raw_str(raw), Some(Cow::Borrowed("plain"))));
        let raw: &RawValue = serde_json::from_str(r#""a\"b""#).unwrap();
        assert_eq!(raw_str(raw).as_deref(), Some("a\"b"));
        let raw: &RawValue = serde_json::from_str("12").unwrap();
        assert_eq!(raw_str(raw), None);
    }

    #[test]
    fn decoded_len_counts_escapes() {
        for (literal, len) in [
            (r#""""#, 0),
            (r#""abc""#, 3),
            (r#""\"\\\n""#, 3),
            (r#""\u00e9""#, 2),
            (r#""\u20ac""#, 3),
            (r#""\ud83d\ude00""#, 4),
            (r#""é""#, 2),
        ] {
            assert_eq!(decoded_len(literal), len, "{literal}");
        }
    }

    /// `s` as the inside of a JSON string literal, non-ASCII written as is
    /// (as serde_json does) or as `\u` escapes (as ASCII-only encoders do,
    /// surrogate pairs above the BMP).
    fn literal(s: &str, ascii_only: bool) -> String {
        let inner: String = s
            .chars()
            .map(|c| {
                if c.is_ascii() || !ascii_only {
                    let q = serde_json::to_string(&c.to_string()).unwrap();
                    q[1..q.len() - 1].to_string()
                } else {
                    let mut units = [0u16; 2];
                    let units = c.encode_utf16(&mut units);
                    units.iter().map(|u| format!("\\u{u:04x}")).collect()
                }
            })
            .collect();
        format!("\"{inner}\"")
    }

    proptest! {
        #[test]
        fn escaping_round_trips(s in "\\PC*|[\\x00-\\x1f\"\\\\]{0,10}") {
            let back: String = serde_json::from_str(&as_string(&s)).unwrap();
            prop_assert_eq!(back, s);
        }

        #[test]
        fn decoded_len_matches_serde(s in "\\PC{0,40}", ascii_only in any::<bool>()) {
            let literal = literal(&s, ascii_only);
            let decoded: String = serde_json::from_str(&literal).unwrap();
            prop_assert_eq!(decoded_len(&literal), decoded.len());
        }
    }
}
