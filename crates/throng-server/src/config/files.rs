//! The files settings name (certificates, keys, CA bundles), opened when
//! the settings resolve: a missing or unreadable one refuses the start
//! with the flag that named it (`--tls-cert missing.pem: no such file`),
//! before the code that reads it later (`crate::tls`, the hooks' and
//! Redis's TLS, JWT verification) could report it by its path alone.

use std::io::ErrorKind;
use std::path::Path;

use super::ServeArgs;

/// Opens each file `s` names; the first that cannot be read is the error.
pub(super) fn check(s: &ServeArgs) -> Result<(), String> {
    let files = [
        ("--tls-cert", &s.tls_cert),
        ("--tls-key", &s.tls_key),
        ("--api-tls-cert", &s.api_tls_cert),
        ("--api-tls-key", &s.api_tls_key),
        ("--hook-ca-file", &s.hooks.ca_file),
        ("--redis-ca-file", &s.redis_ca_file),
        ("--auth-jwt-public-key-file", &s.auth.jwt_public_key_file),
    ];
    for (flag, path) in files {
        if let Some(path) = path {
            readable(path).map_err(|why| format!("{flag} {}: {why}", path.display()))?;
        }
    }
    Ok(())
}

/// Why `path` cannot be read, for a person.
fn readable(path: &Path) -> Result<(), String> {
    let why = match std::fs::File::open(path) {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_dir()) => {
            "is a directory; give the file itself".to_string()
        }
        Ok(_) => return Ok(()),
        Err(e) => match e.kind() {
            ErrorKind::NotFound => {
                let cwd = std::env::current_dir()
                    .map_or_else(|_| "?".into(), |d| d.display().to_string());
                if path.is_relative() {
                    format!("no such file (relative to {cwd}, where the server started)")
                } else {
                    "no such file".to_string()
                }
            }
            ErrorKind::PermissionDenied => {
                "permission denied: the server's user cannot read it (check its owner and mode)"
                    .to_string()
            }
            _ => e.to_string(),
        },
    };
    Err(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_names_its_flag() {
        let missing = |args: ServeArgs| check(&args).unwrap_err();
        let err = missing(ServeArgs {
            tls_cert: Some("/nonexistent/missing.pem".into()),
            ..Default::default()
        });
        assert_eq!(err, "--tls-cert /nonexistent/missing.pem: no such file");
        let err = missing(ServeArgs {
            api_tls_key: Some("missing-key.pem".into()),
            ..Default::default()
        });
        assert!(
            err.starts_with("--api-tls-key missing-key.pem: no such file (relative to "),
            "{err}"
        );
        let mut hooks = ServeArgs::default();
        hooks.hooks.ca_file = Some("/".into());
        assert_eq!(
            missing(hooks),
            "--hook-ca-file /: is a directory; give the file itself"
        );
        assert!(check(&ServeArgs::default()).is_ok());
    }
}
