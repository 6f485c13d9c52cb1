//! Asking the app who is calling (`[gateway.identity]`), over idem's outbound client: a `GET` of the
//! app's endpoint with the request's credentials, its answer read whole (at most
//! `MAX_ANSWER_BYTES`). The resolver (idem_gateway::identity) decides when to ask, caches, and
//! bounds the wait; this file only sends. The URL is logged on failure without its query (which
//! may carry secrets); the credentials never are.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_gateway::identity::{IdentityFuture, MAX_ANSWER_BYTES};
use idem_gateway::{IdentityResolver, IdentitySource};

use crate::config::GatewayConfig;

/// The resolver `[gateway.identity]` describes, or none when the gateway has no such table.
pub fn resolver(gateway: &GatewayConfig, tls: &Arc<rustls::ClientConfig>) -> Option<Arc<IdentityResolver>> {
    let config = gateway.identity.as_ref()?;
    let url: http::Uri = config.url(&gateway.upstream.to_string()).parse().ok()?;
    let source = Arc::new(HttpIdentity::new(url, config.timeout.0, tls));
    Some(Arc::new(IdentityResolver::new(source, config.forward(), config.id_from(), config.cache.0, config.timeout.0)))
}

struct HttpIdentity {
    url: http::Uri,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl HttpIdentity {
    fn new(url: http::Uri, timeout: Duration, tls: &Arc<rustls::ClientConfig>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(crate::tls::connector(connector, tls));
        Self { url, client }
    }

    /// The URL as the log may name it: without its query.
    fn shown(&self) -> String {
        format!(
            "{}://{}{}",
            self.url.scheme_str().unwrap_or("http"),
            self.url.authority().map_or("", |a| a.as_str()),
            self.url.path()
        )
    }

    async fn get(&self, headers: HeaderMap) -> Result<Response<Bytes>, idem_gateway::identity::BoxError> {
        let mut request =
            Request::get(self.url.clone()).header(http::header::ACCEPT, "application/json").body(Empty::new())?;
        request.headers_mut().extend(headers);
        let response = self.client.request(request).await.map_err(|e| format!("{}: {e}", self.shown()))?;
        let (parts, body) = response.into_parts();
        let body =
            Limited::new(body, MAX_ANSWER_BYTES).collect().await.map_err(|e| format!("{}: {e}", self.shown()))?;
        Ok(Response::from_parts(parts, body.to_bytes()))
    }
}

impl IdentitySource for HttpIdentity {
    fn ask(&self, headers: HeaderMap) -> IdentityFuture<'_> {
        Box::pin(self.get(headers))
    }
}
