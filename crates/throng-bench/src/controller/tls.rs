//! `throng bench --tls`: what the run needs to connect over TLS. With the
//! embedded server, a fresh ECDSA P-256 certificate for 127.0.0.1 (rcgen),
//! given to the server (`--tls-cert`, `--tls-key`) and trusted by the
//! agents; with `--target`, the CA of `--tls-ca`.

use std::path::PathBuf;

use crate::cli::BenchArgs;
use crate::error::BenchError;
use crate::plan::TlsPlan;

/// The agents' half (in their plans) and the embedded server's flags.
pub(super) struct BenchTls {
    pub plan: Option<TlsPlan>,
    pub server_args: Vec<String>,
    /// The certificate's directory, removed with this.
    dir: Option<PathBuf>,
}

impl Drop for BenchTls {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

pub(super) fn setup(args: &BenchArgs) -> Result<BenchTls, BenchError> {
    let none = BenchTls {
        plan: None,
        server_args: Vec::new(),
        dir: None,
    };
    if !args.tls {
        return Ok(none);
    }
    if let Some(target) = &args.target {
        let Some(ca) = &args.tls_ca else {
            return Err(BenchError::Usage(
                "--tls with --target needs --tls-ca FILE: the PEM certificate of the CA that signed the server's certificate (or the certificate itself, if self-signed)".into(),
            ));
        };
        let ca_pem = std::fs::read_to_string(ca)
            .map_err(|e| BenchError::Usage(format!("--tls-ca {}: {e}", ca.display())))?;
        let host = target.rsplit_once(':').map_or(target.as_str(), |(h, _)| h);
        return Ok(BenchTls {
            plan: Some(TlsPlan {
                ca_pem,
                server_name: host.trim_matches(['[', ']']).to_string(),
            }),
            server_args: Vec::new(),
            dir: None,
        });
    }
    let fail =
        |e: rcgen::Error| BenchError::Server(format!("--tls: making a test certificate: {e}"));
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(fail)?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .map_err(fail)?
        .self_signed(&key)
        .map_err(fail)?;
    let dir = std::env::temp_dir().join(format!("throng-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    Ok(BenchTls {
        plan: Some(TlsPlan {
            ca_pem: cert.pem(),
            server_name: "127.0.0.1".into(),
        }),
        server_args: vec![
            "--tls-cert".into(),
            cert_file.display().to_string(),
            "--tls-key".into(),
            key_file.display().to_string(),
        ],
        dir: Some(dir),
    })
}
