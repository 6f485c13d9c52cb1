//! The engine: one request on a guarded route, from its `Idempotency-Key` to its answer.
//!
//! 1. No key: 400 on a `required` route, else forwarded without idempotency. A bad key: 400.
//! 2. The key's id is (route, scope, key) ([`crate::scope`]: a keyed request that says nothing of
//!    who is calling is 400, one whose bearer JWT does not verify 401); the request's fingerprint
//!    is method, path, query, body.
//! 3. A completed response in the replay cache or the store is replayed (or 422 on another
//!    fingerprint); the upstream is not called.
//! 4. Otherwise `begin_request` atomically takes the key (the engine needs only a
//!    [`RequestStore`](idem_core::RequestStore); the response is stored in `StoredResponse`'s
//!    binary form). Whoever gets it forwards, then stores the response (compare-and-set on its
//!    lease token) or releases the key for transient failures.
//!    Everyone else gets 409 (`reject`), or waits to be woken by the holder (`wait`).
//!
//! A held request runs in its own task ([`crate::held`]): a client that hangs up does not abandon
//! the upstream call, whose result is still stored for the retry. An upstream slower than the
//! route's `upstream_timeout` gets its client a 504, and its call goes on in the background
//! ([`crate::background`]), the key held and its lease extended until the answer is stored. A
//! response the store could not take (it was down, or its answer was lost) is kept in memory
//! and stored as soon as the store answers again ([`crate::unstored`]). Only if idem dies (or is
//! cut off from the store for longer than the lease) does the lease decide: the key stays held
//! until it ends, then a retry executes again.
//!
//! Each first execution is forwarded with `Idem-Fencing-Token: <n>`, the lease's fencing number:
//! it grows with each take of the key, so an upstream that records it can refuse a call from an
//! older holder (one paused or cut off past its lease). The header a client sends is removed.
//!
//! Routes are matched, and requests fingerprinted, on the normalised path
//! ([`idem_core::gateway::normalize_path`]); the request forwarded is the client's own.
//!
//! This file orchestrates; its steps import none of it. The engine's state and the types the steps
//! hand one another are in `crate::state`, forwarding's in `crate::forward`; each step adds to
//! [`Engine`] the part it owns (`crate::held`, `crate::background`, `crate::unstored`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use idem_core::gateway::{
    IdempotencyKey, InFlightPolicy, KeyPolicy, StoredResponse, fingerprint, normalize_path, parse_idempotency_key,
    request_id,
};
use idem_core::request::{Begin, LeaseToken, NewRequest};
use idem_core::{ClaimId, ClientToken, StoreError};
use idem_metrics::gateway::Outcome;
use tokio::time::Instant;

use crate::cache::Cached;
use crate::policy::RoutePolicy;
use crate::problem::{Problem, held};
use crate::state::{Identity, Taken, count};
use crate::waiters::Wait;
use crate::{GatewayBody, full};

// Defined in `crate::state` and `crate::forward`; public here, where users have always found them.
pub use crate::forward::{ForwardError, ForwardFuture};
pub use crate::state::{DEFAULT_MAX_BODY_BYTES, Engine, EngineConfig};

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// The lease's fencing number, forwarded with each first execution.
pub const FENCING_TOKEN: &str = "idem-fencing-token";

/// How long a begin whose answer was lost may take to be asked again: short, so that a request
/// is still answered within the store's call_timeout and a moment.
const ASK_AGAIN_WITHIN: Duration = Duration::from_millis(500);

impl Engine {
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Wakes this node's duplicates waiting on a key that another node completed or released.
    pub fn wake(&self, id: &ClaimId) {
        self.waiters.wake(id);
    }

    /// Answers one request on a guarded route; `forward` sends it on when it is to execute.
    /// idem's own answers are written in the route's `errors` shape; the upstream's, and their
    /// replays, go back as they came.
    pub async fn handle<F>(
        self: &Arc<Self>,
        route: &Arc<RoutePolicy>,
        request: Request<Bytes>,
        forward: F,
    ) -> Response<GatewayBody>
    where
        F: FnOnce(Request<Bytes>) -> ForwardFuture + Send + 'static,
    {
        route.errors.render(self.answer(route, request, forward).await)
    }

    async fn answer<F>(
        self: &Arc<Self>,
        route: &Arc<RoutePolicy>,
        mut request: Request<Bytes>,
        forward: F,
    ) -> Response<GatewayBody>
    where
        F: FnOnce(Request<Bytes>) -> ForwardFuture + Send + 'static,
    {
        // Only idem sets the fencing number an upstream may trust.
        request.headers_mut().remove(FENCING_TOKEN);
        let key = match key_of(route, &request) {
            Ok(Some(key)) => key,
            Ok(None) => {
                count(route, Outcome::NoKey);
                return forward(request).await.unwrap_or_else(|e| self.upstream_failed(route, &e));
            }
            Err(problem) => return problem.answer(route),
        };
        let scope = match crate::scope::scope_of(route, &request).await {
            Ok(scope) => scope,
            Err(refusal) => return refusal.answer(route),
        };
        let identity = identify(route, &request, &scope, &key);
        if let Some(hit) = self.cache.get(&identity.id, self.clock.now()) {
            return answer_completed(route, hit.fingerprint == identity.fingerprint, &hit.response);
        }
        match self.take_key(route, &identity).await {
            Ok(taken) => {
                request.headers_mut().insert(FENCING_TOKEN, HeaderValue::from(taken.fence));
                self.execute(route, identity, taken, request, forward).await
            }
            Err(answer) => answer,
        }
    }

    /// Takes the key for this request, or answers for it: a replay, a mismatch, a conflict (at
    /// once, or after waiting for the holder with `in_flight = "wait"`), or an unavailable store.
    async fn take_key(&self, route: &RoutePolicy, identity: &Identity) -> Result<Taken, Response<GatewayBody>> {
        let wait = if route.in_flight == InFlightPolicy::Wait { route.wait_timeout } else { Duration::ZERO };
        let wait = Wait::new(&self.waiters, identity.id, wait);
        let client = Some(ClientToken::generate());
        let mut asked_again = false;
        loop {
            let armed = wait.arm();
            let asked_at = Instant::now();
            let new = NewRequest {
                id: identity.id,
                fingerprint: identity.fingerprint,
                lease: route.lease,
                keep: route.ttl,
                held: Vec::new(),
                client,
            };
            match self.begin_here(new, &mut asked_again).await {
                Err(e) => return Err(store_unavailable(route, &e)),
                Ok(Begin::Started { token, lease_expired, fence, .. }) => {
                    if lease_expired {
                        idem_metrics::gateway::lease_expired(route.path.shared());
                    }
                    let hold = self.holding.hold(identity.id, identity.fingerprint);
                    match self.fresh(route, identity, Taken { token, fence, leased_at: asked_at, hold }).await {
                        Ok(Some(taken)) => return Ok(taken),
                        // Already ended and taken by another begin: look at the key again.
                        Ok(None) => {}
                        // Not forwarded: the key is let go at once, so that a retry need not wait
                        // out the lease the begin took (if the release fails too, it ends then).
                        Err(e) => {
                            self.let_go(identity.id, token);
                            return Err(store_unavailable(route, &e));
                        }
                    }
                }
                Ok(Begin::Completed { same_fingerprint, result, expires_at }) => {
                    return Err(self.completed(route, identity, same_fingerprint, &result, expires_at));
                }
                Ok(Begin::Held { same_fingerprint: false, .. }) => return Err(mismatch(route)),
                // Woken by the holder on this node, or look again after a second (the holder may
                // be another node), or give up at the deadline.
                Ok(Begin::Held { .. }) => {
                    if !wait.until_next_look(armed, crate::waiters::LOOK_AGAIN).await {
                        count(route, Outcome::Conflict);
                        return Err(held(1));
                    }
                }
            }
        }
    }

    /// Releases a key this node took and forwarded nothing under, in the background.
    fn let_go(&self, id: ClaimId, token: LeaseToken) {
        let store = Arc::clone(&self.store);
        tokio::spawn(async move {
            if let Err(e) = store.release_request(&id, token).await {
                tracing::debug!(error = %e, "could not release a key nothing was forwarded under; it is free when its lease ends");
            }
        });
    }

    /// A begin, unless a request of this very node runs the key now: then it is held, and the store
    /// is not asked ([`crate::holding`]).
    async fn begin_here(&self, new: NewRequest, asked_again: &mut bool) -> Result<Begin, StoreError> {
        match self.holding.running(&new.id) {
            Some(running) => {
                let lease_until = self.clock.now();
                Ok(Begin::Held { same_fingerprint: running == new.fingerprint, lease_until })
            }
            None => self.begin(new, asked_again).await,
        }
    }

    /// A begin. One whose answer was lost is asked again, once per request, with the same client
    /// token and within half a second: a store back from a failover answers with the lease this
    /// request may have taken (so it is not left held by a lease nobody knows); one still away is
    /// answered 503.
    async fn begin(&self, new: NewRequest, asked_again: &mut bool) -> Result<Begin, StoreError> {
        match self.store.begin_request(new.clone()).await {
            Err(StoreError::OutcomeUnknown(_)) if !*asked_again => {
                *asked_again = true;
                let again = async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.store.begin_request(new).await
                };
                tokio::time::timeout(ASK_AGAIN_WITHIN, again)
                    .await
                    .unwrap_or_else(|_| Err(StoreError::OutcomeUnknown("no answer when asked again".into())))
            }
            other => other,
        }
    }

    /// A lease just taken, with at least half of it left to run. It is counted from before the
    /// begin was sent (`leased_at`): the store stamps it then, and a begin held up on the way (a
    /// stalled path, a wait for a connection: up to `call_timeout`) has used part of it by the time
    /// it answers. One more than half used is extended before anything is forwarded, so the
    /// upstream is never called under a lease that may already have ended; `None`: it had.
    async fn fresh(&self, route: &RoutePolicy, identity: &Identity, taken: Taken) -> Result<Option<Taken>, StoreError> {
        if Instant::now() < taken.leased_at + route.lease / 2 {
            return Ok(Some(taken));
        }
        let renewing_at = Instant::now();
        let extended = self.store.extend_request(&identity.id, taken.token, route.lease).await?;
        Ok(extended.map(|_| Taken { leased_at: renewing_at, ..taken }))
    }

    /// The answer for a key the store holds completed: its response (cached for the next
    /// replay), or a mismatch.
    fn completed(
        &self,
        route: &RoutePolicy,
        identity: &Identity,
        same_fingerprint: bool,
        result: &[u8],
        expires_at: idem_core::Timestamp,
    ) -> Response<GatewayBody> {
        let response = match StoredResponse::decode(result) {
            Ok(response) => Arc::new(response),
            Err(e) => {
                tracing::error!(error = %e, "a stored response could not be read");
                count(route, Outcome::StoreError);
                return Problem::Internal.answer("the stored response could not be read");
            }
        };
        if same_fingerprint {
            let cached = Cached { fingerprint: identity.fingerprint, response: Arc::clone(&response), expires_at };
            self.cache.insert(identity.id, cached);
        }
        answer_completed(route, same_fingerprint, &response)
    }

    /// Runs a request whose key this node now holds, in a task of its own: a client that hangs
    /// up does not abandon the upstream call, whose result is still stored for the retry.
    async fn execute<F>(
        self: &Arc<Self>,
        route: &Arc<RoutePolicy>,
        identity: Identity,
        taken: Taken,
        request: Request<Bytes>,
        forward: F,
    ) -> Response<GatewayBody>
    where
        F: FnOnce(Request<Bytes>) -> ForwardFuture + Send + 'static,
    {
        let held = Arc::clone(self).run_held(Arc::clone(route), identity, taken, forward(request));
        tokio::spawn(held).await.unwrap_or_else(|_| Problem::Internal.answer("the request failed inside idem"))
    }
}

/// Why a request's `Idempotency-Key` cannot be used.
enum KeyProblem {
    /// None on a `required` route.
    Missing,
    /// Not a valid key; the detail says why.
    Invalid(&'static str),
}

impl KeyProblem {
    fn answer(self, route: &RoutePolicy) -> Response<GatewayBody> {
        match self {
            KeyProblem::Missing => {
                count(route, Outcome::MissingKey);
                let detail = "this route requires an Idempotency-Key header";
                Problem::MissingKey.answer(detail)
            }
            KeyProblem::Invalid(detail) => {
                count(route, Outcome::InvalidKey);
                Problem::InvalidKey.answer(detail)
            }
        }
    }
}

/// The request's `Idempotency-Key`: `Ok(None)` when it has none and the route allows that.
fn key_of(route: &RoutePolicy, request: &Request<Bytes>) -> Result<Option<IdempotencyKey>, KeyProblem> {
    let Some(value) = request.headers().get(IDEMPOTENCY_KEY) else {
        return if route.key == KeyPolicy::Required { Err(KeyProblem::Missing) } else { Ok(None) };
    };
    value
        .to_str()
        .map_err(|_| "the Idempotency-Key may contain only printable ASCII")
        .and_then(parse_idempotency_key)
        .map(Some)
        .map_err(KeyProblem::Invalid)
}

/// The key's id is (route, scope, key); the fingerprint is method, normalised path (lower-cased on
/// a route that ignores case), query and body.
fn identify(route: &RoutePolicy, request: &Request<Bytes>, scope: &[Vec<u8>], key: &IdempotencyKey) -> Identity {
    let scope: Vec<&[u8]> = scope.iter().map(Vec::as_slice).collect();
    let uri = request.uri();
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(idem_core::media::is_json);
    let path = route.path_case.fold(normalize_path(uri.path()));
    let fingerprint = fingerprint(request.method().as_str(), &path, uri.query().unwrap_or(""), request.body(), json);
    Identity { id: request_id(route.path.as_str(), &scope, key), fingerprint }
}

fn answer_completed(route: &RoutePolicy, same_fingerprint: bool, stored: &StoredResponse) -> Response<GatewayBody> {
    if !same_fingerprint {
        return mismatch(route);
    }
    count(route, Outcome::Replayed);
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
    count(route, Outcome::Mismatch);
    Problem::KeyReused.answer(
        "this Idempotency-Key was already used with a different request (method, path, query or body); nothing was forwarded",
    )
}

/// `503`: nothing was forwarded. The store logs its own faults; this is counted, not logged, so
/// that an outage is not one log line per request.
fn store_unavailable(route: &RoutePolicy, e: &StoreError) -> Response<GatewayBody> {
    tracing::debug!(error = %e, "gateway store unavailable");
    count(route, Outcome::StoreError);
    let detail = match e {
        StoreError::OutcomeUnknown(_) => {
            "the idempotency store did not answer in time; nothing was forwarded, but this key may stay held (409) until the route's lease ends; retry shortly"
        }
        // What to change, in the store's words (it logged it once).
        StoreError::Misconfigured(what) => {
            return Problem::StoreUnavailable
                .retry_after(&format!("the idempotency store is unavailable: {what}; nothing was forwarded"), 1);
        }
        _ => "the idempotency store is unavailable; nothing was forwarded, retry shortly",
    };
    Problem::StoreUnavailable.retry_after(detail, 1)
}
