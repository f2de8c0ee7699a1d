//! A TLS session after its handshake: the record layer alone, what kTLS
//! would hand to the kernel.
//!
//! Why: a `rustls` connection stays ~4.8 KB on the heap after its
//! handshake (its state machine, key schedule, buffers' capacity: measured
//! with a counting allocator), twice the 2 KiB an idle TLS socket may
//! add here. Once the handshake and the session ticket are done, the
//! session's traffic keys are taken out (`dangerous_extract_secrets`, the
//! call made for kTLS) and the connection is dropped: what stays is the
//! cipher suite's own encrypter and decrypter (rustls's, built by the
//! suite's AEAD algorithm, so nonces and additional data are rustls's
//! code, not ours) and the two sequence numbers. Only the framing is
//! hand-written: a 5-byte header per record, application data, and
//! alerts (close_notify ends the connection). What this cannot do ends
//! the connection instead, and the client reconnects (resuming its
//! session): a TLS 1.3 KeyUpdate from the client, renegotiation, or a
//! sequence number near the AEAD's limit.

use rustls::crypto::cipher::{
    InboundOpaqueMessage, MessageDecrypter, MessageEncrypter, OutboundChunks, OutboundPlainMessage,
};
use rustls::server::UnbufferedServerConnection;
use rustls::{ConnectionTrafficSecrets, ContentType, ProtocolVersion, SupportedCipherSuite};

/// Largest plaintext of one record (RFC 8446 5.1).
const MAX_PLAIN: usize = 16 * 1024;
/// Largest ciphertext of one record a peer may send (RFC 5246 6.2.3).
const MAX_RECORD: usize = MAX_PLAIN + 2048;
/// Records per direction before the connection is ended (far below AES-GCM's
/// limit of 2^24.5 in RFC 8446 5.5; a client reconnects and resumes).
const MAX_SEQ: u64 = 1 << 24;

pub(super) struct Records {
    enc: Box<dyn MessageEncrypter>,
    dec: Box<dyn MessageDecrypter>,
    tx_seq: u64,
    rx_seq: u64,
}

/// What [`Records::open`] found.
pub(super) struct Opened {
    /// Bytes of the input used (whole records).
    pub used: usize,
    /// Plaintext bytes written to the output.
    pub plain: usize,
    /// The peer sent close_notify (or another alert): it is done.
    pub closed: bool,
}

impl Records {
    /// Takes an open connection's traffic keys (it must have nothing left
    /// to send or to hand on).
    pub fn take(conn: UnbufferedServerConnection) -> Result<Records, rustls::Error> {
        let suite = conn
            .negotiated_cipher_suite()
            .ok_or(rustls::Error::HandshakeNotComplete)?;
        // Deprecated for lacking session tickets and key updates: ours
        // went out before (the connection was idle), and a key update
        // ends the connection (above).
        #[allow(deprecated)]
        let secrets = conn.dangerous_extract_secrets()?;
        let (tx_seq, tx) = secrets.tx;
        let (rx_seq, rx) = secrets.rx;
        let parts = |s: ConnectionTrafficSecrets| match s {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv }
            | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
            | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => Ok((key, iv)),
            _ => Err(rustls::Error::General("unsupported cipher".into())),
        };
        let (tx_key, tx_iv) = parts(tx)?;
        let (rx_key, rx_iv) = parts(rx)?;
        let (enc, dec) = match suite {
            SupportedCipherSuite::Tls13(s) => (
                s.aead_alg.encrypter(tx_key, tx_iv),
                s.aead_alg.decrypter(rx_key, rx_iv),
            ),
            SupportedCipherSuite::Tls12(s) => {
                // The extracted IV is the fixed part then the explicit
                // nonce (rustls's `gcm_iv`), or all fixed (ChaCha20).
                let fixed = s.aead_alg.key_block_shape().fixed_iv_len;
                let (tx_iv, rx_iv) = (tx_iv.as_ref(), rx_iv.as_ref());
                (
                    s.aead_alg
                        .encrypter(tx_key, &tx_iv[..fixed], &tx_iv[fixed..]),
                    s.aead_alg.decrypter(rx_key, &rx_iv[..fixed]),
                )
            }
        };
        Ok(Records {
            enc,
            dec,
            tx_seq,
            rx_seq,
        })
    }

    /// Decrypts the whole records at the start of `input` into `out`
    /// (plaintext is never longer than its record); an incomplete last
    /// record is left (not `used`).
    pub fn open(&mut self, input: &mut [u8], out: &mut [u8]) -> Result<Opened, rustls::Error> {
        let mut used = 0;
        let mut plain = 0;
        while input.len() - used >= 5 {
            let head = &input[used..used + 5];
            let typ = ContentType::from(head[0]);
            let version = ProtocolVersion::from(u16::from_be_bytes([head[1], head[2]]));
            let len = u16::from_be_bytes([head[3], head[4]]) as usize;
            if len > MAX_RECORD {
                return Err(rustls::Error::General("record too large".into()));
            }
            if input.len() - used < 5 + len {
                break;
            }
            if self.rx_seq >= MAX_SEQ {
                return Err(rustls::Error::EncryptError);
            }
            let body = &mut input[used + 5..used + 5 + len];
            let msg = self
                .dec
                .decrypt(InboundOpaqueMessage::new(typ, version, body), self.rx_seq)?;
            self.rx_seq += 1;
            used += 5 + len;
            match msg.typ {
                ContentType::ApplicationData => {
                    out[plain..plain + msg.payload.len()].copy_from_slice(msg.payload);
                    plain += msg.payload.len();
                }
                // close_notify, or a fatal alert: the peer is done.
                ContentType::Alert => {
                    return Ok(Opened {
                        used,
                        plain,
                        closed: true,
                    })
                }
                _ => {
                    return Err(rustls::Error::General(
                        "post-handshake message (key update or renegotiation) not supported".into(),
                    ))
                }
            }
        }
        Ok(Opened {
            used,
            plain,
            closed: false,
        })
    }

    /// Appends `plain` to `out` as application data records.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), rustls::Error> {
        for chunk in plain.chunks(MAX_PLAIN) {
            self.seal_one(ContentType::ApplicationData, chunk, out)?;
        }
        Ok(())
    }

    /// Appends a close_notify alert to `out`.
    pub fn close_notify(&mut self, out: &mut Vec<u8>) -> Result<(), rustls::Error> {
        // Level warning (1), description close_notify (0).
        self.seal_one(ContentType::Alert, &[1, 0], out)
    }

    fn seal_one(
        &mut self,
        typ: ContentType,
        chunk: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), rustls::Error> {
        if self.tx_seq >= MAX_SEQ {
            return Err(rustls::Error::EncryptError);
        }
        let msg = OutboundPlainMessage {
            typ,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::Single(chunk),
        };
        let sealed = self.enc.encrypt(msg, self.tx_seq)?;
        self.tx_seq += 1;
        out.extend_from_slice(&sealed.encode());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;

    use rustls::unbuffered::ConnectionState;

    use super::*;

    /// A rustls client and an unbuffered server connection, handshaken in
    /// memory over `version`.
    fn handshaken(
        version: &'static rustls::SupportedProtocolVersion,
    ) -> (rustls::ClientConnection, UnbufferedServerConnection) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut sc = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        sc.enable_secret_extraction = true;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let cc = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut server = UnbufferedServerConnection::new(Arc::new(sc)).unwrap();
        let mut client =
            rustls::ClientConnection::new(Arc::new(cc), "localhost".try_into().unwrap()).unwrap();
        let mut inbuf = Vec::new();
        for _ in 0..10 {
            client.write_tls(&mut inbuf).unwrap();
            let mut out = Vec::new();
            loop {
                let st = server.process_tls_records(&mut inbuf);
                let used = st.discard;
                match st.state.unwrap() {
                    ConnectionState::EncodeTlsData(mut e) => {
                        let mut b = vec![0; 16384];
                        let n = e.encode(&mut b).unwrap();
                        out.extend_from_slice(&b[..n]);
                    }
                    ConnectionState::TransmitTlsData(t) => t.done(),
                    _ => {
                        inbuf.drain(..used);
                        break;
                    }
                }
                inbuf.drain(..used);
            }
            if !out.is_empty() {
                client.read_tls(&mut &out[..]).unwrap();
                client.process_new_packets().unwrap();
            }
            if !server.is_handshaking() && !client.is_handshaking() && !client.wants_write() {
                break;
            }
        }
        assert!(!server.is_handshaking());
        (client, server)
    }

    #[test]
    fn records_carry_data_both_ways_after_the_handshake() {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let (mut client, server) = handshaken(version);
            let mut records = Records::take(server).unwrap();
            // Server to client: more than one record.
            let big: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
            let mut wire = Vec::new();
            records.seal(&big, &mut wire).unwrap();
            let mut got = Vec::new();
            let mut rd = &wire[..];
            while !rd.is_empty() {
                client.read_tls(&mut rd).unwrap();
                client.process_new_packets().unwrap();
                let _ = client.reader().read_to_end(&mut got);
            }
            assert!(
                got == big,
                "{version:?}: {} bytes back of {}",
                got.len(),
                big.len()
            );
            // Client to server, the last record split across two reads.
            client.writer().write_all(b"hello throng").unwrap();
            client.writer().write_all(&big).unwrap();
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            let mut out = vec![0; wire.len()];
            let cut = wire.len() - 7;
            let first = records.open(&mut wire[..cut], &mut out).unwrap();
            assert!(first.used < cut && !first.closed);
            let mut rest = wire[first.used..].to_vec();
            let second = records.open(&mut rest, &mut out[first.plain..]).unwrap();
            assert_eq!(second.used, rest.len());
            let plain = &out[..first.plain + second.plain];
            assert_eq!(&plain[..12], b"hello throng");
            assert!(plain[12..] == big[..], "{version:?}");
            // A tampered record is refused.
            client.writer().write_all(b"x").unwrap();
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            let last = wire.len() - 1;
            wire[last] ^= 1;
            assert!(records.open(&mut wire, &mut out).is_err());
        }
    }

    #[test]
    fn close_notify_ends_it() {
        let (mut client, server) = handshaken(&rustls::version::TLS13);
        let mut records = Records::take(server).unwrap();
        client.send_close_notify();
        let mut wire = Vec::new();
        client.write_tls(&mut wire).unwrap();
        let mut out = vec![0; 64];
        let opened = records.open(&mut wire, &mut out).unwrap();
        assert!(opened.closed && opened.plain == 0);
        // Ours reaches the client as its close.
        let mut wire = Vec::new();
        records.close_notify(&mut wire).unwrap();
        client.read_tls(&mut &wire[..]).unwrap();
        let state = client.process_new_packets().unwrap();
        assert!(state.peer_has_closed());
    }
}
