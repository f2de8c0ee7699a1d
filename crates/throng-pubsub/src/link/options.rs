//! How to reach Redis: the URL and TLS settings turned into a client, the
//! blocking check a supervisor runs before starting workers, the URL with
//! its password masked for logs, and a node's random id.

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

use super::DEFAULT_TIMEOUT;
use crate::Error;
use std::time::Duration;

/// How to reach Redis, beyond the URL.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// PEM file of the certificate authorities to trust for `rediss://`
    /// (a private CA); `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Bytes of envelopes waiting for the publisher; past it, `publish`
    /// drops broadcasts (counted) instead of growing.
    pub queue_bytes: usize,
    /// How long Redis may take to answer a connection attempt, a command
    /// or a PING before the session counts as lost (`--redis-timeout-ms`).
    pub timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            ca_file: None,
            queue_bytes: 64 << 20,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The redis crate's client for `url`, with TLS settings from `options`.
pub(crate) fn client_for(
    url: &str,
    shown: &str,
    options: &RedisOptions,
) -> Result<::redis::Client, Error> {
    let url_error = |reason: String| Error::RedisUrl {
        url: shown.to_string(),
        reason,
    };
    let tls = url.starts_with("rediss://") || url.starts_with("valkeys://");
    if tls {
        // rustls needs a crypto provider; ring is the one built in.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    match &options.ca_file {
        None => ::redis::Client::open(url).map_err(|e| url_error(e.to_string())),
        Some(_) if !tls => Err(url_error(
            "a CA file (--redis-ca-file) is for TLS: use a rediss:// URL".into(),
        )),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| Error::RedisTls {
                url: shown.to_string(),
                reason: format!("cannot read the CA file {}: {e}", path.display()),
            })?;
            ::redis::Client::build_with_tls(
                url,
                ::redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                },
            )
            .map_err(|e| Error::RedisTls {
                url: shown.to_string(),
                reason: format!("CA file {}: {e}", path.display()),
            })
        }
    }
}

/// Checks, with a blocking connection, that the one Redis server at `url`
/// (not a cluster: [`super::check_with`] tells them apart) answers PING;
/// `shown` is the URL as errors show it.
pub(super) fn check_server(url: &str, shown: &str, options: &RedisOptions) -> Result<(), Error> {
    let client = client_for(url, shown, options)?;
    let fail = |e: ::redis::RedisError| Error::RedisConnect {
        url: shown.to_string(),
        reason: e.to_string(),
    };
    let mut conn = client
        .get_connection_with_timeout(options.timeout)
        .map_err(fail)?;
    conn.set_read_timeout(Some(options.timeout)).map_err(fail)?;
    ::redis::cmd("PING")
        .query::<String>(&mut conn)
        .map_err(fail)?;
    Ok(())
}

/// A random id for this process: std's per-process random hash keys, mixed
/// with the pid and the time.
pub fn random_node_id() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// `url` with the password, if any, replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let user = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        None => userinfo.to_string(),
    };
    format!("{}{}{}", &url[..scheme_end], user, &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:p@h/0"), "redis://u:***@h/0");
        assert_eq!(redact("redis://u@h"), "redis://u@h");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn node_ids_differ() {
        assert_ne!(random_node_id(), random_node_id());
    }

    #[test]
    fn an_unreachable_redis_is_an_error_naming_the_url_masked() {
        let err = crate::link::check("redis://:pw@127.0.0.1:1")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("redis://:***@127.0.0.1:1") && !err.contains("pw"),
            "{err}"
        );
    }
}
