//! Upstream calls that outlived their client's `upstream_timeout`: each runs on in a task of its
//! own, holding its key and extending its lease, and settles the key when the upstream answers, so
//! that a retry gets the answer replayed (and `409`, or a wait, until then).
//!
//! - **The bound** (`max_background_calls`, per engine): a call past it is dropped at its
//!   `504`, and its key stays held until its lease ends, never released early: a retry before then
//!   gets `409`, one after it executes again. Counted as `outcome="over_limit"`.
//! - **`max_call`**: a call still running then is abandoned, its key left to its lease (no longer
//!   extended), counted as `outcome="max_call"`.
//! - **Shutdown** ([`Engine::drain`]): no call moves to the background any more (one that times out
//!   now is dropped as above, `outcome="abandoned"`); those running are given the grace period to
//!   finish and store their answers, with their leases still extended. Any still running then are
//!   abandoned without releasing their keys: as if idem had died, each key is free once its lease
//!   ends.
//!
//! Metrics: `idem_gateway_background_calls{route}` (running now) and
//! `idem_gateway_background_calls_total{route,outcome}` (how each ended).

use std::sync::Arc;
use std::time::Duration;

use http::Response;
use idem_metrics::Label;
use idem_metrics::gateway::Outcome;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::GatewayBody;
use crate::call::Call;
use crate::held::{Driven, Held, abandoned_at_max_call, timed_out};
use crate::policy::RoutePolicy;
use crate::state::{Engine, Phase, count};

/// A running background call's slot; gives it back, and counts it out of the gauge, when dropped.
struct Slot {
    _permit: OwnedSemaphorePermit,
    route: Arc<str>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        idem_metrics::gateway::background_running(Arc::clone(&self.route), false);
    }
}

fn count_background(route: &RoutePolicy, outcome: Outcome) {
    idem_metrics::gateway::background_ended(route.path.shared(), outcome);
}

impl Engine {
    /// The client's wait is over: the call goes on in a task of its own, or (over the bound, or
    /// shutting down) is dropped with its key left held until the lease ends.
    pub(crate) fn to_background(self: &Arc<Self>, held: Held, call: Call) -> Response<GatewayBody> {
        count(&held.route, Outcome::UpstreamTimeout);
        let phase = *self.background.phase.borrow();
        let permit = match phase {
            Phase::Running => Arc::clone(&self.background.slots).try_acquire_owned().map_err(|_| Outcome::OverLimit),
            Phase::Draining | Phase::Abandoned => Err(Outcome::Abandoned),
        };
        let permit = match permit {
            Ok(permit) => permit,
            Err(outcome) => {
                count_background(&held.route, outcome);
                tracing::warn!(
                    route = held.route.path.as_str(),
                    outcome = outcome.label(),
                    "an upstream call slower than upstream_timeout was dropped; its key is held until its lease ends"
                );
                let lease_left = held.lease_ends.saturating_duration_since(Instant::now());
                return abandoned(lease_left);
            }
        };
        let retry_after = held.route.upstream_timeout;
        idem_metrics::gateway::background_running(held.route.path.shared(), true);
        let slot = Slot { _permit: permit, route: held.route.path.shared() };
        let engine = Arc::clone(self);
        tokio::spawn(async move { engine.finish_in_background(held, call, slot).await });
        in_background(retry_after)
    }

    /// Runs a call to its end and settles its key, unless the engine abandons it first or it runs
    /// past the route's `max_call` (then its key is left to its lease).
    async fn finish_in_background(self: Arc<Self>, mut held: Held, mut call: Call, _slot: Slot) {
        let mut phase = self.background.phase.subscribe();
        let driven = tokio::select! {
            biased;
            _ = phase.wait_for(|p| *p == Phase::Abandoned) => None,
            driven = self.drive(&mut held, &mut call, None) => Some(driven),
        };
        let exchange = match driven {
            Some(Driven::Ended(exchange)) => exchange,
            Some(Driven::MaxCall) => {
                abandoned_at_max_call(&held.route);
                count_background(&held.route, Outcome::MaxCall);
                return;
            }
            // AnswerBy cannot come: there is no client's wait in the background.
            None | Some(Driven::AnswerBy) => {
                count_background(&held.route, Outcome::Abandoned);
                return;
            }
        };
        let (outcome, _) = self.settle(&held, exchange).await;
        count_background(&held.route, outcome);
    }

    /// Background calls running now.
    pub fn background_calls(&self) -> usize {
        self.background.running()
    }

    /// Shutting down: starts no more background calls, waits up to `grace` for the running ones
    /// to settle their keys (and for responses kept for the store to be stored), then abandons
    /// the rest (their keys stay held until their leases end) and waits for them to stop. Answers
    /// how many were abandoned.
    pub async fn drain(&self, grace: Duration) -> usize {
        let started = Instant::now();
        let abandoned = self.drain_background(grace).await;
        let left = grace.saturating_sub(started.elapsed());
        abandoned + self.drain_unstored(left).await
    }

    async fn drain_background(&self, grace: Duration) -> usize {
        let background = &self.background;
        background.phase.send_replace(Phase::Draining);
        let all = Arc::clone(&background.slots).acquire_many_owned(background.limit);
        if tokio::time::timeout(grace, all).await.is_ok() {
            return 0;
        }
        let left = background.running();
        tracing::warn!(
            calls = left,
            "background upstream calls still running after the shutdown grace period; abandoned, their keys held until their leases end"
        );
        background.phase.send_replace(Phase::Abandoned);
        // They stop at their next poll; wait for that, so that none touches the store after it
        // closes (one settling its key right now gets a moment to finish).
        let all = Arc::clone(&background.slots).acquire_many_owned(background.limit);
        let _ = tokio::time::timeout(Duration::from_secs(1), all).await;
        left
    }
}

/// `504`: the call goes on, and a retry gets its answer.
fn in_background(retry_after: Duration) -> Response<GatewayBody> {
    timed_out(
        "the upstream did not answer within the route's upstream_timeout; idem keeps the request running and holds its Idempotency-Key, so a retry gets the upstream's answer once it comes (409, or a wait, until then)",
        retry_after,
    )
}

/// `504`: the call was dropped; its key is held until the lease ends.
fn abandoned(lease_left: Duration) -> Response<GatewayBody> {
    timed_out(
        "the upstream did not answer within the route's upstream_timeout, and idem could not keep the request running (max_background_calls reached, or shutting down): the Idempotency-Key stays held until the route's lease ends, then a retry executes again",
        lease_left,
    )
}
