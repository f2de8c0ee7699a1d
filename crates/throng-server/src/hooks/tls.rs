//! TLS to an https:// app backend: rustls with ring (as for `rediss://`),
//! checked against the system's roots or the CAs of `--hook-ca-file`.

use std::io;
use std::path::Path;
use std::sync::Arc;

/// The client config for `ca_file` (`None`: the system's roots).
pub(super) fn client_config(ca_file: Option<&Path>) -> io::Result<rustls::ClientConfig> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| invalid(format!("hooks ca_file {}: {e}", path.display())))?;
            for cert in rustls_pemfile::certs(&mut &pem[..]) {
                let cert =
                    cert.map_err(|e| invalid(format!("hooks ca_file {}: {e}", path.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| invalid(format!("hooks ca_file {}: {e}", path.display())))?;
            }
            if roots.is_empty() {
                return Err(invalid(format!(
                    "hooks ca_file {}: no PEM certificate in it",
                    path.display()
                )));
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("TLS for hooks: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
