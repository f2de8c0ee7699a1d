//! `throng serve`'s secrets through the weak-secret rule
//! ([`crate::auth::secret`]): which setting is which [`Kind`], and where
//! each value came from (its flag or variable, else the config file), so
//! that a refusal names the one the user gave. Called by
//! [`ServeArgs::resolve`](super::ServeArgs::resolve), which `serve` (and the
//! supervisor of `--workers`, before it starts any worker), `check-config`
//! and `throng token` all go through.

use std::path::Path;

use crate::auth::secret::{Judged, Kind, Source};

use super::ServeArgs;

/// Every secret of `settings` (the flags over the file) judged, each with
/// its source: `args` (the command line and environment alone) when it set
/// it, else the file `args.config` names.
pub(super) fn judge(args: &ServeArgs, settings: &ServeArgs) -> Judged {
    let file: Option<&Path> = args.config.as_deref();
    let auth = settings.auth.clone().config();
    let rows = [
        (
            Kind::JwtSecret(auth.jwt_hmac()),
            settings.auth.jwt_secret.as_deref(),
            args.auth.jwt_secret.as_deref(),
        ),
        (
            Kind::SecretKeyBase,
            settings.auth.secret_key_base.as_deref(),
            args.auth.secret_key_base.as_deref(),
        ),
        (
            Kind::HookSecret,
            settings.hooks.secret.as_deref(),
            args.hooks.secret.as_deref(),
        ),
        (
            Kind::ApiKey,
            settings.api_key.as_deref(),
            args.api_key.as_deref(),
        ),
    ];
    let mut judged = Judged::default();
    for (kind, value, from_args) in rows {
        judged.add(kind, value, &Source::of(kind, from_args, file));
    }
    judged
}

/// The [`Kind`] of the config file key `path` (`auth.jwt_secret`,
/// `api_key`), if it is a secret the rule judges; the JWT secret's for the
/// HMAC that `jwt_algorithm` names.
pub(super) fn kind_of_key(path: &str, jwt_algorithm: Option<&str>) -> Option<Kind> {
    match path {
        "auth.jwt_secret" => {
            let auth = crate::auth::AuthConfig {
                jwt_algorithm: jwt_algorithm.map(str::to_string),
                ..Default::default()
            };
            Some(Kind::JwtSecret(auth.jwt_hmac()))
        }
        "auth.secret_key_base" => Some(Kind::SecretKeyBase),
        "hooks.secret" => Some(Kind::HookSecret),
        "api_key" => Some(Kind::ApiKey),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AuthArgs, HookArgs};

    #[test]
    fn each_secret_is_judged_with_its_source() {
        let path = std::env::temp_dir().join(format!("throng-secrets-{}", std::process::id()));
        std::fs::write(
            &path,
            "api_key = \"short\"\n[auth]\nmode = \"jwt\"\njwt_secret = \"\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            hooks: HookArgs {
                secret: Some("h".repeat(31)),
                ..Default::default()
            },
            ..Default::default()
        };
        let err = args.resolve().unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 3, "{err}");
        assert!(
            lines[0].contains("[auth] jwt_secret in ") && lines[0].contains("(empty)"),
            "{err}"
        );
        assert!(
            lines[1].contains("--hook-secret (the flag")
                && lines[1].contains("(31 bytes: too short, needs 32)"),
            "{err}"
        );
        assert!(
            lines[2].contains("api_key in ") && lines[2].contains("(5 bytes: too short, needs 16)"),
            "{err}"
        );
    }

    #[test]
    fn the_algorithm_sets_the_jwt_minimum_and_warnings_are_kept() {
        let jwt = |alg: Option<&str>, len: usize| ServeArgs {
            auth: AuthArgs {
                jwt_secret: Some("j".repeat(len)),
                jwt_algorithm: alg.map(str::to_string),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(jwt(None, 32).resolve().is_ok());
        assert!(jwt(Some("HS512"), 63)
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("needs 64"));
        assert!(jwt(Some("hs384"), 48).resolve().is_ok());
        let warned = ServeArgs {
            auth: AuthArgs {
                secret_key_base: Some("k".repeat(40)),
                ..Default::default()
            },
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(warned.secret_warnings.len(), 1);
        assert_eq!(
            kind_of_key("auth.jwt_secret", Some("HS384")),
            Some(Kind::JwtSecret(crate::auth::secret::JwtHmac::Hs384))
        );
        assert_eq!(kind_of_key("port", None), None);
    }
}
