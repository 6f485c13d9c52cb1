//! The `Idempotency-Key` reverse proxy: its own listener, forwarding to `[gateway] upstream` over
//! pooled HTTP/1.1 keep-alive connections. Requests on a guarded route go through the engine
//! (buffered, since their body is fingerprinted); every other request streams straight through,
//! unchanged but for hop-by-hop headers. Routes are matched on the normalised path, but the path
//! forwarded is byte for byte the client's. idem's own answers (a body too large, an upstream
//! unreachable) take the route's `errors` shape, or on no route `[gateway] errors`.
//!
//! At shutdown the proxy stops accepting and, together with draining its connections, gives the
//! upstream calls still running in the background (their clients got a 504) up to [`DRAIN`] to
//! answer and store their responses; any still running then are abandoned with their keys held
//! until their leases end, as if idem had died.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Uri};
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idem_core::{Clock, RequestStore};
use idem_gateway::engine::ForwardFuture;
use idem_gateway::headers::strip_hop_by_hop;
use idem_gateway::problem::Problem;
use idem_gateway::{Engine, ErrorShape, ForwardError, GatewayBody, Routes, declared_too_large, read_limited};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::GatewayConfig;
use crate::conn::{self, ConnLimits};

/// How long background upstream calls may finish after shutdown begins: the connections' drain.
pub const DRAIN: Duration = Duration::from_secs(30);
/// TCP keepalive on upstream connections: probes after 15 s of silence, every 5 s, 3 unanswered
/// and the connection is dead.
const UPSTREAM_KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const UPSTREAM_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const UPSTREAM_KEEPALIVE_RETRIES: u32 = 3;

pub struct Proxy {
    engine: Arc<Engine>,
    routes: Routes,
    upstream: Upstream,
    max_body_bytes: usize,
    /// The shape of idem's own answers to requests on no route: `[gateway] errors`.
    errors: ErrorShape,
}

struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, GatewayBody>,
    scheme: Scheme,
    authority: Authority,
    host: HeaderValue,
    base_path: String,
}

impl Proxy {
    pub fn new(
        config: &GatewayConfig,
        max_body_bytes: usize,
        store: Arc<dyn RequestStore>,
        clock: Arc<dyn Clock>,
        tls: &Arc<rustls::ClientConfig>,
        jwt: Option<Arc<idem_gateway::JwtVerifier>>,
    ) -> Self {
        let upstream = &config.upstream;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        // An upstream that vanished without a word (a host gone, a path black-holed) is found in
        // about 30 s rather than never: the call then breaks off (and max_call bounds it anyway).
        connector.set_keepalive(Some(UPSTREAM_KEEPALIVE_IDLE));
        connector.set_keepalive_interval(Some(UPSTREAM_KEEPALIVE_INTERVAL));
        connector.set_keepalive_retries(Some(UPSTREAM_KEEPALIVE_RETRIES));
        let connector = crate::tls::connector(connector, tls);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector);
        Self {
            engine: Arc::new(Engine::new(store, clock, config.engine_config(max_body_bytes))),
            routes: config.routes(jwt.as_ref(), crate::identity::resolver(config, tls).as_ref()),
            upstream: Upstream {
                client,
                scheme: upstream.scheme.clone(),
                authority: upstream.authority.clone(),
                host: upstream.host.clone(),
                base_path: upstream.base_path.clone(),
            },
            max_body_bytes,
            errors: config.errors(),
        }
    }

    pub fn engine(&self) -> Arc<Engine> {
        Arc::clone(&self.engine)
    }

    pub fn router(self) -> Router {
        Router::new().fallback(proxy).with_state(Arc::new(self))
    }

    /// Serves on `listener` (with TLS when `tls` is given: `[gateway.tls]`) until `stopped` turns
    /// true; then drains the connections and the background calls together.
    pub async fn serve(
        self,
        listener: TcpListener,
        limits: ConnLimits,
        tls: Option<tokio_rustls::TlsAcceptor>,
        stopped: watch::Receiver<bool>,
    ) {
        let engine = self.engine();
        let mut stop = stopped.clone();
        let background = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
            engine.drain(DRAIN).await;
        };
        tokio::join!(conn::serve_tls(listener, self.router(), limits, tls, stopped), background);
    }
}

async fn proxy(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let Some(route) = proxy.routes.find(request.method(), request.uri().path()).cloned() else {
        let request = request.map(|b| b.map_err(Into::into).boxed_unsync());
        return match proxy.upstream.send(request).await {
            Ok(response) => response.into_response(),
            Err(e) => {
                tracing::warn!(error = ?e, "upstream request failed");
                let answer = Problem::UpstreamUnavailable.answer("the upstream could not be reached");
                proxy.errors.render(answer).into_response()
            }
        };
    };
    let (parts, body) = request.into_parts();
    if let Some(e) = declared_too_large(&parts.headers, proxy.max_body_bytes) {
        return route.errors.render(e.into_response()).into_response();
    }
    let bytes = match read_limited(body, proxy.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(e) => return route.errors.render(e.into_response()).into_response(),
    };
    let sender = Arc::clone(&proxy);
    let forward = move |request: http::Request<Bytes>| -> ForwardFuture {
        Box::pin(async move { sender.upstream.send(request.map(idem_gateway::full)).await })
    };
    proxy.engine.handle(&route, http::Request::from_parts(parts, bytes), forward).await.into_response()
}

impl Upstream {
    /// Sends a request to the upstream: same method, path, query, headers and body, minus
    /// hop-by-hop headers, with `Host` naming the upstream.
    async fn send(&self, request: http::Request<GatewayBody>) -> Result<http::Response<GatewayBody>, ForwardError> {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", PathAndQuery::as_str);
        // What the log may name: the upstream's URL without its query (which may carry secrets).
        let shown = format!("{}://{}{}{}", self.scheme, self.authority, self.base_path, parts.uri.path());
        parts.uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{path}", self.base_path))
            .build()
            .map_err(|e| ForwardError::Unreachable(format!("{shown}: {e}")))?;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(HOST, self.host.clone());
        parts.version = http::Version::HTTP_11;
        let response = self.client.request(http::Request::from_parts(parts, body)).await.map_err(|e| {
            let why = format!("{shown}: {}", idem_core::error::chain(&e));
            if e.is_connect() { ForwardError::Unreachable(why) } else { ForwardError::Failed(why) }
        })?;
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(http::Response::from_parts(parts, body.map_err(Into::into).boxed_unsync()))
    }
}
