//! The store the nodes share, and each node's way to it.
//!
//! [`Keys`] is the [`RequestStore`] contract as PostgreSQL keeps it (idem-postgres's `request.rs`
//! statement by statement): the one begin rule ([`decide_begin`]), compare-and-set on the lease
//! token, a lease that ran out still its holder's until another begin takes the key (kept
//! [`ENDED_LEASE_KEPT`]), one fence counter for every take. Every call is stamped with the time the
//! node read from its own clock when it sent it, as PostgreSQL's statements carry `now` as a
//! parameter: a call held up on the way is applied late with an early stamp. It passes the
//! conformance suite (`tests/conformance.rs`), so what the simulation finds is the protocol's, not
//! a wrong store's.
//!
//! [`Link`] is one life of one node's connection pool: each call crosses the world
//! ([`crate::world::World::deliver`]) to the store and back, may be held by a cut link or a stalled
//! store (and applied late), may have its answer lost after the write happened, and is given up at
//! `call_timeout`: `outcome-unknown` for a write that may have been applied, `unavailable` for a
//! read or a refused call, as idem-postgres answers. A dead node's calls never come back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idem_core::request::{
    Begin, Decision, ENDED_LEASE_KEPT, Forget, Found, LeaseToken, NewRequest, RequestState, decide_begin,
};
use idem_core::{ClaimId, ClientToken, Clock, RequestStore, StoreError, Timestamp};

use crate::history::{Change, StoreEvent};
use crate::world::{self, Party, Shared};

#[derive(Debug, Clone)]
enum Rec {
    Held {
        fingerprint: [u8; 32],
        token: LeaseToken,
        until: i64,
        held: Vec<u8>,
        client: Option<ClientToken>,
        fence: u64,
    },
    Done {
        fingerprint: [u8; 32],
        result: Vec<u8>,
        until: i64,
    },
}

/// Every key the store holds, and the fence counter.
#[derive(Debug, Default)]
pub struct Keys {
    keys: HashMap<ClaimId, Rec>,
    fences: u64,
}

fn kept_after(now: Timestamp) -> i64 {
    now.millis().saturating_sub(ENDED_LEASE_KEPT.as_millis() as i64)
}

impl Keys {
    fn found(&self, id: &ClaimId) -> Option<Found> {
        self.keys.get(id).map(|rec| match rec {
            Rec::Held { fingerprint, token, until, client, fence, .. } => Found::Held {
                fingerprint: *fingerprint,
                until: Timestamp(*until),
                token: *token,
                client: *client,
                fence: *fence,
            },
            Rec::Done { fingerprint, result, until } => {
                Found::Completed { fingerprint: *fingerprint, until: Timestamp(*until), result: result.clone() }
            }
        })
    }

    /// A begin at `now`: the answer, and what changed.
    pub fn begin(&mut self, request: &NewRequest, now: Timestamp) -> (Begin, Option<Change>) {
        let previous = match self.keys.get(&request.id) {
            Some(Rec::Held { fence, until, .. }) => Some((*fence, *until)),
            _ => None,
        };
        let lease_expired = match decide_begin(self.found(&request.id), &request.fingerprint, request.client, now) {
            Decision::Answer(answer) => return (answer, None),
            Decision::Take { lease_expired } => lease_expired,
        };
        self.fences += 1;
        let (token, fence, until) = (LeaseToken::generate(), self.fences, now.plus(request.lease));
        let rec = Rec::Held {
            fingerprint: request.fingerprint,
            token,
            until: until.millis(),
            held: request.held.clone(),
            client: request.client,
            fence,
        };
        self.keys.insert(request.id, rec);
        let change = Change::Taken {
            fence,
            until: until.millis(),
            lease_ms: request.lease.as_millis() as u64,
            previous: previous.filter(|_| lease_expired),
        };
        (Begin::Started { token, lease_until: until, lease_expired, fence }, Some(change))
    }

    /// The fence of the lease `token` holds on `id`, while it is the key's last and still kept.
    fn held_by(&self, id: &ClaimId, token: LeaseToken, now: Timestamp) -> Option<u64> {
        match self.keys.get(id) {
            Some(Rec::Held { token: t, until, fence, .. }) if *t == token && *until > kept_after(now) => Some(*fence),
            _ => None,
        }
    }

    pub fn complete(
        &mut self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
        now: Timestamp,
    ) -> (Option<Timestamp>, Option<Change>) {
        let Some(fence) = self.held_by(id, token, now) else { return (None, None) };
        let fingerprint = match self.keys.get(id) {
            Some(Rec::Held { fingerprint, .. }) => *fingerprint,
            _ => return (None, None),
        };
        let until = now.plus(ttl);
        self.keys.insert(*id, Rec::Done { fingerprint, result: result.to_vec(), until: until.millis() });
        (Some(until), Some(Change::Completed { fence }))
    }

    pub fn release(&mut self, id: &ClaimId, token: LeaseToken, now: Timestamp) -> (bool, Option<Change>) {
        let Some(fence) = self.held_by(id, token, now) else { return (false, None) };
        self.keys.remove(id);
        (true, Some(Change::Released { fence }))
    }

    /// As PostgreSQL's `UPDATE … SET until = GREATEST(until, $1)`: the end becomes `lease` from the
    /// stamp, never earlier than it was.
    pub fn extend(
        &mut self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
        now: Timestamp,
    ) -> (Option<Timestamp>, Option<Change>) {
        let Some(fence) = self.held_by(id, token, now) else { return (None, None) };
        match self.keys.get_mut(id) {
            Some(Rec::Held { until, .. }) => {
                let new_until = now.plus(lease).max(Timestamp(*until));
                *until = new_until.millis();
                (Some(new_until), Some(Change::Extended { fence, until: new_until.millis() }))
            }
            _ => (None, None),
        }
    }

    pub fn peek(&self, id: &ClaimId, now: Timestamp) -> Option<RequestState> {
        match self.keys.get(id)? {
            Rec::Held { fingerprint, until, held, .. } if *until > now.millis() => Some(RequestState::Held {
                fingerprint: *fingerprint,
                lease_until: Timestamp(*until),
                held: held.clone(),
            }),
            Rec::Done { fingerprint, result, until } if *until > now.millis() => Some(RequestState::Completed {
                fingerprint: *fingerprint,
                result: result.clone(),
                expires_at: Timestamp(*until),
            }),
            _ => None,
        }
    }

    pub fn forget(&mut self, id: &ClaimId, now: Timestamp) -> Forget {
        match self.peek(id, now) {
            Some(RequestState::Completed { .. }) => {
                self.keys.remove(id);
                Forget::Forgotten
            }
            Some(RequestState::Held { .. }) => Forget::Held,
            None => Forget::Absent,
        }
    }

    pub fn sweep(&mut self, limit: usize, now: Timestamp) -> usize {
        let gone: Vec<ClaimId> = self
            .keys
            .iter()
            .filter(|(_, rec)| match rec {
                Rec::Held { until, .. } => idem_core::request::kept_until(false, *until) <= now.millis(),
                Rec::Done { until, .. } => *until <= now.millis(),
            })
            .map(|(id, _)| *id)
            .take(limit)
            .collect();
        gone.iter().for_each(|id| drop(self.keys.remove(id)));
        gone.len()
    }
}

/// How a node reaches the store: one life of its pool, with what a call may meet on the way.
pub struct Link {
    pub world: Shared,
    pub keys: Arc<Mutex<Keys>>,
    pub node: usize,
    pub life: u32,
    pub clock: Arc<dyn Clock>,
    pub call_timeout: Duration,
    /// Chance (percent) that a write's answer is lost after the store applied it.
    pub lose_answers: u64,
}

/// What one call does at the store, at `now` (the node's stamp): its answer and what changed.
type Apply<T> = Box<dyn FnOnce(&mut Keys, Timestamp) -> (T, Option<Change>) + Send>;

impl Link {
    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One call: sent now, stamped now by the node's clock, carried there and back by the world,
    /// given up at `call_timeout`.
    async fn call<T: Send + std::fmt::Debug + 'static>(
        &self,
        id: ClaimId,
        what: &'static str,
        apply: Apply<T>,
    ) -> Result<T, StoreError> {
        let write = what != "peek";
        let stamp = self.clock.now();
        let sending = {
            let mut w = world::lock(&self.world);
            let sent = w.now();
            w.alive(self.node, self.life, sent).then(|| {
                let latency = w.rng.millis(1, 20);
                let lost = write && w.rng.chance(self.lose_answers);
                (w.start, sent, w.deliver(Party::Node(self.node), Party::Store, sent, latency), lost)
            })
        };
        // A dead node's call never comes back.
        let Some((start, sent, arrives, lost)) = sending else { return std::future::pending().await };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (world, keys, node, life) = (Arc::clone(&self.world), Arc::clone(&self.keys), self.node, self.life);
        tokio::spawn(async move {
            world::until(start, arrives).await;
            let (applied_at, answer) =
                apply_at_store(&world, &keys, (node, life, what), id, (sent, stamp), apply).await;
            let back = {
                let mut w = world::lock(&world);
                let latency = w.rng.millis(1, 20);
                w.deliver(Party::Store, Party::Node(node), applied_at, latency)
            };
            world::until(start, back).await;
            if !lost && world::lock(&world).alive(node, life, back) {
                let _ = tx.send(answer);
            }
        });
        let answered = tokio::time::timeout(self.call_timeout, rx).await;
        let alive = world::lock(&self.world).alive(self.node, self.life, world::elapsed(start));
        if !alive {
            return std::future::pending().await;
        }
        match answered {
            Ok(Ok(answer)) => answer,
            _ if write => Err(StoreError::OutcomeUnknown("no answer within call_timeout".into())),
            _ => Err(StoreError::Unavailable("no answer within call_timeout".into())),
        }
    }

    async fn write<T: Send + std::fmt::Debug + 'static>(
        &self,
        id: ClaimId,
        what: &'static str,
        apply: Apply<T>,
    ) -> Result<T, StoreError> {
        self.call(id, what, apply).await
    }
}

/// Applies a call that reached the store: refused while it is down, held while it stalls; the
/// change is recorded as applied now, stamped with the node's time.
async fn apply_at_store<T: std::fmt::Debug>(
    world: &Shared,
    keys: &Mutex<Keys>,
    (node, life, what): (usize, u32, &'static str),
    id: ClaimId,
    (sent, stamp): (Duration, Timestamp),
    apply: Apply<T>,
) -> (Duration, Result<T, StoreError>) {
    let (start, stalled) = {
        let w = world::lock(world);
        (w.start, w.store_stalled(w.now()))
    };
    if let Some(end) = stalled {
        world::until(start, end).await;
    }
    let mut w = world::lock(world);
    let at = w.now();
    if w.store_down(at) {
        return (at, Err(StoreError::Unavailable("the store refused the call".into())));
    }
    let (answer, change) = apply(&mut keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner()), stamp);
    match change {
        Some(change) => {
            w.history.say(at, || format!("store n{node} {change:?} on {}", &id.to_string()[..8]));
            w.history.store.push(StoreEvent { at, node, life, sent, id, stamp: stamp.millis(), change });
        }
        None => w.history.say(at, || {
            format!("store n{node} {what} on {} (stamp {}): {answer:?}", &id.to_string()[..8], stamp.millis())
        }),
    }
    (at, Ok(answer))
}

#[async_trait]
impl RequestStore for Link {
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        let id = request.id;
        self.write(id, "begin", Box::new(move |keys, now| keys.begin(&request, now))).await
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let (id, result) = (*id, result.to_vec());
        self.write(id, "complete", Box::new(move |keys, now| keys.complete(&id, token, &result, ttl, now))).await
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        let id = *id;
        self.write(id, "release", Box::new(move |keys, now| keys.release(&id, token, now))).await
    }

    async fn extend_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let id = *id;
        self.write(id, "extend", Box::new(move |keys, now| keys.extend(&id, token, lease, now))).await
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        let id = *id;
        self.call(id, "peek", Box::new(move |keys, now| (keys.peek(&id, now), None))).await
    }

    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError> {
        let id = *id;
        let now = self.clock.now();
        Ok(self.keys().forget(&id, now))
    }

    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        let now = self.clock.now();
        Ok(self.keys().sweep(limit, now))
    }
}

/// The store's keys reached directly, on a clock the caller moves: what the conformance suite runs
/// on (`tests/conformance.rs`), so that the model the simulation trusts is the contract.
pub struct Direct {
    pub keys: Mutex<Keys>,
    pub clock: Arc<dyn Clock>,
}

impl Direct {
    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl RequestStore for Direct {
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        Ok(self.keys().begin(&request, self.clock.now()).0)
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.keys().complete(id, token, result, ttl, self.clock.now()).0)
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        Ok(self.keys().release(id, token, self.clock.now()).0)
    }

    async fn extend_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.keys().extend(id, token, lease, self.clock.now()).0)
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        Ok(self.keys().peek(id, self.clock.now()))
    }

    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError> {
        Ok(self.keys().forget(id, self.clock.now()))
    }

    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        Ok(self.keys().sweep(limit, self.clock.now()))
    }
}
