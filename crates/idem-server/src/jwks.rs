//! The gateway's JWT verifier, built from `[gateway.jwt]`: a PEM public key or an HS256 secret
//! read at start-up, or a JWKS fetched over idem's outbound client (the system's roots and
//! `[tls] ca_file`, as handlers and result webhooks are reached). The verifier decides when to
//! fetch (idem_gateway::jwt: on first use, for an unknown `kid`, hourly); this file only fetches:
//! a `GET` that must answer `200` within [`FETCH_TIMEOUT`] with at most [`MAX_JWKS_BYTES`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_gateway::JwtVerifier;
use idem_gateway::jwt::{BadKey, BoxError, JwksFuture, JwksSource};

use crate::config::JwtConfig;
use crate::tls::TlsError;

/// How long one fetch of the JWKS may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JWKS read: a provider's has a few keys of a few hundred bytes each.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// Why `[gateway.jwt]` gives no verifier; each names the key at fault (never the secret).
#[derive(Debug, thiserror::Error)]
pub enum JwtKeyError {
    #[error("gateway.jwt.public_key_file: cannot read {}: {source}", path.display())]
    Read { path: std::path::PathBuf, source: std::io::Error },
    #[error("gateway.jwt.public_key_file: {}: {source}", path.display())]
    PublicKey { path: std::path::PathBuf, source: BadKey },
    #[error("gateway.jwt.secret: {0}")]
    Secret(#[source] BadKey),
    #[error("gateway.jwt: give one of jwks_url, public_key_file or secret")]
    NoKey,
    /// The outbound client the check builds the verifier with.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The verifier `[gateway.jwt]` describes; an error names the key at fault (never the secret).
pub fn verifier(config: &JwtConfig, tls: &Arc<rustls::ClientConfig>) -> Result<JwtVerifier, JwtKeyError> {
    let verifier = if let Some(url) = &config.jwks_url {
        JwtVerifier::jwks(Arc::new(HttpJwks::new(url.uri().clone(), tls)))
    } else if let Some(path) = &config.public_key_file {
        let pem = std::fs::read(path).map_err(|source| JwtKeyError::Read { path: path.clone(), source })?;
        JwtVerifier::public_key_pem(&pem).map_err(|source| JwtKeyError::PublicKey { path: path.clone(), source })?
    } else if let Some(secret) = &config.secret {
        JwtVerifier::hs256(secret.expose().as_bytes()).map_err(JwtKeyError::Secret)?
    } else {
        return Err(JwtKeyError::NoKey);
    };
    let verifier = match &config.issuer {
        Some(issuer) => verifier.issuer([issuer.clone()]),
        None => verifier,
    };
    Ok(match &config.audience {
        Some(audience) => verifier.audience([audience.clone()]),
        None => verifier,
    })
}

/// What `idem config check` checks of `[gateway.jwt]`: that the public key file reads as a key.
pub fn check_files(config: &crate::Config) -> Result<(), JwtKeyError> {
    match config.gateway.as_ref().and_then(|g| g.jwt.as_ref()) {
        Some(jwt) if jwt.public_key_file.is_some() => verifier(jwt, &crate::tls::client_config(None)?).map(|_| ()),
        _ => Ok(()),
    }
}

/// Why one fetch of the JWKS failed; each names the URL. (Handed to the verifier boxed, as a
/// [`JwksSource`]'s error.)
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{url}: {source}")]
    Send { url: http::Uri, source: hyper_util::client::legacy::Error },
    #[error("{url} answered {status}")]
    Status { url: http::Uri, status: http::StatusCode },
    /// The body broke off, or passed [`MAX_JWKS_BYTES`].
    #[error("{url}: {source} (at most {} bytes are read)", MAX_JWKS_BYTES)]
    Body { url: http::Uri, source: BoxError },
    #[error("{url}: no answer within {:?}", FETCH_TIMEOUT)]
    Timeout { url: http::Uri },
}

struct HttpJwks {
    url: http::Uri,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl HttpJwks {
    fn new(url: http::Uri, tls: &Arc<rustls::ClientConfig>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(FETCH_TIMEOUT));
        let client = Client::builder(TokioExecutor::new()).build(crate::tls::connector(connector, tls));
        Self { url, client }
    }

    async fn get(&self) -> Result<Bytes, BoxError> {
        let url = || self.url.clone();
        let request = http::Request::get(url()).header(http::header::ACCEPT, "application/json").body(Empty::new())?;
        let response = self.client.request(request).await.map_err(|source| FetchError::Send { url: url(), source })?;
        if response.status() != http::StatusCode::OK {
            return Err(FetchError::Status { url: url(), status: response.status() }.into());
        }
        let body = Limited::new(response.into_body(), MAX_JWKS_BYTES).collect().await;
        Ok(body.map_err(|source| FetchError::Body { url: url(), source })?.to_bytes())
    }
}

impl JwksSource for HttpJwks {
    fn fetch(&self) -> JwksFuture<'_> {
        Box::pin(async move {
            let fetched = tokio::time::timeout(FETCH_TIMEOUT, self.get()).await;
            fetched.unwrap_or_else(|_| Err(FetchError::Timeout { url: self.url.clone() }.into()))
        })
    }
}
