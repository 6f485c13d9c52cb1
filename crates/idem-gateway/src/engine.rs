//! The engine: one request on a guarded route, from its `Idempotency-Key` to its answer.
//!
//! 1. No key: 400 on a `required` route, else forwarded without idempotency. A bad key: 400.
//! 2. The key's id is (route, scope, key); the request's fingerprint is method, path, query, body.
//! 3. A completed response in the replay cache or the store is replayed (or 422 on another
//!    fingerprint); the upstream is not called.
//! 4. Otherwise `begin_request` atomically takes the key. Whoever gets it forwards, then stores the
//!    response (compare-and-set on its lease token) or releases the key for transient failures.
//!    Everyone else gets 409 (`reject`), or waits to be woken by the holder (`wait`).
//!
//! A held request runs in its own task: a client that hangs up does not abandon the upstream call,
//! whose result is still stored for the retry. If idem dies or the upstream hangs, the key stays
//! held until the lease ends, then a retry executes again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use idem_core::gateway::{
    Begin, InFlightPolicy, KeyPolicy, LeaseToken, NewRequest, StoredResponse, fingerprint, keeps_response,
    parse_idempotency_key, request_id,
};
use idem_core::{ClaimId, Clock, Store};
use tokio::time::Instant;

use crate::cache::{Cached, ReplayCache};
use crate::headers::strip_hop_by_hop;
use crate::policy::{RoutePolicy, ScopePart};
use crate::problem::{in_flight, problem};
use crate::waiters::{Waiters, WakeOnDrop};
use crate::{BoxError, GatewayBody, full};

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest request body buffered on a guarded route (413 above it).
    pub max_body_bytes: usize,
    /// Largest response stored; a larger one is passed through and its key released.
    pub max_stored_response: usize,
    /// Memory for the replay cache of completed responses.
    pub cache_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { max_body_bytes: 1 << 20, max_stored_response: 1 << 20, cache_bytes: 64 << 20 }
    }
}

/// Why forwarding failed.
#[derive(Debug)]
pub enum ForwardError {
    /// Nothing reached the upstream (connection refused, no route to host).
    Unreachable(String),
    /// The exchange broke off after the request may have been sent.
    Failed(String),
}

pub type ForwardFuture = Pin<Box<dyn Future<Output = Result<Response<GatewayBody>, ForwardError>> + Send>>;

pub struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    cache: ReplayCache,
    waiters: Arc<Waiters>,
    config: EngineConfig,
}

fn count(route: &RoutePolicy, outcome: &'static str) {
    metrics::counter!("idem_gateway_requests_total", "route" => route.path.as_str().to_owned(), "outcome" => outcome)
        .increment(1);
}

impl Engine {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, config: EngineConfig) -> Self {
        let cache = ReplayCache::new(config.cache_bytes);
        Self { store, clock, cache, waiters: Arc::default(), config }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Wakes this node's duplicates waiting on a key that another node completed or released.
    pub fn wake(&self, id: &ClaimId) {
        self.waiters.wake(id);
    }

    /// Answers one request on a guarded route; `forward` sends it on when it is to execute.
    pub async fn handle<F>(
        self: &Arc<Self>,
        route: &Arc<RoutePolicy>,
        request: Request<Bytes>,
        forward: F,
    ) -> Response<GatewayBody>
    where
        F: FnOnce(Request<Bytes>) -> ForwardFuture + Send + 'static,
    {
        let key = match request.headers().get(IDEMPOTENCY_KEY) {
            None if route.key == KeyPolicy::Required => {
                count(route, "missing_key");
                return problem(
                    StatusCode::BAD_REQUEST,
                    "missing-idempotency-key",
                    "this route requires an Idempotency-Key header",
                );
            }
            None => {
                count(route, "no_key");
                return forward(request).await.unwrap_or_else(|e| upstream_failed(&e));
            }
            Some(value) => match value
                .to_str()
                .map_err(|_| "the Idempotency-Key may contain only printable ASCII")
                .and_then(parse_idempotency_key)
            {
                Ok(key) => key,
                Err(detail) => {
                    count(route, "invalid_key");
                    return problem(StatusCode::BAD_REQUEST, "invalid-idempotency-key", detail);
                }
            },
        };
        let scope: Vec<&[u8]> = route
            .scope
            .iter()
            .map(|ScopePart::Header(name)| request.headers().get(name).map_or(&b""[..], HeaderValue::as_bytes))
            .collect();
        let id = request_id(route.path.as_str(), &scope, &key);
        let uri = request.uri();
        let json = is_json(request.headers().get(header::CONTENT_TYPE));
        let fp = fingerprint(request.method().as_str(), uri.path(), uri.query().unwrap_or(""), request.body(), json);
        if let Some(hit) = self.cache.get(&id, self.clock.now()) {
            return answer_completed(route, hit.fingerprint == fp, &hit.response);
        }
        let deadline = Instant::now() + route.wait_timeout;
        loop {
            // Subscribe before looking, so that a completion in between still wakes us.
            let mut woken = (route.in_flight == InFlightPolicy::Wait)
                .then(|| Box::pin(self.waiters.subscribe(&id).notified_owned()));
            if let Some(w) = woken.as_mut() {
                w.as_mut().enable();
            }
            match self.store.begin_request(NewRequest { id, fingerprint: fp, lease: route.lease }).await {
                Err(e) => {
                    tracing::warn!(error = %e, "gateway store unavailable");
                    count(route, "store_error");
                    return problem(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "store-unavailable",
                        "the idempotency store is unavailable; nothing was forwarded, retry shortly",
                    );
                }
                Ok(Begin::Started { token, lease_expired }) => {
                    if lease_expired {
                        metrics::counter!("idem_gateway_lease_expiries_total", "route" => route.path.as_str().to_owned()).increment(1);
                    }
                    return self.execute(route, id, fp, token, request, forward).await;
                }
                Ok(Begin::Completed { same_fingerprint, response, expires_at }) => {
                    let response = Arc::new(response);
                    if same_fingerprint {
                        self.cache.insert(id, Cached { fingerprint: fp, response: Arc::clone(&response), expires_at });
                    }
                    return answer_completed(route, same_fingerprint, &response);
                }
                Ok(Begin::InFlight { same_fingerprint: false, .. }) => return mismatch(route),
                Ok(Begin::InFlight { .. }) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let Some(woken) = woken.filter(|_| !left.is_zero()) else {
                        count(route, "conflict");
                        return in_flight(1);
                    };
                    // Woken by the holder on this node, or look again after a second (the holder
                    // may be another node), or give up at the deadline.
                    let _ = tokio::time::timeout(left.min(Duration::from_secs(1)), woken).await;
                }
            }
        }
    }

    /// Runs a request whose key this node now holds, in a task of its own.
    async fn execute<F>(
        self: &Arc<Self>,
        route: &Arc<RoutePolicy>,
        id: ClaimId,
        fp: [u8; 32],
        token: LeaseToken,
        request: Request<Bytes>,
        forward: F,
    ) -> Response<GatewayBody>
    where
        F: FnOnce(Request<Bytes>) -> ForwardFuture + Send + 'static,
    {
        let (engine, route) = (Arc::clone(self), Arc::clone(route));
        let held = tokio::spawn(async move { engine.run_held(&route, id, fp, token, request, forward).await });
        held.await.unwrap_or_else(|_| {
            problem(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the request failed inside idem")
        })
    }

    async fn run_held<F>(
        &self,
        route: &RoutePolicy,
        id: ClaimId,
        fp: [u8; 32],
        token: LeaseToken,
        request: Request<Bytes>,
        forward: F,
    ) -> Response<GatewayBody>
    where
        F: FnOnce(Request<Bytes>) -> ForwardFuture,
    {
        let _wake = WakeOnDrop { waiters: Arc::clone(&self.waiters), id };
        let started = Instant::now();
        let lease_end = started + route.lease;
        let upstream = tokio::time::timeout_at(lease_end, forward(request)).await;
        metrics::histogram!("idem_gateway_upstream_duration_seconds", "route" => route.path.as_str().to_owned())
            .record(started.elapsed().as_secs_f64());
        let response = match upstream {
            Err(_) => return upstream_timeout(route),
            Ok(Err(e)) => {
                self.release(id, token).await;
                count(route, "upstream_error");
                return upstream_failed(&e);
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        if !keeps_response(status, route.store_5xx) {
            self.release(id, token).await;
            count(route, "released");
            return response;
        }
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let body = match tokio::time::timeout_at(lease_end, read_capped(body, self.config.max_stored_response)).await {
            Err(_) => return upstream_timeout(route),
            Ok(Err(e)) => {
                self.release(id, token).await;
                count(route, "upstream_error");
                return upstream_failed(&ForwardError::Failed(e.to_string()));
            }
            Ok(Ok(Capped::Over(prefix, rest))) => {
                self.release(id, token).await;
                count(route, "too_large");
                return Response::from_parts(parts, Prefixed { prefix, rest }.boxed_unsync());
            }
            Ok(Ok(Capped::Whole(body))) => body,
        };
        let headers = parts.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect();
        let stored = StoredResponse { status, headers, body: body.to_vec() };
        match self.store.complete_request(&id, token, &stored, route.ttl).await {
            Ok(true) => {
                let expires_at = self.clock.now().plus(route.ttl);
                self.cache.insert(id, Cached { fingerprint: fp, response: Arc::new(stored), expires_at });
                count(route, "forwarded");
            }
            Ok(false) => {
                tracing::warn!(
                    route = route.path.as_str(),
                    "lease ran out before the response came back; it was not stored"
                );
                count(route, "lease_lost");
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not store a response; its key is held until the lease ends");
                count(route, "store_error");
            }
        }
        Response::from_parts(parts, full(body))
    }

    async fn release(&self, id: ClaimId, token: LeaseToken) {
        if let Err(e) = self.store.release_request(&id, token).await {
            tracing::warn!(error = %e, "could not release a key; it is held until its lease ends");
        }
    }
}

fn answer_completed(route: &RoutePolicy, same_fingerprint: bool, stored: &StoredResponse) -> Response<GatewayBody> {
    if !same_fingerprint {
        return mismatch(route);
    }
    count(route, "replayed");
    replay(stored)
}

/// The stored response, as the first caller got it, marked as a replay.
pub fn replay(stored: &StoredResponse) -> Response<GatewayBody> {
    let mut response = Response::new(full(stored.body.clone()));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) {
            headers.append(name, value);
        }
    }
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

fn mismatch(route: &RoutePolicy) -> Response<GatewayBody> {
    count(route, "mismatch");
    problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
        "this Idempotency-Key was already used with a different request (method, path, query or body); nothing was forwarded",
    )
}

fn upstream_timeout(route: &RoutePolicy) -> Response<GatewayBody> {
    count(route, "upstream_timeout");
    problem(
        StatusCode::GATEWAY_TIMEOUT,
        "upstream-timeout",
        "the upstream did not answer within the route's lease; the key stays held until the lease ends, then a retry executes again",
    )
}

fn upstream_failed(e: &ForwardError) -> Response<GatewayBody> {
    tracing::warn!(error = ?e, "upstream request failed");
    problem(
        StatusCode::BAD_GATEWAY,
        "upstream-unavailable",
        "the upstream could not be reached or broke off; the Idempotency-Key was released, so a retry executes again",
    )
}

fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

enum Capped {
    Whole(Bytes),
    Over(Vec<Bytes>, GatewayBody),
}

/// Reads a body whole if it is at most `cap` bytes; otherwise hands back what was read and the rest.
async fn read_capped(mut body: GatewayBody, cap: usize) -> Result<Capped, BoxError> {
    let mut chunks = Vec::new();
    let mut total = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            total += data.len();
            chunks.push(data);
            if total > cap {
                return Ok(Capped::Over(chunks, body));
            }
        }
    }
    let mut whole = BytesMut::with_capacity(total);
    chunks.iter().for_each(|c| whole.extend_from_slice(c));
    Ok(Capped::Whole(whole.freeze()))
}

/// A body that yields chunks already read, then the rest of the original body.
struct Prefixed {
    prefix: Vec<Bytes>,
    rest: GatewayBody,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if !self.prefix.is_empty() {
            let chunk = self.prefix.remove(0);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}
