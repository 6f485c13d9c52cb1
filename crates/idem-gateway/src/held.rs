//! A request whose key this node holds: its upstream call, its lease, and what becomes of its key.
//!
//! Who holds the key when each timer fires:
//! - **`upstream_timeout`** (the client's wait): this node still holds it. The client gets `504`
//!   with `Retry-After`; the call moves to a task of its own ([`crate::background`]) and keeps
//!   running, and its answer is stored like any other (or the key released for a transient one).
//! - **The lease's heartbeat**: the lease is extended (to a whole `lease` from now) at half the
//!   lease after the call began, then every third of a lease, for as long as the call runs: on
//!   one node or many, no other request can take the key while its holder is alive. A route whose
//!   `upstream_timeout` is at most half its `lease` (every default) never extends the lease of a
//!   request that is answered in time: no store round trip is added to that path.
//! - **`max_call`** (the longest a call may run, 10 min by default): the call is abandoned and
//!   the key left to its lease, no longer extended: a retry gets `409` until the lease ends, then
//!   runs again. An upstream that hangs (or a connection that died without a word: upstream
//!   connections use TCP keepalive too) does not hold a key forever.
//! - **The exchange breaking off** after the request may have been sent, or after the upstream's
//!   status line: this node keeps the key, and stores a `502` saying the outcome is unknown as its
//!   answer, so that a retry does not run it again (the upstream may have acted). Only a call that
//!   never reached the upstream, or an answer the upstream called transient (5xx unless
//!   `store_5xx`, 408, 425, 429), or one over `max_stored_response`, gives the key up.
//! - **The store failing when the answer comes**: this node still holds the key. The response (or
//!   the release) is kept and settled as soon as the store answers ([`crate::unstored`]).
//! - **The lease itself** decides only if this node dies (or cannot reach the store for a whole
//!   lease): then the key is free once it ends, and a retry executes again. A lease that ran out
//!   while this node lived on (cut off, paused) is still its own until another begin takes the
//!   key: its answer, when it comes, is stored if none did.

use std::sync::Arc;
use std::time::Duration;

use http::Response;
use http_body_util::BodyExt;
use idem_core::gateway::StoredResponse;
use idem_core::request::LeaseToken;
use idem_metrics::gateway::Outcome;
use tokio::time::Instant;

use crate::body::Prefixed;
use crate::cache::Cached;
use crate::call::{Call, Exchange};
use crate::forward::{ForwardError, ForwardFuture};
use crate::holding::Hold;
use crate::policy::RoutePolicy;
use crate::problem::Problem;
use crate::state::{Engine, Identity, Taken, count};
use crate::unstored::{Pending, Settle};
use crate::waiters::WakeOnDrop;
use crate::{GatewayBody, full};

/// A key held for one request, and what its lease needs.
pub(crate) struct Held {
    pub route: Arc<RoutePolicy>,
    pub identity: Identity,
    pub token: LeaseToken,
    pub started: Instant,
    /// When the lease is extended next; `None` once it was lost.
    pub beat_at: Option<Instant>,
    /// When the lease ends, as far as this node knows (its last extension plus the lease).
    pub lease_ends: Instant,
    /// This node runs the key until the request is settled or abandoned ([`crate::holding`]).
    /// Declared before `_wake`, so that it is let go first: a waiter woken looks at a key no
    /// longer held here.
    pub hold: Arc<Hold>,
    /// However the request ends (settled, abandoned), its waiters look again.
    pub _wake: WakeOnDrop,
}

/// Says in the log that a call ran past its route's `max_call` and was abandoned.
pub(crate) fn abandoned_at_max_call(route: &RoutePolicy) {
    tracing::warn!(
        route = route.path.as_str(),
        max_call_ms = route.max_call.as_millis() as u64,
        "an upstream call ran past the route's max_call and was abandoned; its key is held until its lease ends, then a retry runs it again"
    );
}

/// How driving a call ended.
pub(crate) enum Driven {
    /// The call ended.
    Ended(Exchange),
    /// The client's wait (`upstream_timeout`) is over; the call goes on.
    AnswerBy,
    /// The route's `max_call` is over: the call is abandoned.
    MaxCall,
}

/// How soon a heartbeat that failed (the store unavailable) is tried again.
const RETRY_BEAT: Duration = Duration::from_millis(250);

/// The heartbeat after the first: a third of the lease, so that one failed extension still
/// leaves time for another.
fn beat_every(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

impl Engine {
    /// Forwards a held request and answers its client: the upstream's answer when it comes within
    /// `upstream_timeout`, else `504` while the call goes on in the background.
    pub(crate) async fn run_held(
        self: Arc<Self>,
        route: Arc<RoutePolicy>,
        identity: Identity,
        taken: Taken,
        forward: ForwardFuture,
    ) -> Response<GatewayBody> {
        let started = Instant::now();
        let token = taken.token;
        let _wake = WakeOnDrop { waiters: Arc::clone(&self.waiters), id: identity.id };
        let mut call = Call::new(forward, self.config.max_stored_response, route.store_5xx);
        let answer_by = started + route.upstream_timeout;
        let beat_at = Some(taken.leased_at + route.lease / 2);
        let lease_ends = taken.leased_at + route.lease;
        let hold = taken.hold;
        let mut held = Held { route, identity, token, started, beat_at, lease_ends, _wake, hold };
        match self.drive(&mut held, &mut call, Some(answer_by)).await {
            Driven::Ended(exchange) => {
                let (outcome, answer) = self.settle(&held, exchange).await;
                count(&held.route, outcome);
                answer
            }
            Driven::AnswerBy => self.to_background(held, call),
            // A route whose max_call is shorter than its upstream_timeout (a tower-layer route: the
            // config refuses it): the client is answered as if the call had gone to the background
            // and been dropped there.
            Driven::MaxCall => self.past_max_call(&held),
        }
    }

    /// Polls `call` until it ends, `answer_by` passes, or the route's `max_call` does, extending
    /// the lease whenever it is due. The call is polled during an extension too, and the extension
    /// gives way to either deadline (it is tried again at once, in the background).
    pub(crate) async fn drive(&self, held: &mut Held, call: &mut Call, answer_by: Option<Instant>) -> Driven {
        let give_up_at = held.started + held.route.max_call;
        let deadline = answer_by.map_or(give_up_at, |at| at.min(give_up_at));
        let passed = || match Instant::now() {
            now if now >= give_up_at => Some(Driven::MaxCall),
            now if answer_by.is_some_and(|at| now >= at) => Some(Driven::AnswerBy),
            _ => None,
        };
        loop {
            let wake_at = held.beat_at.map_or(deadline, |beat| beat.min(deadline));
            tokio::select! {
                biased;
                exchange = &mut *call => return Driven::Ended(exchange),
                () = tokio::time::sleep_until(wake_at) => {}
            }
            if let Some(passed) = passed() {
                return passed;
            }
            tokio::select! {
                biased;
                exchange = &mut *call => return Driven::Ended(exchange),
                () = tokio::time::sleep_until(deadline) => {}
                () = self.heartbeat(held) => {}
            }
            if let Some(passed) = passed() {
                return passed;
            }
        }
    }

    /// A call still running at its route's `max_call`: abandoned (dropped, the upstream's
    /// connection with it), its key left to its lease, which is no longer extended: a retry gets
    /// `409` until the lease ends, then runs the request again (as when idem dies mid-request).
    /// The answer, for a client still waiting, is `504` with the lease's time left.
    pub(crate) fn past_max_call(&self, held: &Held) -> Response<GatewayBody> {
        abandoned_at_max_call(&held.route);
        count(&held.route, Outcome::MaxCall);
        let lease_left = held.lease_ends.saturating_duration_since(Instant::now());
        timed_out(
            "the upstream did not answer within the route's max_call; idem stopped waiting for it. The \
             Idempotency-Key stays held until the route's lease ends, then a retry executes again",
            lease_left,
        )
    }

    /// Extends the lease to a whole `lease` from now. A lease found lost is not extended again:
    /// the call still runs to its end, but its answer will not be stored.
    async fn heartbeat(&self, held: &mut Held) {
        let lease = held.route.lease;
        let asked_at = Instant::now();
        match self.store.extend_request(&held.identity.id, held.token, lease).await {
            Ok(Some(_)) => {
                // Counted from before the call, as the store counts it.
                held.beat_at = Some(asked_at + beat_every(lease));
                held.lease_ends = asked_at + lease;
            }
            Ok(None) => {
                tracing::warn!(
                    route = held.route.path.as_str(),
                    "another request took the key of a running request after its lease ran out (this node was cut off from the store, or paused, past the lease); its answer will not be stored"
                );
                held.beat_at = None;
            }
            Err(e) => {
                // Soon: once the store is back, the lease may have little left (it was not extended
                // while the store was away), and the next regular beat may come too late.
                tracing::debug!(error = %e, "could not extend a running request's lease; trying again shortly");
                held.beat_at = Some(Instant::now() + RETRY_BEAT);
            }
        }
    }

    /// Settles the key as the call's end decides (stored, or released so that a retry executes
    /// again) and says how, with the answer for a client still waiting.
    pub(crate) async fn settle(self: &Arc<Self>, held: &Held, exchange: Exchange) -> (Outcome, Response<GatewayBody>) {
        idem_metrics::gateway::upstream(held.route.path.shared(), held.started.elapsed().as_secs_f64());
        let (outcome, answer) = match exchange {
            Exchange::Whole(parts, body) => {
                let headers =
                    parts.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect();
                let stored = StoredResponse { status: parts.status.as_u16(), headers, body: body.to_vec() };
                return (self.store_response(held, stored).await, Response::from_parts(parts, full(body)));
            }
            Exchange::Broken { status, why } => return self.outcome_unknown(held, status, &why).await,
            Exchange::Unreachable(why) => {
                (Outcome::UpstreamError, self.upstream_failed(&held.route, &ForwardError::Unreachable(why)))
            }
            Exchange::Transient(response) => (Outcome::Released, response),
            Exchange::TooLarge(parts, prefix, rest) => {
                (Outcome::TooLarge, Response::from_parts(parts, Prefixed { prefix, rest }.boxed_unsync()))
            }
        };
        if let Err(e) = self.store.release_request(&held.identity.id, held.token).await {
            tracing::debug!(error = %e, "could not release a key now; trying again until the store answers");
            self.keep_settling(pending(held, Settle::Release));
        }
        (outcome, answer)
    }

    /// `502`, and a warning that names the upstream's URL (without its query) and what went wrong,
    /// once per route every 10 seconds with how many more there were.
    pub(crate) fn upstream_failed(&self, route: &RoutePolicy, e: &ForwardError) -> Response<GatewayBody> {
        if let Some(more) = self.upstream_log.admit(route.path.as_str(), std::time::Instant::now()) {
            let (kind, why) = match e {
                ForwardError::Unreachable(why) => ("unreachable", why),
                ForwardError::Failed(why) => ("broke off", why),
            };
            tracing::warn!(route = route.path.as_str(), error = %why, more_like_it = more, "the upstream {kind}");
        }
        upstream_failed()
    }

    /// The exchange broke off after the upstream may have acted: the key keeps a `502` saying so,
    /// stored like a response (in the route's error shape), so that a retry is answered the same
    /// and does not run the request again. Its Content-Type says it is idem's, not the upstream's.
    async fn outcome_unknown(
        self: &Arc<Self>,
        held: &Held,
        status: Option<http::StatusCode>,
        why: &str,
    ) -> (Outcome, Response<GatewayBody>) {
        let route = &held.route;
        tracing::warn!(
            route = route.path.as_str(),
            upstream_status = status.map(|s| s.as_u16()),
            error = why,
            "the exchange with the upstream broke off after it may have acted; the key keeps a 502 saying the outcome is unknown"
        );
        let after = match status {
            Some(status) => format!("after it answered {}, its body broke off", status.as_u16()),
            None => "after the request was sent, the connection broke off before the answer".to_owned(),
        };
        let detail = format!(
            "the upstream may have acted on this request: {after}. idem keeps this answer for the \
             Idempotency-Key, so that a retry does not run the request a second time; check with the \
             upstream whether it was done, and use a new key to try again"
        );
        let problem = Problem::UpstreamOutcomeUnknown;
        let (body, content_type) = route.errors.body(problem, &detail);
        let headers = vec![(http::header::CONTENT_TYPE.as_str().to_owned(), content_type.as_bytes().to_vec())];
        let stored = StoredResponse { status: problem.status().as_u16(), headers, body: body.clone().into_bytes() };
        let outcome = match self.store_response(held, stored).await {
            Outcome::Forwarded => Outcome::UpstreamBroken,
            other => other,
        };
        let mut answer = Response::new(full(body));
        *answer.status_mut() = problem.status();
        answer.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
        (outcome, answer)
    }

    /// Stores a response under the lease token, and keeps it for replays from memory. One the
    /// store cannot take now is kept until it can.
    async fn store_response(self: &Arc<Self>, held: &Held, stored: StoredResponse) -> Outcome {
        let (route, id) = (&held.route, &held.identity.id);
        let encoded = stored.encode();
        let cached = |engine: &Engine| {
            let expires_at = engine.clock.now().plus(route.ttl);
            let fingerprint = held.identity.fingerprint;
            engine.cache.insert(*id, Cached { fingerprint, response: Arc::new(stored), expires_at });
        };
        match self.store.complete_request(id, held.token, &encoded, route.ttl).await {
            Ok(Some(_)) => {
                cached(self);
                Outcome::Forwarded
            }
            Ok(None) => {
                // A lease that ran out is still this node's until another begin takes the key: so
                // another did. What this node counts as left of the lease (from before its begin or
                // last extension was sent, as the store counts): seconds left mean the store's time
                // and this node's disagree.
                let left = held.lease_ends.saturating_duration_since(Instant::now());
                tracing::warn!(
                    route = route.path.as_str(),
                    lease_left_here_ms = left.as_millis() as u64,
                    "another request took the key after this node's lease ran out, before the response came back; it was not stored"
                );
                Outcome::LeaseLost
            }
            Err(e) => {
                tracing::debug!(error = %e, "could not store a response now; keeping it until the store answers");
                if self.keep_settling(pending(held, Settle::Store(encoded))) {
                    // This node holds the key and has its answer: its retries are replayed now.
                    cached(self);
                    Outcome::Unstored
                } else {
                    Outcome::StoreError
                }
            }
        }
    }
}

/// `504` with `Retry-After`: the upstream did not answer in time (`detail` says what became of its
/// call and its key).
pub(crate) fn timed_out(detail: &str, retry_after: Duration) -> Response<GatewayBody> {
    let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    Problem::UpstreamTimeout.retry_after(detail, seconds)
}

fn upstream_failed() -> Response<GatewayBody> {
    Problem::UpstreamUnavailable.answer(
        "the upstream could not be reached, or broke off on a request sent without an Idempotency-Key; a keyed request that reached nothing has its key released, so a retry executes again",
    )
}

fn pending(held: &Held, settle: Settle) -> Pending {
    Pending {
        route: Arc::clone(&held.route),
        id: held.identity.id,
        fingerprint: held.identity.fingerprint,
        token: held.token,
        lease_ends: held.lease_ends,
        settle,
        _hold: Arc::clone(&held.hold),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_heartbeat_leaves_time_for_another() {
        let lease = Duration::from_secs(3);
        assert!(beat_every(lease) * 2 < lease);
        assert_eq!(beat_every(Duration::from_millis(3)), Duration::from_millis(10), "never a busy loop");
    }
}
