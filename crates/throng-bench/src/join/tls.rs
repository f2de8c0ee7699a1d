//! TLS for the closed-loop clients (the storm's and the handshake
//! rounds'): tokio-rustls over [`super::connect`]'s socket, trusting the
//! run's CA, each client with a session ticket of its own ([`Ticket`]).
//!
//! Why a store per client: a browser or an app keeps the tickets its
//! server sent it, so its first connect is a full handshake and a
//! reconnect resumes. rustls's own cache (`Resumption::in_memory_sessions`)
//! is keyed by server name alone: every client of a process would share
//! it, and a client's *first* connect would resume with a ticket another
//! client was sent, which makes new clients look as cheap as returning
//! ones. A [`Ticket`] is the client's own store (`Resumption::store`),
//! given to the config of each of its connects.

use std::io;
use std::sync::{Arc, Mutex};

use rustls::client::{
    ClientSessionStore, Resumption, Tls12ClientSessionValue, Tls13ClientSessionValue,
};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, HandshakeKind, NamedGroup};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use super::Stream;

/// What a client needs to speak TLS to the server: sent in an agent's plan
/// and in a storm client's orders.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TlsPlan {
    /// PEM certificates to trust (the CA of the server's certificate).
    pub ca_pem: String,
    /// The name the server's certificate is checked against (and SNI).
    pub server_name: String,
}

/// Makes TLS connections for many clients from one base config.
pub struct Connector {
    base: ClientConfig,
    name: ServerName<'static>,
}

impl Connector {
    /// A connector trusting `plan`'s CA, speaking TLS 1.3 or 1.2 with ALPN
    /// `http/1.1`, as browsers do for `wss://`.
    pub fn new(plan: &TlsPlan) -> io::Result<Connector> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut plan.ca_pem.as_bytes()) {
            roots.add(cert?).map_err(io::Error::other)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut base = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        base.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(plan.server_name.clone()).map_err(io::Error::other)?;
        Ok(Connector { base, name })
    }

    /// The TLS handshake over `tcp`, offering `ticket`'s session if it holds
    /// one and keeping the one the server sends; returns the stream and
    /// whether the handshake resumed a session.
    pub async fn connect(
        &self,
        tcp: TcpStream,
        ticket: &Arc<Ticket>,
    ) -> io::Result<(Stream, bool)> {
        let mut config = self.base.clone();
        config.resumption = Resumption::store(Arc::clone(ticket) as Arc<dyn ClientSessionStore>);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tls = connector.connect(self.name.clone(), tcp).await?;
        let resumed = tls.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
        Ok((Stream::Tls(Box::new(tls)), resumed))
    }
}

/// One client's TLS session store: the last TLS 1.3 ticket its server
/// sent it (a server sends one per handshake), taken by its next connect.
/// TLS 1.2 sessions are not kept (the bench's servers speak 1.3).
#[derive(Debug, Default)]
pub struct Ticket {
    /// Locked only by the client's own connects (one at a time): the
    /// trait wants `Sync`.
    tls13: Mutex<Option<Tls13ClientSessionValue>>,
}

impl Ticket {
    /// Whether it holds a ticket to offer.
    pub fn held(&self) -> bool {
        self.tls13.lock().is_ok_and(|t| t.is_some())
    }
}

impl ClientSessionStore for Ticket {
    fn set_kx_hint(&self, _: ServerName<'static>, _: NamedGroup) {}

    fn kx_hint(&self, _: &ServerName<'_>) -> Option<NamedGroup> {
        None
    }

    fn set_tls12_session(&self, _: ServerName<'static>, _: Tls12ClientSessionValue) {}

    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        None
    }

    fn remove_tls12_session(&self, _: &ServerName<'static>) {}

    fn insert_tls13_ticket(&self, _: ServerName<'static>, value: Tls13ClientSessionValue) {
        if let Ok(mut t) = self.tls13.lock() {
            *t = Some(value);
        }
    }

    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        self.tls13.lock().ok()?.take()
    }
}
