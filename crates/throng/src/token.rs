//! `throng token`: mints a connect token for testing, a Phoenix.Token or a
//! JWT, with the same `[auth]` settings `throng serve` reads (the config
//! file, the `THRONG_AUTH_*` variables, or these flags), and checks it with
//! the server's own verifier (`throng_server::auth::mint`). The token alone
//! goes to stdout, how to use it to stderr. A secret the server would
//! refuse (the weak-secret rule, `throng_server::auth::secret`) mints
//! nothing: the settings are resolved as `serve` resolves them.

use std::path::PathBuf;

use throng_server::auth::mint::{self, Claims};
use throng_server::auth::Mode;
use throng_server::ServeArgs;

/// `throng token` flags.
#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    /// The user id the token names (Phoenix.Token's data, the JWT's sub)
    #[arg(long, default_value = "alice")]
    pub user: String,
    /// The server's config file: its [auth] table says how to sign
    #[arg(long, value_name = "FILE", env = "THRONG_CONFIG")]
    pub config: Option<PathBuf>,
    /// phoenix_token or jwt [default: the config's [auth] mode]
    #[arg(long, value_name = "MODE", env = "THRONG_AUTH")]
    pub mode: Option<Mode>,
    /// Phoenix.Token: the secret_key_base (as serve's --auth-secret-key-base)
    #[arg(
        long,
        alias = "auth-secret-key-base",
        value_name = "KEY",
        env = "THRONG_AUTH_SECRET_KEY_BASE",
        hide_env_values = true
    )]
    pub secret_key_base: Option<String>,
    /// Phoenix.Token: the salt [default: "user socket"]
    #[arg(long, value_name = "SALT", env = "THRONG_AUTH_SALT")]
    pub salt: Option<String>,
    /// JWT: the HMAC secret (as serve's --auth-jwt-secret)
    #[arg(
        long,
        alias = "auth-jwt-secret",
        value_name = "SECRET",
        env = "THRONG_AUTH_JWT_SECRET",
        hide_env_values = true
    )]
    pub jwt_secret: Option<String>,
    /// JWT: the issuer's private key (PEM), when the server verifies RS256/ES256 with its public key
    #[arg(long, value_name = "FILE")]
    pub private_key_file: Option<PathBuf>,
    /// Seconds the token is valid for [default: 3600]
    #[arg(long, value_name = "SECS", default_value_t = 3600, value_parser = throng_server::config::whole::<u64>)]
    pub ttl: u64,
    /// JWT: topic patterns the token may join (the channels claim), comma-separated [default: no limit]
    #[arg(long, value_name = "PATTERNS", value_delimiter = ',')]
    pub channels: Vec<String>,
}

/// Prints a token for `args`.
pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    let config = ServeArgs {
        config: args.config,
        auth: throng_server::config::AuthArgs {
            mode: args.mode,
            secret_key_base: args.secret_key_base,
            salt: args.salt,
            jwt_secret: args.jwt_secret,
            ..Default::default()
        },
        ..Default::default()
    }
    .resolve()?;
    let key = match &args.private_key_file {
        Some(path) => {
            Some(std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?)
        }
        None => None,
    };
    let claims = Claims {
        user: args.user,
        ttl_secs: args.ttl,
        channels: (!args.channels.is_empty()).then_some(args.channels),
    };
    let token = mint::mint(&config.auth, key.as_deref(), &claims)?;
    println!("{token}");
    eprintln!(
        "a {} token for user {:?}, valid {} s. Connect with phoenix.js: \
         new Socket(\"/socket\", {{authToken: token}}) or {{params: {{token}}}}; \
         or ws://HOST:PORT/socket/websocket?vsn=2.0.0&token=TOKEN",
        config.auth.mode.name(),
        claims.user,
        claims.ttl_secs
    );
    Ok(())
}
