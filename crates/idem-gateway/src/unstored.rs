//! Settling a key the store could not settle at once: a response it could not store (it was
//! unavailable, or its answer was lost after the write was sent), or a release that failed. Giving
//! such a response up would run the key again once its lease ends; instead each is kept in memory,
//! in a task of its own, and stored as soon as the store answers again, so that a retry gets it
//! replayed (docs/reference/api.md#gateway, "When the store fails as the upstream answers";
//! docs/faults.md#what-gives-a-key-up).
//!
//! Who holds the key meanwhile: this node, under the lease it took. The task tries to store the
//! response (or release the key) at once and then every 50 ms, backing off to 250 ms — no
//! further: the lease was not extended while the store was away, and once the store is back what
//! is left of it may be short — and extends the lease at every third of it, as a running call
//! does. This node's retries are replayed from memory at once (the replay cache has the response);
//! other nodes' get `409` (in flight), or `503` while the store is away.
//!
//! A lease that ran out while the store was away is still this node's until another begin takes
//! the key ([`idem_core::request`]): the task goes on trying, and the response is stored when the
//! store comes back if no other request took the key meanwhile (the key was run once; its retry is
//! replayed). This node's own retries go on being replayed from memory, so that none of them takes
//! the key from the task; a retry that reaches another node after the lease ended does take it
//! (the documented case: that node runs it again), and then the task's response is dropped.
//!
//! - **Stored**: the key is settled as if nothing had happened. An earlier attempt whose answer
//!   was lost may have stored it already: the store then holds exactly these bytes.
//! - **The lease lost** (this node cut off from the store, or paused, past its lease, and another
//!   request took the key meanwhile): the response is dropped, never stored over the newer
//!   holder's. The store stops keeping a lease that ran out after `ENDED_LEASE_KEPT`; the task
//!   gives up then too.
//! - **The bound**: `max_unstored_bytes` of responses kept at once; past it a response is dropped
//!   and its key stays held until the lease ends, as if idem had died.
//! - **Shutdown** ([`Engine::drain`]): those still waiting get the grace period; then they are
//!   abandoned, their keys held until their leases end.
//!
//! Metrics: `idem_gateway_unstored_responses` (kept now) and
//! `idem_gateway_unstored_total{route,outcome}` (`stored`, `released`, `lease_lost`, `dropped`,
//! `abandoned`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idem_core::ClaimId;
use idem_core::gateway::Fingerprint;
use idem_core::request::{LeaseToken, RequestState};
use idem_metrics::gateway::UnstoredEnd;
use tokio::time::Instant;

use crate::policy::RoutePolicy;
use crate::state::{Engine, MAX_UNSTORED_TASKS};

const FIRST_WAIT: Duration = Duration::from_millis(50);
const LONGEST_WAIT: Duration = Duration::from_millis(250);
/// How long past the lease's end (as this node knows it) the task still tries: as long as the
/// store keeps a lease that ran out, so the store decides whether another request took the key.
const PAST_THE_LEASE: Duration = idem_core::request::ENDED_LEASE_KEPT;

/// What is left to do with a held key.
pub(crate) enum Settle {
    /// Store this encoded response.
    Store(Vec<u8>),
    /// Release the key, so that a retry executes again.
    Release,
}

/// A held key to settle, with what its lease needs.
pub(crate) struct Pending {
    pub route: Arc<RoutePolicy>,
    pub id: ClaimId,
    pub fingerprint: Fingerprint,
    pub token: LeaseToken,
    /// When the lease ends as far as this node knows (its last extension, plus the lease).
    pub lease_ends: Instant,
    pub settle: Settle,
    /// This node still runs the key while the response waits for the store.
    pub _hold: Arc<crate::holding::Hold>,
}

fn count(route: &RoutePolicy, outcome: UnstoredEnd) {
    idem_metrics::gateway::unstored_ended(route.path.shared(), outcome);
}

/// What became of a key.
enum Ended {
    Done(UnstoredEnd),
    LeaseLost,
}

impl Engine {
    /// Keeps settling `pending` in a task of its own; `false` (nothing kept) when over the bound
    /// or shutting down: the key then stays held until its lease ends.
    pub(crate) fn keep_settling(self: &Arc<Self>, pending: Pending) -> bool {
        let bytes = match &pending.settle {
            Settle::Store(encoded) => encoded.len(),
            Settle::Release => 0,
        };
        let permit = match Arc::clone(&self.unstored.tasks).try_acquire_owned() {
            Ok(permit) if !*self.unstored.abandon.borrow() && self.unstored.reserve(bytes) => permit,
            _ => {
                count(&pending.route, UnstoredEnd::Dropped);
                tracing::warn!(
                    route = pending.route.path.as_str(),
                    "a response the store could not take was dropped (max_unstored_bytes, or shutting down); its key is held until its lease ends"
                );
                return false;
            }
        };
        idem_metrics::gateway::unstored_kept(true);
        let engine = Arc::clone(self);
        tokio::spawn(async move {
            let route = Arc::clone(&pending.route);
            let mut abandon = engine.unstored.abandon.subscribe();
            let ended = tokio::select! {
                biased;
                ended = engine.settle_later(pending) => ended,
                _ = abandon.wait_for(|a| *a) => Ended::Done(UnstoredEnd::Abandoned),
            };
            match ended {
                Ended::Done(outcome) => count(&route, outcome),
                Ended::LeaseLost => {
                    count(&route, UnstoredEnd::LeaseLost);
                    tracing::warn!(
                        route = route.path.as_str(),
                        "a response kept for the store was not stored: another request took the key after this node's lease ran out (cut off from the store, or paused, past the lease)"
                    );
                }
            }
            engine.unstored.bytes.fetch_sub(bytes, Ordering::AcqRel);
            idem_metrics::gateway::unstored_kept(false);
            drop(permit);
        });
        true
    }

    async fn settle_later(&self, mut p: Pending) -> Ended {
        let lease = p.route.lease;
        let mut wait = FIRST_WAIT;
        let mut beat_at = Instant::now() + lease / 3;
        loop {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(LONGEST_WAIT);
            let settled = match &p.settle {
                Settle::Store(encoded) => {
                    self.store.complete_request(&p.id, p.token, encoded, p.route.ttl).await.map(|until| until.is_some())
                }
                Settle::Release => self.store.release_request(&p.id, p.token).await,
            };
            match settled {
                Ok(true) => return Ended::Done(self.settled(&p)),
                Ok(false) => return self.not_held(&p).await,
                Err(_) => {}
            }
            if Instant::now() >= beat_at {
                let asked_at = Instant::now();
                match self.store.extend_request(&p.id, p.token, lease).await {
                    Ok(Some(_)) => p.lease_ends = asked_at + lease,
                    Ok(None) => return self.not_held(&p).await,
                    Err(_) => {}
                }
                beat_at = Instant::now() + lease / 3;
            }
            // The store no longer keeps a lease that ended this long ago.
            if Instant::now() >= p.lease_ends + PAST_THE_LEASE {
                return self.not_held(&p).await;
            }
        }
    }

    fn settled(&self, p: &Pending) -> UnstoredEnd {
        match p.settle {
            Settle::Store(_) => UnstoredEnd::Stored,
            Settle::Release => UnstoredEnd::Released,
        }
    }

    /// The lease no longer holds the key: settled by an earlier attempt whose answer was lost (the
    /// store holds these very bytes, or nothing for a release), or taken over.
    async fn not_held(&self, p: &Pending) -> Ended {
        let state = self.store.peek_request(&p.id).await;
        let settled = match (&p.settle, state) {
            (Settle::Store(encoded), Ok(Some(RequestState::Completed { result, fingerprint, .. }))) => {
                result == *encoded && fingerprint == p.fingerprint
            }
            (Settle::Release, Ok(None)) => true,
            _ => false,
        };
        if settled {
            return Ended::Done(self.settled(p));
        }
        if let Settle::Store(_) = p.settle {
            self.cache.remove(&p.id);
        }
        Ended::LeaseLost
    }

    /// Shutting down: waits up to `grace` for kept responses to be stored, then abandons the rest
    /// (their keys held until their leases end). Answers how many were abandoned.
    pub(crate) async fn drain_unstored(&self, grace: Duration) -> usize {
        let all = Arc::clone(&self.unstored.tasks).acquire_many_owned(MAX_UNSTORED_TASKS as u32);
        if tokio::time::timeout(grace, all).await.is_ok() {
            return 0;
        }
        let left = MAX_UNSTORED_TASKS - self.unstored.tasks.available_permits();
        self.unstored.abandon.send_replace(true);
        let all = Arc::clone(&self.unstored.tasks).acquire_many_owned(MAX_UNSTORED_TASKS as u32);
        let _ = tokio::time::timeout(Duration::from_secs(1), all).await;
        left
    }

    /// Responses kept now for the store.
    pub fn unstored_responses(&self) -> usize {
        MAX_UNSTORED_TASKS - self.unstored.tasks.available_permits()
    }
}
