//! TLS (docs/security.md#tls), with rustls and its ring provider: one stack for everything.
//!
//! - **Listeners** (`[tls]` for the API, `[gateway.tls]` for the gateway): a [`Certificate`] holds
//!   the certificate and key that new handshakes get; [`watch`] swaps it when the files change
//!   (their size, time or inode, checked every `watch_interval`) or on SIGHUP. Connections already
//!   open keep the certificate they began with: nothing is dropped. A file that cannot be read or
//!   does not match its key is logged and the certificate in use stays (a renewal tool writes the
//!   two files one after the other: the pair is tried again when either changes).
//! - **Outbound** (`https://` handlers, result webhooks, the gateway's upstream): a client config
//!   that trusts the system's roots plus `[tls] ca_file`, and a connector for hyper-util's client
//!   that speaks plain HTTP or TLS as the URL says.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::sync::watch as signal_watch;
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, ListenerTls};

/// Why TLS cannot be set up: a file that does not read as what it should hold, a certificate and key
/// that do not match, or rustls refusing its settings. Each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: cannot read certificates (PEM): {source}", path.display())]
    Certificates { path: PathBuf, source: pem::Error },
    #[error("{}: holds no certificate (PEM, BEGIN CERTIFICATE)", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no private key could be read (PEM: PKCS#8, PKCS#1 or SEC1): {source}", path.display())]
    Key { path: PathBuf, source: pem::Error },
    #[error("{} and {} do not make a pair: {source}", cert.display(), key.display())]
    Pair { cert: PathBuf, key: PathBuf, source: rustls::Error },
    #[error("{}: a certificate could not be used as a root: {source}", path.display())]
    Root { path: PathBuf, source: rustls::Error },
    /// The protocol versions rustls was asked for (never, with its safe defaults).
    #[error(transparent)]
    Rustls(#[from] rustls::Error),
    /// One of the above, in the config table (or key) it comes from: `tls`, `gateway.tls`,
    /// `tls.ca_file`.
    #[error("{key}: {error}")]
    In { key: &'static str, error: Box<TlsError> },
}

impl TlsError {
    fn within(self, key: &'static str) -> Self {
        Self::In { key, error: Box::new(self) }
    }
}

fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

/// A listener's certificate: what new handshakes are given, swapped by [`watch`].
#[derive(Debug)]
pub struct Certificate {
    files: ListenerTls,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files as they were when `current` was read, or last tried.
    seen: RwLock<Option<Stamp>>,
}

/// What tells that a file changed: its length, modification time and inode (a renewal that
/// replaces a symlink's target changes the inode even when time and length agree).
type Stamp = [(u64, Option<SystemTime>, u64); 2];

impl Certificate {
    /// Reads the files; an error names the file and what is wrong with it.
    pub fn load(files: &ListenerTls) -> Result<Arc<Self>, TlsError> {
        let seen = stamp(files);
        let key = read_pair(files)?;
        Ok(Arc::new(Self { files: files.clone(), current: RwLock::new(Arc::new(key)), seen: RwLock::new(seen) }))
    }

    /// An acceptor whose handshakes take the current certificate.
    pub fn acceptor(self: &Arc<Self>) -> Result<TlsAcceptor, TlsError> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Reads the files again if they changed since they were last read (or always, when `force`);
    /// answers whether the certificate was swapped.
    pub fn reload(&self, force: bool) -> bool {
        let now = stamp(&self.files);
        {
            let seen = self.seen.read().unwrap_or_else(|p| p.into_inner());
            if !force && *seen == now {
                return false;
            }
        }
        *self.seen.write().unwrap_or_else(|p| p.into_inner()) = now;
        match read_pair(&self.files) {
            Ok(key) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded: new connections get it");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "TLS certificate not reloaded; the one in use stays");
                false
            }
        }
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner())))
    }
}

fn stamp(files: &ListenerTls) -> Option<Stamp> {
    let one = |path: &Path| {
        let meta = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some((meta.len(), meta.modified().ok(), inode))
    };
    Some([one(&files.cert)?, one(&files.key)?])
}

fn read_pair(files: &ListenerTls) -> Result<CertifiedKey, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Key { path: files.key.clone(), source })?;
    CertifiedKey::from_der(certs, key, &provider()).map_err(|source| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Certificates { path: path.to_owned(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_owned() });
    }
    Ok(certs)
}

/// SIGHUP, listened for from the moment this is made (so that one sent as soon as idem says it
/// listens is not lost, nor does it stop the process as its default action would).
pub struct Hangup {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangup {
    pub fn listen() -> Self {
        Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok(),
        }
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(signal) = self.signal.as_mut() {
            signal.recv().await;
            return;
        }
        std::future::pending::<()>().await
    }
}

/// Keeps the listeners' certificates current until `stopped`: on SIGHUP, and whenever their files
/// change. It runs with no certificate too, so that a SIGHUP (`systemctl reload`) never stops an
/// idem without TLS: it says there is nothing to read again. `on_hangup` runs on every SIGHUP too
/// (the tokens are read again).
pub async fn watch(
    certificates: Vec<Arc<Certificate>>,
    mut hangup: Hangup,
    on_hangup: impl Fn() + Send + 'static,
    mut stopped: signal_watch::Receiver<bool>,
) {
    let interval = certificates.iter().map(|c| c.files.watch_interval.0).min().unwrap_or(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = hangup.recv() => {
                on_hangup();
                if certificates.is_empty() {
                    tracing::info!("SIGHUP: no [tls] or [gateway.tls] certificate to read again");
                }
                for certificate in &certificates {
                    tracing::info!(cert = %certificate.files.cert.display(), "SIGHUP: reading the TLS certificate and key again");
                    certificate.reload(true);
                }
            }
            _ = tokio::time::sleep(interval) => {
                for certificate in &certificates {
                    certificate.reload(false);
                }
            }
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}

/// The roots outbound `https://` requests are verified against: the system's, and `ca_file`'s.
/// Without `ca_file` the config is made once per process (every CLI and test client shares it).
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    static SYSTEM_ONLY: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if ca_file.is_none()
        && let Some(config) = SYSTEM_ONLY.get()
    {
        return Ok(Arc::clone(config));
    }
    let config = make_client_config(ca_file)?;
    if ca_file.is_none() {
        return Ok(Arc::clone(SYSTEM_ONLY.get_or_init(|| config)));
    }
    Ok(config)
}

fn make_client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(path) = ca_file {
        for cert in read_certs(path)? {
            roots.add(cert).map_err(|source| TlsError::Root { path: path.to_owned(), source })?;
        }
    } else if added == 0 {
        tracing::debug!("no system root certificates found (install ca-certificates)");
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Whether any system root certificate was found: without one (and without `ca_file`) no
/// `https://` URL can be verified.
pub fn has_system_roots() -> bool {
    !system_roots().is_empty()
}

/// The system's root certificates, read once per process.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in found.errors.iter().take(3) {
            tracing::debug!(error = %e, "a system root certificate could not be read");
        }
        found.certs
    })
}

/// A connector for hyper-util's client that speaks TLS to `https://` URLs and plain HTTP to
/// `http://` ones, over `http` (whose settings, such as its connect timeout, it keeps).
pub fn connector(mut http: HttpConnector, tls: &Arc<ClientConfig>) -> HttpsConnector<HttpConnector> {
    http.enforce_http(false);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(ClientConfig::clone(tls))
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

/// The listeners' certificates, loaded for `config`: the API's and the gateway's.
pub struct ListenerCerts {
    pub api: Option<Arc<Certificate>>,
    pub gateway: Option<Arc<Certificate>>,
}

impl ListenerCerts {
    pub fn load(config: &Config) -> Result<Self, TlsError> {
        let load = |key: &'static str, files: Option<ListenerTls>| {
            files.map(|f| Certificate::load(&f).map_err(|e| e.within(key))).transpose()
        };
        Ok(Self {
            api: load("tls", config.tls.listener())?,
            gateway: load("gateway.tls", config.gateway.as_ref().and_then(|g| g.tls.clone()))?,
        })
    }
}

/// What `idem config check` checks of the files `[tls]` and `[gateway.tls]` name: that each can be
/// read and that each certificate matches its key.
pub fn check_files(config: &Config) -> Result<(), TlsError> {
    ListenerCerts::load(config)?;
    if let Some(path) = &config.tls.ca_file {
        read_certs(path).map_err(|e| e.within("tls.ca_file"))?;
    }
    Ok(())
}
