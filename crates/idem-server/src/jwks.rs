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
use idem_gateway::jwt::{JwksFuture, JwksSource};

use crate::config::JwtConfig;

/// How long one fetch of the JWKS may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JWKS read: a provider's has a few keys of a few hundred bytes each.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// The verifier `[gateway.jwt]` describes; an error names the key at fault (never the secret).
pub fn verifier(config: &JwtConfig, tls: &Arc<rustls::ClientConfig>) -> Result<JwtVerifier, String> {
    let verifier = if let Some(url) = &config.jwks_url {
        JwtVerifier::jwks(Arc::new(HttpJwks::new(url.uri().clone(), tls)))
    } else if let Some(path) = &config.public_key_file {
        let pem = std::fs::read(path)
            .map_err(|e| format!("gateway.jwt.public_key_file: cannot read {}: {e}", path.display()))?;
        JwtVerifier::public_key_pem(&pem)
            .map_err(|e| format!("gateway.jwt.public_key_file: {}: {e}", path.display()))?
    } else if let Some(secret) = &config.secret {
        JwtVerifier::hs256(secret.expose().as_bytes()).map_err(|e| format!("gateway.jwt.secret: {e}"))?
    } else {
        return Err("gateway.jwt: give one of jwks_url, public_key_file or secret".into());
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
pub fn check_files(config: &crate::Config) -> Result<(), String> {
    match config.gateway.as_ref().and_then(|g| g.jwt.as_ref()) {
        Some(jwt) if jwt.public_key_file.is_some() => verifier(jwt, &crate::tls::client_config(None)?).map(|_| ()),
        _ => Ok(()),
    }
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

    async fn get(&self) -> Result<Bytes, String> {
        let request = http::Request::get(self.url.clone())
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        let response = self.client.request(request).await.map_err(|e| format!("{}: {e}", self.url))?;
        if response.status() != http::StatusCode::OK {
            return Err(format!("{} answered {}", self.url, response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_JWKS_BYTES).collect().await;
        body.map(|b| b.to_bytes()).map_err(|e| format!("{}: {e} (at most {MAX_JWKS_BYTES} bytes are read)", self.url))
    }
}

impl JwksSource for HttpJwks {
    fn fetch(&self) -> JwksFuture<'_> {
        Box::pin(async move {
            tokio::time::timeout(FETCH_TIMEOUT, self.get())
                .await
                .unwrap_or_else(|_| Err(format!("{}: no answer within {FETCH_TIMEOUT:?}", self.url)))
        })
    }
}
