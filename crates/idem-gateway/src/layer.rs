//! The engine as a tower layer, for Rust services: wrap a router and its guarded routes get the
//! same idempotency as behind the proxy, on any [`RequestStore`](idem_core::RequestStore).
//!
//! ```ignore
//! let engine = Arc::new(Engine::new(store, Arc::new(SystemClock), EngineConfig::default()));
//! let app = Router::new().route("/orders", post(create_order)).layer(IdempotencyLayer::new(engine, routes));
//! ```
//!
//! As behind the proxy, a key belongs to one caller: a route's `scope` names what says who is
//! calling (`ScopePart::Header`, `Cookie`, `Jwt`), and a keyed request carrying none of it is
//! `400`. A route with `Jwt` parts needs a verifier the application builds
//! ([`crate::JwtVerifier`]: an HS256 secret, a PEM public key, or a JWKS fetched by a
//! [`crate::JwksSource`] over its own HTTP client), given with `RoutePolicy::with_jwt`.
//!
//! As behind the proxy, a handler slower than its route's `upstream_timeout` gets its client a
//! `504` and goes on running in the background, its key held (the lease extended) until its
//! response is stored for the retry. The handler is not cancelled. At shutdown, call
//! [`Engine::drain`] after the server stops, so that those handlers can finish and store their
//! answers before the store closes.
//!
//! A route's `errors` ([`crate::ErrorShape`]) is the shape of every answer the layer makes for it,
//! the 413 of a body too large included; the handler's own responses are never rewritten. A request
//! on no route that the service fails is answered `500` problem+json.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use tower::{Layer, Service, ServiceExt};

use crate::body::{declared_too_large, read_limited};
use crate::engine::{Engine, ForwardError, ForwardFuture};
use crate::policy::Routes;
use crate::problem::{Answered, Problem};
use crate::{BoxError, GatewayBody};

#[derive(Clone)]
pub struct IdempotencyLayer {
    engine: Arc<Engine>,
    routes: Arc<Routes>,
}

impl IdempotencyLayer {
    pub fn new(engine: Arc<Engine>, routes: Routes) -> Self {
        Self { engine, routes: Arc::new(routes) }
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Idempotency<S> {
        Idempotency { inner, engine: Arc::clone(&self.engine), routes: Arc::clone(&self.routes) }
    }
}

#[derive(Clone)]
pub struct Idempotency<S> {
    inner: S,
    engine: Arc<Engine>,
    routes: Arc<Routes>,
}

/// The service's own response: whatever it carries, never written again as idem's answer.
fn boxed<B>(mut response: Response<B>) -> Response<GatewayBody>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    response.extensions_mut().remove::<Answered>();
    response.map(|b| b.map_err(Into::into).boxed_unsync())
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotency<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ReqBody: http_body::Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<GatewayBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each call drives a clone of the inner service to readiness itself (`oneshot`).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (inner, engine, routes) = (self.inner.clone(), Arc::clone(&self.engine), Arc::clone(&self.routes));
        Box::pin(async move {
            let Some(route) = routes.find(request.method(), request.uri().path()).cloned() else {
                return Ok(match inner.oneshot(request).await {
                    Ok(response) => boxed(response),
                    Err(e) => {
                        // The inner service's error is for the operator, not the client.
                        tracing::error!(error = %e.into(), "the inner service failed");
                        Problem::Internal.answer("the request failed inside the service")
                    }
                });
            };
            let (parts, body) = request.into_parts();
            if let Some(e) = declared_too_large(&parts.headers, engine.config().max_body_bytes) {
                return Ok(route.errors.render(e.into_response()));
            }
            let bytes = match read_limited(body, engine.config().max_body_bytes).await {
                Ok(bytes) => bytes,
                Err(e) => return Ok(route.errors.render(e.into_response())),
            };
            let forward = move |request: Request<Bytes>| -> ForwardFuture {
                Box::pin(async move {
                    let request = request.map(ReqBody::from);
                    inner.oneshot(request).await.map(boxed).map_err(|e| ForwardError::Failed(e.into().to_string()))
                })
            };
            Ok(engine.handle(&route, Request::from_parts(parts, bytes), forward).await)
        })
    }
}
