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
//! - **The store failing when the answer comes**: this node still holds the key. The response (or
//!   the release) is kept and settled as soon as the store answers ([`crate::unstored`]).
//! - **The lease itself** decides only if this node dies (or cannot reach the store for a whole
//!   lease): then the key is free once it ends, and a retry executes again.

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
use crate::engine::{Engine, ForwardFuture, Identity, Taken, count};
use crate::policy::RoutePolicy;
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
    /// However the request ends (settled, abandoned), its waiters look again.
    pub _wake: WakeOnDrop,
}

/// Resolves at `at`, or never.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
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
        let mut held = Held { route, identity, token, started, beat_at, lease_ends, _wake };
        match self.drive(&mut held, &mut call, Some(answer_by)).await {
            Some(exchange) => {
                let (outcome, answer) = self.settle(&held, exchange).await;
                count(&held.route, outcome);
                answer
            }
            None => self.to_background(held, call),
        }
    }

    /// Polls `call` until it ends (`Some`) or `answer_by` passes (`None`), extending the lease
    /// whenever it is due. The call is polled during an extension too, and the extension gives way
    /// to `answer_by` (it is tried again at once, in the background).
    pub(crate) async fn drive(&self, held: &mut Held, call: &mut Call, answer_by: Option<Instant>) -> Option<Exchange> {
        loop {
            let Some(wake_at) = [answer_by, held.beat_at].into_iter().flatten().min() else {
                return Some(call.await);
            };
            tokio::select! {
                biased;
                exchange = &mut *call => return Some(exchange),
                () = tokio::time::sleep_until(wake_at) => {}
            }
            if answer_by.is_some_and(|at| Instant::now() >= at) {
                return None;
            }
            tokio::select! {
                biased;
                exchange = &mut *call => return Some(exchange),
                () = until(answer_by) => return None,
                () = self.heartbeat(held) => {}
            }
        }
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
                    "a running request lost its lease; its answer will not be stored"
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
            Exchange::Failed(e) => (Outcome::UpstreamError, self.upstream_failed(&held.route, &e)),
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
                // What this node counts as left of the lease (from before its begin or last
                // extension was sent, as the store counts): seconds left mean the store's time and
                // this node's disagree, or another begin took the key.
                let left = held.lease_ends.saturating_duration_since(Instant::now());
                tracing::warn!(
                    route = route.path.as_str(),
                    lease_left_here_ms = left.as_millis() as u64,
                    "lease ran out before the response came back; it was not stored"
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

fn pending(held: &Held, settle: Settle) -> Pending {
    Pending {
        route: Arc::clone(&held.route),
        id: held.identity.id,
        fingerprint: held.identity.fingerprint,
        token: held.token,
        lease_ends: held.lease_ends,
        settle,
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
