//! The `[auth]` settings (`AuthArgs`): the config file's `[auth]` table and
//! the `--auth-*` flags, one [`settings!`] definition each; merged into
//! the [`AuthConfig`] that `crate::auth` verifies tokens with.

use std::path::PathBuf;

use crate::auth::{AuthConfig, MaxAge, Mode, REVOKE_SKEW_SECS};
use crate::setting::{settings, whole};

settings! {
    /// The `[auth]` keys, and the `--auth-*` flags flattened into
    /// `throng serve`'s. All optional, so the file fills what flags leave out.
    #[serde(deny_unknown_fields)]
    pub struct AuthArgs {
        /// Connect authentication: none, phoenix_token or jwt ([auth] mode) [default: none]
        #[arg(long = "auth", help_heading = "Authentication", value_name = "MODE", env = "THRONG_AUTH")]
        pub mode: Option<Mode>,
        /// Phoenix.Token: the Phoenix endpoint's secret_key_base (under 20 bytes refused, under 64 warned)
        #[arg(long = "auth-secret-key-base", help_heading = "Authentication", value_name = "KEY", env = "THRONG_AUTH_SECRET_KEY_BASE", hide_env_values = true)]
        pub secret_key_base: Option<String>,
        /// Phoenix.Token: the salt the app signs with [default: "user socket"]
        #[arg(long = "auth-salt", help_heading = "Authentication", value_name = "SALT", env = "THRONG_AUTH_SALT")]
        pub salt: Option<String>,
        /// Phoenix.Token: refuse tokens signed longer ago than SECS (whole or fractional) [default: the max age in the token]
        #[arg(long = "auth-max-age", help_heading = "Authentication", value_name = "SECS", env = "THRONG_AUTH_MAX_AGE")]
        pub max_age: Option<MaxAge>,
        /// JWT: the HMAC secret, at least 32 bytes (HS256; 48 for HS384, 64 for HS512)
        #[arg(long = "auth-jwt-secret", help_heading = "Authentication", value_name = "SECRET", env = "THRONG_AUTH_JWT_SECRET", hide_env_values = true)]
        pub jwt_secret: Option<String>,
        /// JWT: a PEM file with the RS256 (RSA) or ES256 (EC P-256) public key
        #[arg(long = "auth-jwt-public-key-file", help_heading = "Authentication", value_name = "FILE", env = "THRONG_AUTH_JWT_PUBLIC_KEY_FILE")]
        pub jwt_public_key_file: Option<PathBuf>,
        /// JWT: the PEM public key itself (instead of a file)
        #[arg(long = "auth-jwt-public-key", help_heading = "Authentication", value_name = "PEM", env = "THRONG_AUTH_JWT_PUBLIC_KEY", hide = true, hide_env_values = true)]
        pub jwt_public_key: Option<String>,
        /// JWT: HS256, HS384, HS512, RS256 or ES256 [default: from the key]
        #[arg(long = "auth-jwt-algorithm", help_heading = "Authentication", value_name = "ALG", env = "THRONG_AUTH_JWT_ALGORITHM")]
        pub jwt_algorithm: Option<String>,
        /// JWT: require the aud claim to name AUD (a string, or a list holding it) [default: aud not checked]
        #[arg(long = "auth-jwt-audience", help_heading = "Authentication", value_name = "AUD", env = "THRONG_AUTH_JWT_AUDIENCE")]
        pub jwt_audience: Option<String>,
        /// JWT: require the iss claim to be ISS [default: iss not checked]
        #[arg(long = "auth-jwt-issuer", help_heading = "Authentication", value_name = "ISS", env = "THRONG_AUTH_JWT_ISSUER")]
        pub jwt_issuer: Option<String>,
        /// After a revocation (POST /api/disconnect with revoke), refuse the user's tokens signed up to SECS after it too (the signing app's clock may run ahead); tokens signed later connect
        #[arg(long = "auth-revoke-skew", help_heading = "Authentication", value_name = "SECS", value_parser = whole::<u64>, env = "THRONG_AUTH_REVOKE_SKEW")]
        pub revoke_skew: Option<u64> = REVOKE_SKEW_SECS,
    }
}

impl AuthArgs {
    /// These flags over the file's `[auth]`: as [`AuthArgs::or`], except
    /// that a key file given as a flag also replaces the file's PEM key.
    pub fn over(self, file: AuthArgs) -> AuthArgs {
        let file = AuthArgs {
            jwt_public_key: match (&self.jwt_public_key, &self.jwt_public_key_file) {
                (None, Some(_)) => None,
                _ => file.jwt_public_key,
            },
            ..file
        };
        self.or(file)
    }

    /// The settings `crate::auth` verifies with.
    pub fn config(self) -> AuthConfig {
        let revoke_skew = Some(self.revoke_skew());
        AuthConfig {
            mode: self.mode.unwrap_or_default(),
            secret_key_base: self.secret_key_base,
            salt: self.salt,
            max_age: self.max_age,
            jwt_secret: self.jwt_secret,
            jwt_public_key: self.jwt_public_key,
            jwt_public_key_file: self.jwt_public_key_file,
            jwt_algorithm: self.jwt_algorithm,
            jwt_audience: self.jwt_audience,
            jwt_issuer: self.jwt_issuer,
            revoke_skew,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ServeArgs;

    fn resolve(toml: &str, flags: ServeArgs) -> Result<crate::Config, crate::Error> {
        let path = std::env::temp_dir().join(format!(
            "throng-cfg-skew-{}-{}",
            std::process::id(),
            toml.len()
        ));
        std::fs::write(&path, toml).unwrap();
        let c = ServeArgs {
            config: Some(path.clone()),
            ..flags
        }
        .resolve();
        std::fs::remove_file(&path).unwrap();
        c
    }

    #[test]
    fn revoke_skew_from_the_file_under_the_flag_with_its_default_and_bound() {
        assert_eq!(
            ServeArgs::default().resolve().unwrap().auth.revoke_skew,
            Some(crate::auth::REVOKE_SKEW_SECS)
        );
        let file = resolve("[auth]\nrevoke_skew = 5\n", ServeArgs::default()).unwrap();
        assert_eq!(file.auth.revoke_skew, Some(5));
        let flag = ServeArgs {
            auth: super::AuthArgs {
                revoke_skew: Some(0),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            resolve("[auth]\nrevoke_skew = 5\n", flag)
                .unwrap()
                .auth
                .revoke_skew,
            Some(0)
        );
        let err = resolve("[auth]\nrevoke_skew = 3601\n", ServeArgs::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("revoke_skew must be 0..=3600"), "{err}");
        // Workers are handed it on their command line.
        let c = resolve("[auth]\nrevoke_skew = 7\n", ServeArgs::default()).unwrap();
        let args = c.worker_args(0, 4000);
        let at = args.iter().position(|a| a == "--auth-revoke-skew").unwrap();
        assert_eq!(args[at + 1], "7");
    }
}
