//! `check_origin`: a browser page on another site must not open sockets
//! with its visitors' cookies and tokens. As `Phoenix.Socket.Transport.
//! check_origin/5` (`lib/phoenix/socket/transport.ex`):
//! - a request with no `Origin` header (every non-browser client: Tsung,
//!   the bench, mobile apps) is allowed;
//! - an `Origin` with no host (`null`, from `file://` pages or sandboxed
//!   frames) is refused;
//! - a list of allowed origins (`https://example.com`, `//other.com:888`,
//!   `//*.example.com`): scheme and port are compared only when the entry
//!   has them, and `*.` matches the domain and any subdomain;
//! - `false` turns the check off.
//!
//! The default (`true`) differs from Phoenix's on purpose: Phoenix compares
//! with the host of the endpoint's configured URL; we have no such URL, so
//! the Origin's host must equal the host the request was sent to (its
//! `Host` header, port ignored), which is what a same-site page always
//! sends. That is Phoenix's `check_origin: :conn` less the scheme and port,
//! which a TLS terminator or a port mapping in front of us changes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The origin policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CheckOrigin {
    /// The Origin's host must be the request's `Host`.
    #[default]
    SameHost,
    Off,
    /// Any of these origins.
    List(Vec<AllowedOrigin>),
}

/// One allowed origin: `[scheme:]//host[:port]`, or a bare host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedOrigin {
    scheme: Option<String>,
    /// Lowercase; may start with `*.`.
    host: String,
    port: Option<u16>,
    text: String,
}

/// An origin's parts: scheme, host, port (the scheme's default if absent).
fn parse(origin: &str) -> Option<(Option<&str>, &str, Option<u16>)> {
    let (scheme, rest) = match origin.split_once("//") {
        Some((s, rest)) => (s.strip_suffix(':').filter(|s| !s.is_empty()), rest),
        None => (None, origin),
    };
    let rest = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (host, port) = split_port(rest)?;
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse().ok()?),
        None => match scheme {
            Some("http" | "ws") => Some(80),
            Some("https" | "wss") => Some(443),
            _ => None,
        },
    };
    Some((scheme, host, port))
}

/// `host[:port]`, with IPv6 literals in brackets.
fn split_port(hostport: &str) -> Option<(&str, Option<&str>)> {
    if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        return Some((host, after.strip_prefix(':')));
    }
    Some(match hostport.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (hostport, None),
    })
}

impl FromStr for AllowedOrigin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (scheme, host, port) = parse(s.trim()).ok_or_else(|| {
            format!(
                "check_origin {s:?}: expected an origin with a host, e.g. \
                 https://example.com, //other.com:888 or //*.example.com"
            )
        })?;
        Ok(AllowedOrigin {
            scheme: scheme.map(str::to_ascii_lowercase),
            host: host.to_ascii_lowercase(),
            port: if s.contains("//") || s.rsplit_once(':').is_some() {
                port
            } else {
                None
            },
            text: s.trim().to_string(),
        })
    }
}

impl CheckOrigin {
    /// Whether a request with this `Origin` and `Host` may connect.
    pub fn allows(&self, origin: Option<&str>, host: Option<&str>) -> bool {
        let Some(origin) = origin else {
            return true;
        };
        if *self == CheckOrigin::Off {
            return true;
        }
        // A browser's origin is `scheme://host[:port]`, or `null` (no host:
        // refused). Tsung sends the bare host (`Origin: 127.0.0.1`, no
        // scheme); the Tsung load test of the Phoenix team's 2M-connection
        // benchmark must connect, and a client that
        // is not a browser can send any Origin anyway, so a bare host is
        // compared as a host.
        let origin = origin.trim();
        if origin.eq_ignore_ascii_case("null") {
            return false;
        }
        let Some((scheme, o_host, o_port)) = parse(origin) else {
            return false;
        };
        let o_host = o_host.to_ascii_lowercase();
        match self {
            CheckOrigin::Off => true,
            CheckOrigin::SameHost => host
                .and_then(|h| split_port(h.trim()))
                .is_some_and(|(h, _)| h.eq_ignore_ascii_case(&o_host)),
            CheckOrigin::List(list) => list.iter().any(|a| {
                a.scheme
                    .as_deref()
                    .is_none_or(|s| scheme.is_some_and(|o| o.eq_ignore_ascii_case(s)))
                    && a.port.is_none_or(|p| o_port == Some(p))
                    && match a.host.strip_prefix("*.") {
                        Some(domain) => o_host == domain || o_host.ends_with(&format!(".{domain}")),
                        None => o_host == a.host,
                    }
            }),
        }
    }
}

impl FromStr for CheckOrigin {
    type Err = String;
    /// `true`, `false`, or a comma-separated list of origins.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "true" => Ok(CheckOrigin::SameHost),
            "false" => Ok(CheckOrigin::Off),
            list => list
                .split(',')
                .filter(|o| !o.trim().is_empty())
                .map(str::parse)
                .collect::<Result<Vec<_>, _>>()
                .map(CheckOrigin::List),
        }
    }
}

impl fmt::Display for CheckOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckOrigin::SameHost => f.write_str("true"),
            CheckOrigin::Off => f.write_str("false"),
            CheckOrigin::List(l) => {
                let texts: Vec<&str> = l.iter().map(|a| a.text.as_str()).collect();
                f.write_str(&texts.join(","))
            }
        }
    }
}

/// In TOML: `check_origin = true`, `false`, or `["https://a.com", "//*.b.com"]`.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(untagged)]
pub(crate) enum CheckOriginToml {
    Bool(bool),
    List(Vec<String>),
}

impl TryFrom<CheckOriginToml> for CheckOrigin {
    type Error = String;
    fn try_from(t: CheckOriginToml) -> Result<Self, String> {
        match t {
            CheckOriginToml::Bool(true) => Ok(CheckOrigin::SameHost),
            CheckOriginToml::Bool(false) => Ok(CheckOrigin::Off),
            CheckOriginToml::List(l) => l
                .iter()
                .map(|s| s.parse())
                .collect::<Result<Vec<_>, _>>()
                .map(CheckOrigin::List),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_origin_is_allowed_and_null_is_not() {
        let c = CheckOrigin::SameHost;
        assert!(c.allows(None, Some("x")));
        assert!(!c.allows(Some("null"), Some("x")));
        assert!(CheckOrigin::Off.allows(Some("null"), None));
    }

    #[test]
    fn same_host_ignores_scheme_and_port() {
        let c = CheckOrigin::SameHost;
        assert!(c.allows(Some("http://localhost:4000"), Some("localhost:4000")));
        assert!(c.allows(Some("https://Chat.Example.com"), Some("chat.example.com")));
        assert!(c.allows(Some("http://[::1]:4000"), Some("[::1]:9")));
        assert!(!c.allows(Some("https://evil.com"), Some("chat.example.com")));
        assert!(!c.allows(Some("http://127.0.0.1:4000"), Some("localhost:4000")));
        assert!(!c.allows(Some("http://localhost"), None));
        // Tsung 1.7 sends the bare host it connects to as its Origin.
        assert!(c.allows(Some("127.0.0.1"), Some("127.0.0.1")));
        assert!(!c.allows(Some("evil.com"), Some("127.0.0.1")));
        assert!(!c.allows(Some("NULL"), Some("null")));
    }

    #[test]
    fn lists_as_phoenix() {
        let c: CheckOrigin = "https://example.com, //other.com:888, //*.wild.org"
            .parse()
            .unwrap();
        assert!(c.allows(Some("https://example.com"), None));
        assert!(c.allows(Some("https://example.com:443"), None));
        assert!(!c.allows(Some("http://example.com"), None));
        assert!(!c.allows(Some("https://example.com:8443"), None));
        assert!(c.allows(Some("http://other.com:888"), None));
        assert!(c.allows(Some("https://other.com:888"), None));
        assert!(!c.allows(Some("https://other.com"), None));
        assert!(c.allows(Some("https://wild.org"), None));
        assert!(c.allows(Some("https://a.b.wild.org"), None));
        assert!(!c.allows(Some("https://notwild.org"), None));
        assert!(!c.allows(Some("https://evil.com"), None));
        let bare: CheckOrigin = "example.com".parse().unwrap();
        assert!(bare.allows(Some("http://example.com:1234"), None));
        assert_eq!(c.to_string().parse::<CheckOrigin>().unwrap(), c);
        assert!("https://".parse::<CheckOrigin>().is_err());
        assert_eq!("false".parse::<CheckOrigin>().unwrap(), CheckOrigin::Off);
    }
}
