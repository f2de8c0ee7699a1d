//! TLS settings for the public port (`--tls-cert`, `--tls-key`) and the
//! server API (`--api-tls-cert`, `--api-tls-key`): loading a PEM
//! certificate chain and its key, the rustls `ServerConfig` both listeners
//! use, and reloading the files without a restart.
//!
//! One [`Certs`] per listener holds the certificate in force behind a
//! lock read once per handshake (never per message); a reload builds the
//! new one off to the side and swaps it in only when it loaded and its key
//! matches, so a bad file leaves the old certificate serving. Open
//! connections never look at it again after their handshake, so a reload
//! drops none of them. Reloads come from SIGHUP (a single process) and
//! from the files' modification times, checked every
//! [`WATCH_INTERVAL`] by one thread per process: a worker of `--workers`
//! picks up new files by itself, without its supervisor's rolling restart.
//!
//! The per-connection side (the shard's unbuffered sessions) is
//! `tls/session.rs`; the API's is `tokio-rustls` in `api.rs`.

mod records;
pub(crate) mod session;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

/// How often the certificate files' modification times are checked.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// A certificate chain and its private key, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// Both flags or neither: `what` names them in the error (`tls`, `api_tls`).
    pub fn pair(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        what: &str,
    ) -> Result<Option<TlsFiles>, String> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(format!(
                "{what}_cert is set without {what}_key: give both (--{flag}-key FILE, the PEM private key of the certificate)",
                flag = what.replace('_', "-")
            )),
            (None, Some(_)) => Err(format!(
                "{what}_key is set without {what}_cert: give both (--{flag}-cert FILE, the PEM certificate chain)",
                flag = what.replace('_', "-")
            )),
        }
    }
}

/// The process's crypto: rustls's *ring* provider.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads `files`: every certificate of the chain, the first being the
/// server's, and a private key (PKCS#8, SEC1 or PKCS#1; RSA, ECDSA or
/// Ed25519) that must match it.
pub fn load(files: &TlsFiles) -> Result<CertifiedKey, String> {
    let read = |path: &Path| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
    let pem = read(&files.cert)?;
    let certs = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not a PEM certificate chain: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no CERTIFICATE block in it (want the PEM chain, the server's certificate first)",
            files.cert.display()
        ));
    }
    let pem = read(&files.key)?;
    let key = rustls_pemfile::private_key(&mut &pem[..])
        .map_err(|e| format!("{}: not a PEM private key: {e}", files.key.display()))?
        .ok_or_else(|| {
            format!(
                "{}: no PRIVATE KEY block in it (want PKCS#8, SEC1 EC or PKCS#1 RSA PEM)",
                files.key.display()
            )
        })?;
    CertifiedKey::from_der(certs, key, &provider()).map_err(|e| {
        format!(
            "{} and {}: {e} (is the key the certificate's?)",
            files.cert.display(),
            files.key.display()
        )
    })
}

/// One listener's certificate: the one in force, and how to reload it.
#[derive(Debug)]
pub struct Certs {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' modification times when last loaded (or tried).
    stamp: Mutex<(Option<SystemTime>, Option<SystemTime>)>,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
}

impl Certs {
    /// Loads `files`; an error says which file and why.
    pub fn open(files: TlsFiles) -> Result<Arc<Certs>, String> {
        let stamp = stamps(&files);
        let key = load(&files)?;
        Ok(Arc::new(Certs {
            files,
            current: RwLock::new(Arc::new(key)),
            stamp: Mutex::new(stamp),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
        }))
    }

    /// Loads the files again; on success the next handshakes use them, on
    /// failure the certificate in force stays and the error is logged.
    pub fn reload(&self, why: &str) -> bool {
        *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamps(&self.files);
        match load(&self.files) {
            Ok(key) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
                self.reloads.fetch_add(1, Relaxed);
                tracing::info!(
                    cert = %self.files.cert.display(),
                    "TLS certificate reloaded ({why}); new handshakes use it, open connections keep theirs"
                );
                true
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Relaxed);
                tracing::error!(
                    "TLS certificate not reloaded ({why}): {e}; the previous certificate stays in use: fix the files and send SIGHUP again (or save them again)"
                );
                false
            }
        }
    }

    /// Reloads if either file changed since it was last loaded.
    fn reload_if_changed(&self) {
        let now = stamps(&self.files);
        let changed = *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) != now;
        if changed {
            self.reload("the files changed");
        }
    }
}

fn stamps(files: &TlsFiles) -> (Option<SystemTime>, Option<SystemTime>) {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (m(&files.cert), m(&files.key))
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// A listener's TLS: its certificate and the config its handshakes use.
#[derive(Clone, Debug)]
pub struct Tls {
    pub certs: Arc<Certs>,
    pub config: Arc<ServerConfig>,
}

impl Tls {
    /// TLS 1.2 and 1.3, ALPN `http/1.1`, session resumption by stateless
    /// tickets (rotated every 6 hours by rustls; no per-session memory on
    /// the server) and by a small session-ID cache for TLS 1.2 clients
    /// without ticket support.
    pub fn new(files: TlsFiles) -> Result<Tls, String> {
        let certs = Certs::open(files)?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS: {e}"))?;
        // One ticket per TLS 1.3 handshake (rustls sends 2 by default): a
        // reconnecting client needs one.
        config.send_tls13_tickets = 1;
        config.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
        // After its handshake a connection keeps only its traffic keys
        // (`tls/records.rs`), taken out as for kTLS.
        config.enable_secret_extraction = true;
        Ok(Tls {
            certs,
            config: Arc::new(config),
        })
    }
}

/// Reloads `certs` on SIGHUP (with `sighup`) and whenever their files
/// change, on one thread for the process's life.
pub fn watch(certs: Vec<Arc<Certs>>, sighup: bool) -> io::Result<()> {
    if certs.is_empty() {
        return Ok(());
    }
    if sighup {
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])?;
        let certs = certs.clone();
        std::thread::Builder::new()
            .name("throng-tls-sighup".into())
            .spawn(move || {
                for _ in signals.forever() {
                    for c in &certs {
                        c.reload("SIGHUP");
                    }
                }
            })?;
    }
    std::thread::Builder::new()
        .name("throng-tls-watch".into())
        .spawn(move || loop {
            std::thread::sleep(WATCH_INTERVAL);
            for c in &certs {
                c.reload_if_changed();
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str, alg: &'static rcgen::SignatureAlgorithm) -> TlsFiles {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = TlsFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }

    #[test]
    fn loads_a_pair_and_refuses_a_mismatch() {
        let dir = std::env::temp_dir().join(format!("throng-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ec = write_pair(&dir, "ec", &rcgen::PKCS_ECDSA_P256_SHA256);
        let other = write_pair(&dir, "other", &rcgen::PKCS_ECDSA_P384_SHA384);
        assert!(load(&ec).is_ok());
        assert!(load(&other).is_ok());
        let tls = Tls::new(ec.clone()).unwrap();
        // The certificate with another key: refused, the old one kept.
        std::fs::copy(&other.key, &ec.key).unwrap();
        let e = load(&ec).unwrap_err();
        assert!(e.contains("key"), "{e}");
        assert!(!tls.certs.reload("test"));
        assert_eq!(tls.certs.reload_failures.load(Relaxed), 1);
        std::fs::write(&ec.cert, "not pem").unwrap();
        assert!(load(&ec).unwrap_err().contains("no CERTIFICATE"));
        assert!(TlsFiles::pair(Some("a".into()), None, "api_tls")
            .unwrap_err()
            .contains("--api-tls-key"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
